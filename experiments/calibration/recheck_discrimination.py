"""Make a kept protocol run's discrimination check again with the approximations the lab has now,
and rebuild its report (crasplab.verdicts.predictions.recheck_discrimination): the check the run
started with stays in predictions.json under `discrimination_at_start`, and the report says the
check was remade after the run.

    python experiments/calibration/recheck_discrimination.py evidence/protocol-clip-ape-copying

Only the check changes: the predictions, the records and the verdicts are the run's.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from crasplab.reports.length_gen import write_report
from crasplab.verdicts.predictions import SEARCH_SECONDS, recheck_discrimination

# The tasks whose approximations grew after their runs (the k-gram lookups for copying).
DEFAULT_TASKS = ("NF", "NB")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="length_gen protocol run folders")
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, help=f"default: {' '.join(DEFAULT_TASKS)}")
    parser.add_argument(
        "--search-seconds", type=float, default=SEARCH_SECONDS, help=f"default: {SEARCH_SECONDS:g}; 0 skips the search"
    )
    args = parser.parse_args(argv)
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    for run in args.runs:
        rechecked = recheck_discrimination(run, args.tasks, today, args.search_seconds)
        write_report(run)
        print(f"{run}: rechecked {', '.join(rechecked) or 'nothing (no task predicted not to generalize)'}")


if __name__ == "__main__":
    main()
