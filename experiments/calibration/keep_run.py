"""Keep a finished length_gen run in the repository: copy its folder without what only resuming
needs (each job's checkpoint.npz and progress.json, the folder's lock), so that the copy holds
every record its report is computed from and rebuilds the same report. Each job's metrics.jsonl
is kept compressed (metrics.jsonl.gz, as a job that finished writes it; docs/evidence.md).
experiments/calibration/compress_logs.py does the same for a folder kept otherwise.

    python experiments/calibration/keep_run.py runs/length_gen/ape-protocol evidence/protocol-ape

The checkpoints are what the copy gives up: experiments/occurrence_cells.py and
experiments/mechanism.py need a run with its checkpoints, not a kept copy.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from crasplab.records.run_folder import LOCK_FILE, compress_logs

LEFT_BEHIND = ("checkpoint.npz", "progress.json", LOCK_FILE)


def keep_run(run_dir: Path, dest: Path) -> None:
    if not (run_dir / "config.json").is_file():
        raise SystemExit(f"error: {run_dir} has no config.json: not a run folder of experiments/length_gen.py")
    if dest.exists():
        raise SystemExit(f"error: {dest} exists; remove it first or choose another destination")
    shutil.copytree(run_dir, dest, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    compress_logs(dest)  # a job that finished before its log was compressed: a kill, or older code


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a length_gen run folder")
    parser.add_argument("dest", type=Path, help="where the copy goes (must not exist)")
    args = parser.parse_args(argv)
    keep_run(args.run, args.dest)
    print(f"{args.dest}: {sum(1 for path in args.dest.rglob('*') if path.is_file())} files")


if __name__ == "__main__":
    main()
