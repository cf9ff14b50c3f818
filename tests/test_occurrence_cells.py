"""Occurrence cells: the quadrants against L are exactly where a bounded program exact on the
training lengths fails, the tables partition the strings, and the breakdown of a trained job
recounts what training recorded."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crasp.approximations import last_within_window_or_count
from crasp.check import correct_answers
from crasp.tasks import get_task
from crasplab.records.job_folder import BinEval, JobFolder
from crasplab.reports.occurrence_cells import (
    DISCRIMINATING,
    QUADRANTS,
    cells_markdown,
    grid_counts,
    grid_edges,
    quadrant_counts,
    quadrant_index,
)
from crasplab.train.loop import Job, run_job
from tests.tiny import TINY_MODEL, tiny_config

cells = st.integers(1, 40).flatmap(
    lambda longest: st.tuples(
        st.just(longest),
        st.lists(st.tuples(st.integers(0, 4 * longest), st.integers(2, 4 * longest), st.booleans()), max_size=60),
    )
)


@given(cells)
def test_quadrants_partition_the_strings_and_count_right_answers(case):
    longest, rows = case
    distances, counts, exact = (np.array(column, dtype=int) for column in zip(*rows)) if rows else ([], [], [])
    table = quadrant_counts(distances, counts, exact, longest)
    assert list(table) == list(QUADRANTS)
    assert sum(cell["total"] for cell in table.values()) == len(rows)
    assert sum(cell["correct"] for cell in table.values()) == sum(bool(e) for *_, e in rows)
    far_and_many = sum(d >= longest and k > longest for d, k, _ in rows)
    assert table[DISCRIMINATING]["total"] == far_and_many
    for cell in table.values():
        if cell["total"]:
            assert cell["low"] <= cell["correct"] / cell["total"] <= cell["high"]


@given(cells)
def test_the_grid_holds_every_string_once(case):
    longest, rows = case
    widest = 4 * longest
    distances, counts, exact = (np.array(column, dtype=int) for column in zip(*rows)) if rows else ([], [], [])
    distance_edges, count_edges = grid_edges(longest, widest)
    grid = grid_counts(distances, counts, exact, distance_edges, count_edges)
    assert len(grid) == len(distance_edges) - 1 and all(len(row) == len(count_edges) - 1 for row in grid)
    assert sum(cell["total"] for row in grid for cell in row) == len(rows)
    assert longest in distance_edges and longest + 1 in count_edges  # the grid refines the quadrants


@pytest.mark.parametrize("code", ["NLLast", "NRLast"])
def test_the_bounded_program_fails_exactly_in_the_discriminating_quadrant(code):
    longest = 6
    task = get_task(code, occurrences="spread")
    rng = np.random.default_rng(0)
    parts = [task.sample(rng, 40, length) for length in range(3 * longest + 1, 4 * longest + 1)]
    program = last_within_window_or_count(task.side, longest)(task.symbols)
    right, quadrant = [], []
    for examples in parts:
        right.append(correct_answers(task, program, examples))
        quadrant.append(quadrant_index(*task.occurrence_cells(examples), longest))
    right, quadrant = np.concatenate(right), np.concatenate(quadrant)
    discriminating = quadrant == QUADRANTS.index(DISCRIMINATING)
    assert discriminating.any() and (~discriminating).any()  # the spread sampler reaches both sides
    assert np.array_equal(right, ~discriminating)


def test_markdown_shows_each_seed_and_marks_empty_cells():
    quadrants = quadrant_counts(np.array([0, 30]), np.array([2, 30]), np.array([True, False]), 20)
    summary = dict(
        bin="61-80",
        longest_training_context=20,
        tasks=dict(
            NLLast=dict(
                predicted="does not generalize",
                seeds=[dict(seed=1000, quadrants=quadrants)],
                grid=dict(distance_edges=[0, 20, 81], count_edges=[2, 21, 81], cells=[[quadrants[QUADRANTS[0]]]]),
            )
        ),
    )
    text = cells_markdown(summary)
    assert "| 1000 | 1.000 [" in text and "0.000 [" in text  # the seed's near cell is right, its far cell wrong
    assert "| 1000 | " in text and text.count(" - |") >= 2  # the two empty quadrants


def test_recount_of_a_trained_job_equals_its_record(tmp_path, monkeypatch):
    from experiments import occurrence_cells

    run_dir = tmp_path / "run"
    config = tiny_config(train_lengths=(4, 6), test_bins=((4, 6), (12, 14)), max_steps=8, eval_every=8)
    job = Job(
        task_code="NLLast",
        seed=3,
        model=TINY_MODEL,
        train=config,
        task_overrides=dict(occurrences="spread"),
        out_dir=str(run_dir / "NLLast" / "seed3"),
    )
    run_job(job)
    result = json.loads(JobFolder(run_dir / "NLLast" / "seed3").result_file.read_text())
    recorded = BinEval.from_dict(result["bins"][1])
    distances, counts, exact = occurrence_cells.seed_cells(run_dir, "NLLast", 3, 1, recorded)
    assert int(exact.sum()) == recorded.correct and len(exact) == recorded.n
    assert distances.max() < 14 and counts.min() >= 2
    tampered = BinEval.from_dict({**result["bins"][1], "accuracy": (recorded.correct + 1) / recorded.n})
    with pytest.raises(SystemExit, match="training recorded"):
        occurrence_cells.seed_cells(run_dir, "NLLast", 3, 1, tampered)


def test_report_only_rebuilds_the_committed_tables_from_their_json(tmp_path):
    """occurrence_cells.md is computed from occurrence_cells.json alone, in the library's task order."""
    import shutil

    from experiments import occurrence_cells

    kept = Path(__file__).resolve().parents[1] / "evidence/protocol-ape-spread"
    for name in (occurrence_cells.CELLS_JSON, occurrence_cells.CELLS_MARKDOWN):
        shutil.copy(kept / name, tmp_path / name)
    (tmp_path / occurrence_cells.CELLS_MARKDOWN).unlink()
    occurrence_cells.main(["--report-only", str(tmp_path)])
    rebuilt = (tmp_path / occurrence_cells.CELLS_MARKDOWN).read_text()
    assert rebuilt == (kept / occurrence_cells.CELLS_MARKDOWN).read_text()
