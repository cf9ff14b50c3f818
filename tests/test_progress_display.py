"""What a run shows while it trains (crasplab.train.workers.TaskBars): a task still queued says so,
with no rate and no ETA, and its clock starts with its own first step; without a terminal (a log
file, a batch job) progress is lines, one per evaluation and at most one per LINE_SECONDS between,
never redraws (issue 61: a flagship run's log held 180 KB of them)."""

import time
from types import SimpleNamespace

import pytest

import crasplab.train.workers as workers
from crasplab.records.files import write_json
from crasplab.records.job_folder import BinEval, JobResult
from crasplab.train.loop import Job
from crasplab.train.workers import TaskBars
from tests.tiny import TINY_MODEL, tiny_config

STEPS = 400
QUEUED = "UR: queued, 400 steps"


def make_job(tmp_path, task: str, seed: int = 0) -> Job:
    return Job(task, seed, TINY_MODEL, tiny_config(max_steps=STEPS), out_dir=str(tmp_path / task / f"seed{seed}"))


def report(job: Job, step: int, accuracy: float | None = None) -> dict:
    """A progress report as a training job sends it (train.loop._progress_of)."""
    return dict(
        task=job.task_code,
        seed=job.seed,
        folder=str(job.folder),
        step=step,
        max_steps=STEPS,
        loss=1.0,
        train_bin_accuracy=accuracy,
    )


def finished(job: Job) -> Job:
    """The job with its result.json, as a job that is done has it."""
    bins = (BinEval(lo=1, hi=4, accuracy=1.0, n=16),)
    result = JobResult(job.task_code, job.seed, job.model.pe, STEPS, False, 12.0, bins)
    write_json(job.files.result_file, result.to_dict())
    return job


def test_a_queued_task_shows_queued_and_no_eta_and_its_clock_starts_at_its_first_step(tmp_path):
    uf, ur = make_job(tmp_path, "UF"), make_job(tmp_path, "UR")
    bars = TaskBars([uf, ur], terminal=True)
    assert not bars.lines and str(bars.bars["UR"]) == QUEUED
    bars.update(report(uf, 100))
    shown = str(bars.bars["UF"])
    assert "100/400" in shown and "step/s" in shown and "<" in shown  # a task that trains: rate and ETA
    assert str(bars.bars["UR"]) == QUEUED  # still waiting: neither, however long the run has gone
    first_step = time.time()
    bars.update(report(ur, 10))
    assert bars.bars["UR"].start_t >= first_step  # its rate and ETA count from its own first step
    assert "10/400" in str(bars.bars["UR"]) and "queued" not in str(bars.bars["UR"])
    bars.close()


def test_a_task_done_before_it_started_shows_its_steps_done_not_queued(tmp_path):
    """A resumed run whose task finished in an earlier invocation: its bar is full, not waiting."""
    uf, ur = make_job(tmp_path, "UF"), make_job(tmp_path, "UR")
    bars = TaskBars([uf, ur], terminal=True)
    bars.finish(ur)
    assert "400/400" in str(bars.bars["UR"]) and "queued" not in str(bars.bars["UR"])
    assert str(bars.bars["UF"]) == "UF: queued, 400 steps"
    bars.close()


@pytest.mark.parametrize(
    ("enabled", "terminal", "lines"),
    [(True, True, False), (True, False, True), (False, True, True)],
    ids=["terminal", "not-a-terminal", "no-progress"],
)
def test_lines_instead_of_bars_without_a_terminal_or_with_progress_off(tmp_path, capsys, enabled, terminal, lines):
    job = make_job(tmp_path, "UF")
    bars = TaskBars([job], enabled=enabled, terminal=terminal)
    bars.update(report(job, 100, accuracy=0.5))
    bars.close()
    assert bars.lines is lines
    assert ("UF: 100/400 steps, seed 0 evaluated at step 100" in capsys.readouterr().err) is lines


def test_stderr_that_is_not_a_terminal_gets_lines_by_default(tmp_path, capsys):
    """pytest's captured stderr is not a terminal, as a log file is not."""
    bars = TaskBars([make_job(tmp_path, "UF")])
    bars.close()
    assert bars.lines and not capsys.readouterr().err  # a disabled bar draws nothing, not even when closed


def test_without_a_terminal_a_run_logs_a_line_per_evaluation_and_per_interval_and_no_redraws(
    tmp_path, capsys, monkeypatch
):
    """A report every 4 steps, 10 s apart (a fake clock), evaluated every 100 steps: a line for each
    evaluation, one per LINE_SECONDS between them, one when the stack starts and one when the seed
    is done; nothing that redraws a line."""
    now = [0.0]
    monkeypatch.setattr(workers, "time", SimpleNamespace(monotonic=lambda: now[0]))
    job = make_job(tmp_path, "UF")
    bars = TaskBars([job], terminal=False)
    bars.stack_starts([job])
    for step in range(4, STEPS + 1, 4):
        now[0] += 10.0
        bars.update(report(job, step, accuracy=None if step < 100 else step // 100 / 4))
    bars.finish(finished(job))
    bars.close()
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    assert [line.split(", ", 1)[1] for line in lines if "evaluated" in line] == [
        f"seed 0 evaluated at step {step}: training-bin accuracy {step / 400:.3f}" for step in (100, 200, 300, 400)
    ]
    assert lines[0].endswith("UF: 0/400 steps, a stack of seeds [0] starts")
    assert lines[-1].endswith("UF: 400/400 steps, seed 0 done at step 400 after 12 s, training-bin accuracy 1.000")
    between = [line for line in lines if "steps, loss" in line]
    # 100 reports over 1000 s: one every 30 s at most, and none where an evaluation's line was just written
    assert 0 < len(between) <= 1000 / TaskBars.LINE_SECONDS
    times = [float(line[1:8]) for line in between]
    assert all(later - earlier >= TaskBars.LINE_SECONDS for earlier, later in zip(times, times[1:]))
