"""The training recipe judged on the training bin alone: fit rate, steps to fit and time per job
of each run folder given, by the protocol's fit rule (every training-length string exact, at
least 500 of them). No test bin is read, so a recipe chosen from this table is chosen on
training lengths only.

    python experiments/calibration/recipe_study.py evidence/three-seeds-ape evidence/protocol-ape
"""

from __future__ import annotations

import argparse
from pathlib import Path

from crasplab.reports.length_gen import read_records, read_settings
from crasplab.reports.protocol import recipe_markdown, recipe_text
from crasplab.verdicts.counting import recipe_rows
from crasplab.train.config import RunSettings
from crasplab.verdicts.rules import VerdictRules, read_protocol


def recipe_of(settings: RunSettings) -> str:
    """The recipe of the run's first task, and its seeds."""
    return f"{recipe_text(settings.train[settings.tasks[0]])}; seeds {list(settings.seeds)}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="length_gen run folders, or kept copies of them")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        settings = read_settings(run_dir)
        protocol = read_protocol(run_dir)
        rule = "the protocol's rules (protocol.json)"
        if protocol is None:
            # Runs from before the protocol evaluated fewer than 500 training-length strings; for
            # them a seed fits when every string of its (smaller) training bin is exact.
            protocol, rule = (
                VerdictRules(min_train_strings=1),
                "made before the protocol: fit = its whole training bin exact",
            )
        rows = recipe_rows(protocol, read_records(run_dir, settings), settings.tasks)
        print(f"# {run_dir}\n\n{recipe_of(settings)}; {rule}\n\n{recipe_markdown(rows)}")


if __name__ == "__main__":
    main()
