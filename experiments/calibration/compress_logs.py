"""Store the logs of kept run folders compressed (crasplab.records.run_folder.LOG_FILES: each
job's metrics.jsonl, an experiment's results.jsonl, as <name>.gz), as evidence/ keeps them; the
lab reads them as before (docs/evidence.md). For a folder copied into evidence/ by hand; a
length_gen run kept by keep_run.py is compressed already.

    python experiments/calibration/compress_logs.py evidence/realistic/lorem-smollm2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from crasplab.records.run_folder import compress_logs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="kept run folders (or folders of them)")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            raise SystemExit(f"error: {folder} is not a folder; give a kept run folder, such as evidence/quick-run-ape")
        print(f"{folder}: {len(compress_logs(folder))} log(s) compressed")


if __name__ == "__main__":
    main()
