"""experiments/compiled.py on a tiny configuration: records, summary, report and figure from its files."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crasp import witnesses as W
from crasp.nexttoken import encode
from crasplab.compiler import compile_program
from crasplab.compiler.run import output_table, table_and_definitions
from crasplab.compiler.study import exact_up_to, first_failure, margin_one_strings, precision

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
            "--witness-dtypes",
            "float32",
            "float64",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["dtype"], r["length"], r["compiled_right"]) for r in records] == [
        ("witness", "float32", 4, 3),
        ("witness", "float32", 9, 3),
        ("witness", "float64", 4, 3),
        ("witness", "float64", 9, 3),
        ("rounding", "float32", 11, 3),
        ("rounding", "float64", 11, 3),
    ]
    assert {r["dtype"] for r in records if r["kind"] == "rounding"} == {"float32", "float64"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["witnesses"]["Majority majority nope 16"]["exact_up_to"] == {"float32": 9, "float64": 9}
    assert all(0 <= r["count_error"] < 0.5 for r in records if r["kind"] == "rounding")
    assert (out / "accuracy_by_length.png").stat().st_size > 0
    # The report is rebuilt from metrics.jsonl: a record changed there shows up in it.
    broken = [dict(r, compiled_right=1) if r["length"] == 9 else r for r in records]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "compiled.py"), "--report-only", str(out)],
        check=True,
        capture_output=True,
    )
    text = (out / "report.md").read_text()
    assert "| 4 | 4 |" in text and "9: 1 / 1 / 3 of 3" in text  # exact up to 4 in both dtypes now


def exact_up_to_by_walking(by_length):
    """The reference: walk up the lengths, stop at the first failure."""
    best = 0
    for n in sorted(by_length):
        right, strings = by_length[n][0], by_length[n][-1]
        if right < strings:
            break
        best = n
    return best


runs = st.dictionaries(
    st.integers(1, 10**6), st.integers(1, 5).flatmap(lambda s: st.tuples(st.integers(0, s), st.just(s))), max_size=8
)


@given(runs)
def test_exact_up_to_stops_below_the_first_failing_length(by_length):
    by_length = {n: list(v) for n, v in by_length.items()}
    assert exact_up_to(by_length) == exact_up_to_by_walking(by_length)
    failing = [n for n, (c, s) in by_length.items() if c < s]
    assert first_failure(by_length) == (min(failing) if failing else None)


def test_float64_runs_in_64_bit_mode_and_float32_without_it():
    program = W.majority(("a", "b"))
    compiled = compile_program(program, "nope", max_length=64)
    ids = encode(program, margin_one_strings(np.random.default_rng(0), 2, 9))
    dtypes = {}
    for dtype in ("float64", "float32"):
        with precision(dtype):
            out = compiled.model(dtype)(jnp.asarray(ids), return_head_outputs=True)
            dtypes[dtype] = out.head_outputs_LxBxTxHxK.dtype
    assert dtypes == {"float64": jnp.float64, "float32": jnp.float32}
    assert not jax.config.jax_enable_x64  # the mode ends with the block


def test_one_pass_gives_the_models_table_and_the_counts_at_margin_one():
    program = W.majority(("a", "b"))
    compiled = compile_program(program, "nope", max_length=2048)
    ids = encode(program, margin_one_strings(np.random.default_rng(1), 3, 1001))
    table, values = table_and_definitions(compiled, ids)
    assert (table == output_table(compiled.model(), ids)).all()
    counted = np.cumsum(ids == program.symbol_ids()["a"], axis=1)  # n[a] at every position
    assert np.abs(values["n[a]"] - counted).max() < 0.01
    assert np.abs(values["n[a]"][:, -3] - values["n[b]"][:, -3] - 1).max() < 0.01  # <sep>: margin 1
