"""experiments/compiled.py on a tiny configuration: records, summary, report and figure from its files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two processes that start jax and compile every step: about a minute on 2 cores
def test_compiled_experiment_writes_a_report_computed_from_its_records(tmp_path):
    out = tmp_path / "run"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "compiled.py"),
            "--out",
            str(out),
            "--tasks",
            "Majority",
            "--lengths",
            "4",
            "9",
            "--samples",
            "3",
            "--rounding-lengths",
            "11",
            "--rounding-dtypes",
            "float32",
            "float64",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["length"], r["compiled_right"]) for r in records] == [
        ("witness", 4, 3),
        ("witness", 9, 3),
        ("rounding", 11, 3),
        ("rounding", 11, 3),
    ]
    assert {r["dtype"] for r in records if r["kind"] == "rounding"} == {"float32", "float64"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["witnesses"]["Majority majority nope 16"]["exact_up_to"] == 9
    assert (out / "accuracy_by_length.png").stat().st_size > 0
    # The report is rebuilt from metrics.jsonl: a record changed there shows up in it.
    broken = [dict(r, compiled_right=1) if r["length"] == 9 else r for r in records]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "compiled.py"), "--report-only", str(out)],
        check=True,
        capture_output=True,
    )
    assert "| 4 |" in (out / "report.md").read_text() and "9: 1/3 of 3" in (out / "report.md").read_text()
