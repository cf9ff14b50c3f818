"""The end of every experiment script that evaluates into a run folder and reports on it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from crasp.tasks import TaskError
from results.files import ResultFileError
from results.run_folder import RunFolderError

# The errors a user's flags or folders can cause: each message says what was wrong and what to do.
USER_ERRORS = (TaskError, RunFolderError, ResultFileError)


def evaluate_and_report(args: argparse.Namespace, evaluate: Callable[[argparse.Namespace], Path],
                        write_report: Callable[[Path], dict], report_markdown: Callable[[dict], str]) -> None:
    """Evaluate what the run folder lacks (or nothing, with --report-only), rebuild the report from
    the folder's files and print it."""
    try:
        out = args.report_only or evaluate(args)
        summary = write_report(out)
    except USER_ERRORS as error:
        raise SystemExit(f"error: {error}")
    print(report_markdown(summary))
    print(f"report: {out / 'report.md'}")
