"""The paper grid's dry run (experiments/paper_grid.py, crasplab.train.plan): every job listed,
placed longest first on the engine's slots, and the time estimated from the step time."""

from __future__ import annotations

import re

import pytest

from tests.tiny import TINY_MODEL, tiny_config
from crasplab.train.loop import Job
from crasplab.train.plan import measure_step_seconds, place, step_shape
from experiments import paper_grid


def job(task: str, max_steps: int) -> Job:
    return Job(
        task_code=task,
        seed=0,
        model=TINY_MODEL,
        train=tiny_config(max_steps=max_steps),
        task_overrides=dict(alphabet_size=8),
        out_dir=f"{task}-{max_steps}",
    )


def test_jobs_are_placed_longest_first_on_the_slot_that_frees_first():
    jobs = [job("UR", 10), job("UR", 40), job("UR", 30), job("UR", 20)]
    seconds = {step_shape(jobs[0]): 1.0}
    placements = {p.job.out_dir: (p.slot, p.start_s, p.end_s) for p in place(jobs, 2, seconds)}
    assert placements == {
        "UR-40": (0, 0.0, 40.0),
        "UR-30": (1, 0.0, 30.0),
        "UR-20": (1, 30.0, 50.0),
        "UR-10": (0, 40.0, 50.0),
    }


@pytest.mark.slow
def test_a_step_is_measured_on_the_jobs_own_shapes():
    seconds = measure_step_seconds(job("UR", 10))
    assert 0 < seconds < 5


def test_the_dry_run_lists_every_job_of_the_three_encodings_and_trains_nothing(tmp_path, capsys):
    paper_grid.main(["--dry-run", "--step-seconds", "0.1", "--out", str(tmp_path), "--workers", "4"])
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith(str(tmp_path))]
    assert len(rows) == 3 * 10 * 3  # encodings x tasks x the paper preset's seeds
    assert {row.split("/")[-3] for row in rows} == {"ape", "rope", "nope"}
    assert {int(row.split()[1]) for row in rows} == {0, 1, 2, 3}
    # Every paper job has a 30,000-step cap: at 0.1 s a step, 90 jobs make 75 job-hours.
    hours = float(re.search(r"at most ([\d.]+) h \(([\d.]+) job-hours", text).group(2))
    assert hours == 90 * 30_000 * 0.1 / 3600
    assert not any(tmp_path.iterdir()), "a dry run wrote files"
