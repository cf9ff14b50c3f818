"""Rebuild every kept report from its own files and compare: evidence/ is copied into a scratch
folder, each report there is rebuilt by its experiment's --report-only (in one process), and every
file of the copy is compared byte for byte with the kept one. A change to the records, their
readers or a report shows here what it changes in the kept runs (docs/evidence.md).

    python experiments/calibration/rebuild_kept.py              # a temporary copy, removed after
    python experiments/calibration/rebuild_kept.py --into /tmp/kept   # keep the copy to look at

Prints how many reports were rebuilt and files compared, then each rebuild that failed, each file
that differs and each file a rebuild added; exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import io
import shutil
import sys
import tempfile
from pathlib import Path

from crasplab.errors import command_boundary
from crasplab.records.run_folder import check_new_folder

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"
# The folder of a report -> the experiment that rebuilds it, by where it is kept; a run folder of
# experiments/length_gen.py otherwise. The tables beside some runs are rebuilt by their own scripts.
REPORT_WRITERS = (
    ("compiled_run", "compiled"),
    ("finetune/", "finetune"),
    ("mechanism/", "mechanism"),
    ("pretrained/", "pretrained"),
    ("realistic/", "realistic"),
)
TABLE_WRITERS = (("occurrence_cells.md", "occurrence_cells"), ("what_learned.md", "what_learned"))
# Logs of calls on a lent GPU, with their summaries: written once, by the call, not rebuilt.
NOT_REBUILT = ("gpu-",)


def rebuilds(evidence: Path) -> list[tuple[str, list[str]]]:
    """(experiment module, its arguments) for each report and table kept under `evidence`."""
    found = []
    for report in sorted(evidence.rglob("report.md")):
        kept_as = report.parent.relative_to(evidence).as_posix()
        if kept_as.startswith(NOT_REBUILT):
            continue
        writer = next((module for prefix, module in REPORT_WRITERS if kept_as.startswith(prefix)), "length_gen")
        # realistic.py takes its experiment first: the folder is named <experiment>-<model>
        experiment = [kept_as.split("/")[1].split("-")[0]] if writer == "realistic" else []
        found.append((writer, [*experiment, "--report-only", str(report.parent)]))
    for table, writer in TABLE_WRITERS:
        found += [(writer, ["--report-only", str(path.parent)]) for path in sorted(evidence.rglob(table))]
    return found


def rebuild(module: str, argv: list[str]) -> str | None:
    """Run one rebuild, its output swallowed; what went wrong, or None."""
    main = __import__(f"experiments.{module}", fromlist=["main"]).main
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            main(argv)
    except (Exception, SystemExit) as error:  # a failed rebuild is reported with the others, not raised
        return f"experiments/{module}.py {' '.join(argv)}: {error!r} {output.getvalue()[-300:]}"
    return None


def compare(kept: Path, copy: Path) -> tuple[int, list[str], list[str]]:
    """(files compared, those that differ, those the copy holds and the kept folder does not)."""
    kept_files = {path.relative_to(kept) for path in kept.rglob("*") if path.is_file()}
    copy_files = {path.relative_to(copy) for path in copy.rglob("*") if path.is_file()}
    differ = [str(name) for name in sorted(kept_files) if not filecmp.cmp(kept / name, copy / name, shallow=False)]
    return len(kept_files), differ, [str(name) for name in sorted(copy_files - kept_files)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--into", type=Path, help="a new folder to keep the rebuilt copy in (default: a temporary one)")
    args = parser.parse_args(argv)
    with command_boundary(), tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) if args.into is None else check_new_folder(args.into, "--into")
        shutil.copytree(EVIDENCE, copy, dirs_exist_ok=True)
        sys.path.insert(0, str(ROOT))
        planned = rebuilds(copy)
        failed = [problem for module, argv in planned if (problem := rebuild(module, argv)) is not None]
        compared, differ, added = compare(EVIDENCE, copy)
    print(
        f"{len(planned)} reports and tables rebuilt, {len(failed)} failed; {compared} kept files compared, "
        f"{len(differ)} differ, {len(added)} added"
    )
    for line in [
        *(f"failed: {p}" for p in failed),
        *(f"differs: {d}" for d in differ),
        *(f"added: {a}" for a in added),
    ]:
        print(line)
    if failed or differ or added:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
