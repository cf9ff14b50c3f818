"""The shape every experiment script shares, from its flags to its report.

    def main(argv=None):
        args = build_parser().parse_args(argv)          # shared flags: crasplab.cli.arguments
        run_from_flags(args, settings_from, default_out, run, Report(write_report, report_markdown))

`run_from_flags` (crasplab.cli.arguments) builds the Experiment below and runs it into --out, or
with --report-only rebuilds that folder's report. `settings()` turns the flags into the
experiment's frozen settings (crasplab.records.settings: validated when built), the one place a
Namespace is read; `run(settings, out)` does the work, calls open_run_folder (which locks the
folder) once everything it can check is checked, and writes config.json from the settings; the
report module rebuilds summary.json, report.md and the figures from the folder's files. Every
error a user's flags, files or machine can cause ends as one `error:` line, and Ctrl-C as one line
(crasplab.errors.command_boundary); the folder's lock is released when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from crasplab.errors import command_boundary
from crasplab.records.run_folder import check_output_folder, holding_run_folders

S = TypeVar("S")


@dataclass(frozen=True)
class Report:
    """An experiment's report module: `write(out)` rebuilds its files and returns the summary,
    `markdown(summary)` is what the script prints, `file` the report it points the reader to."""

    write: Callable[[Path], dict]
    markdown: Callable[[dict], str]
    file: str = "report.md"


@dataclass(frozen=True)
class Experiment(Generic[S]):
    settings: Callable[[], S]  # the command line's settings, validated (SettingsError otherwise)
    default_out: Callable[[S], Path]  # the run folder when --out is not given
    run: Callable[[S, Path], None]  # evaluate what the folder lacks
    report: Report


def run_experiment(experiment: Experiment, out: Path | None, report_only: Path | None) -> None:
    """Run the experiment into `out` and report on it, or with `report_only` rebuild that folder's
    report alone; print the report. Errors a user can act on end the script with `error: ...`
    (crasplab.errors.command_boundary)."""
    with command_boundary():
        if report_only is not None:
            out = report_only
            summary = experiment.report.write(out)
        else:
            settings = experiment.settings()
            out = check_output_folder(out or experiment.default_out(settings))
            with holding_run_folders():
                experiment.run(settings, out)
                summary = experiment.report.write(out)
    print(experiment.report.markdown(summary))
    print(f"report: {out / experiment.report.file}")
