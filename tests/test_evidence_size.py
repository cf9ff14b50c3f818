"""The tracked tree stays under its budget (benchmarks/tracked_size.py: 24 MiB, the developers'
guide's; a lent GPU carries at most 64 MiB), and the kept runs keep their logs compressed, the one
kind of file that grows with a run's length (docs/evidence.md)."""

import sys
from pathlib import Path

import pytest

from crasplab.records.run_folder import LOG_FILES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tracked_size  # noqa: E402


def test_the_tracked_tree_stays_under_its_budget():
    sizes = tracked_size.tracked_sizes(ROOT)
    if sizes is None:
        pytest.skip("not a git checkout: nothing says which files are tracked")
    table = tracked_size.size_table(sizes)
    assert sum(sizes.values()) < tracked_size.BUDGET_BYTES, f"over budget; what takes the room:\n{table}"


def test_kept_runs_store_their_logs_compressed():
    plain = sorted(str(path.relative_to(ROOT)) for name in LOG_FILES for path in (ROOT / "evidence").rglob(name))
    assert not plain, (
        f"{len(plain)} log(s) kept uncompressed, such as {plain[0]}: run experiments/calibration/compress_logs.py "
        "on their run folders"
    )


def test_the_table_counts_every_byte_once_by_kind():
    sizes = {"evidence/run/UF/seed0/metrics.jsonl.gz": 3 * 2**20, "evidence/run/report.md": 2**20, "crasp/a.py": 10}
    sizes |= {f"kind{k}/file": 1 for k in range(20)}
    table = tracked_size.size_table(sizes, budget=8 * 2**20, shown=3)
    assert table.splitlines()[0].startswith(f"tracked: 4.0 MiB in {len(sizes)} files; budget 8 MiB (50% used)")
    assert "   3.00      1  evidence/**/metrics.jsonl.gz" in table and "   1.00      1  evidence/**/report.md" in table
    assert table.splitlines()[-1] == f"{20 / 2**20:7.2f}     20  20 other kinds"  # crasp/ shown, the 20 ones not
