"""Seeds of a task trained as one vmapped stack by one worker (train.workers with several folders),
the pure grouping of jobs into stacks (train.stacks), and their placement on a GPU share
(train.engines): grouped once, refused where they cannot share a stack, recorded together.

No GPU here: the Ray test advertises a fake one (JAX still trains on the CPU), so it checks the
placement records and the grouping, not memory or speed on a real device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crasplab.records.files import write_json
from crasplab.train.checkpoint import save_checkpoint
from crasplab.train.engines import PLACEMENTS_FILE, EngineSettings, ray_units, run_on_ray
from crasplab.train.loop import Job, by_resume_step, run_stack
from crasplab.train.stacks import group_into_stacks
from crasplab.train.workers import read_stack
from tests.tiny import ROOT, TINY_MODEL, comparable, tiny_config

CONFIGS = {steps: tiny_config(max_steps=steps, eval_every=8, checkpoint_every=8) for steps in (8, 16)}


def job(folder: Path, task: str = "UR", seed: int = 0, max_steps: int = 16) -> Job:
    return Job(
        task_code=task,
        seed=seed,
        model=TINY_MODEL,
        train=CONFIGS[max_steps],
        task_overrides=dict(alphabet_size=8),
        out_dir=str(folder),
    )


def written(job: Job) -> Job:
    """The job with its folder and job.json, as the engines leave it for a worker."""
    write_json(job.files.job_file, job.to_dict())
    return job


def run_workers(*folders: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "crasplab.train.workers", *map(str, folders)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


# -- grouping -----------------------------------------------------------------------------------
jobs_strategy = st.lists(
    st.tuples(st.sampled_from(["UR", "UL"]), st.integers(0, 5), st.sampled_from([8, 16])), max_size=14
).map(lambda specs: [job(Path(f"j{i}"), task, seed, steps) for i, (task, seed, steps) in enumerate(specs)])


@given(jobs_strategy, st.one_of(st.none(), st.integers(1, 5)))
def test_every_job_lands_in_exactly_one_homogeneous_stack_of_bounded_size(jobs, stack_size):
    stacks = group_into_stacks(jobs, stack_size)
    assert sorted(j.out_dir for stack in stacks for j in stack) == sorted(j.out_dir for j in jobs)
    assert all(stack and len({j.stack_key() for j in stack}) == 1 for stack in stacks)
    assert all(len(stack) <= (stack_size or len(jobs)) for stack in stacks)
    # As few stacks as the bound allows for each key, and they are nearly equal.
    for key in {j.stack_key() for j in jobs}:
        sizes = [len(stack) for stack in stacks if stack[0].stack_key() == key]
        count = sum(j.stack_key() == key for j in jobs)
        assert len(sizes) == -(-count // (stack_size or count))
        assert max(sizes) - min(sizes) <= 1


@given(jobs_strategy, st.one_of(st.none(), st.integers(1, 5)))
def test_stacks_follow_the_order_of_the_jobs(jobs, stack_size):
    stacks = group_into_stacks(jobs, stack_size)
    assert group_into_stacks(list(jobs), stack_size) == stacks
    # Within a key, the stacks cut the jobs' order into consecutive pieces; keys come by first job.
    for key in {j.stack_key() for j in jobs}:
        assert [j for stack in stacks if stack[0].stack_key() == key for j in stack] == [
            j for j in jobs if j.stack_key() == key
        ]
    firsts = [next(i for i, j in enumerate(jobs) if j.stack_key() == stack[0].stack_key()) for stack in stacks]
    assert firsts == sorted(firsts)


def test_seven_seeds_at_most_four_a_stack_make_two_stacks_of_four_and_three():
    stacks = group_into_stacks([job(Path(f"s{seed}"), seed=seed) for seed in range(7)], 4)
    assert [[j.seed for j in stack] for stack in stacks] == [[0, 1, 2, 3], [4, 5, 6]]


def test_a_stack_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        group_into_stacks([job(Path("a"))], 0)


def test_ray_stacks_the_seeds_of_a_task_only_on_a_gpu_share(tmp_path):
    jobs = [job(tmp_path / f"{task}{seed}", task, seed) for task in ("UR", "UL") for seed in (0, 1, 2)]
    on_gpu = ray_units(jobs, EngineSettings(engine="ray", gpu_share=0.5, stack_size=2))
    assert [[(j.task_code, j.seed) for j in s] for s in on_gpu] == [
        [("UR", 0), ("UR", 1)],
        [("UR", 2)],
        [("UL", 0), ("UL", 1)],
        [("UL", 2)],
    ]
    assert ray_units(jobs, EngineSettings(engine="ray")) == [[j] for j in jobs]  # CPU jobs: one per task


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(engine="ray", gpu_share=0.5, stack_size=0), "at least 1"),
        (dict(engine="ray", stack_size=2), "applies only where seeds train as stacks"),
        (dict(engine="local", stack_size=2), "applies only where seeds train as stacks"),  # this CPU-only machine
    ],
)
def test_a_stack_size_is_refused_where_no_stack_is_formed(settings, message):
    with pytest.raises(ValueError, match=message):
        EngineSettings(**settings)


# -- the worker on several folders --------------------------------------------------------------
def test_folders_that_differ_in_more_than_the_seed_are_refused_naming_the_difference(tmp_path):
    ur, ul = written(job(tmp_path / "UR", "UR")), written(job(tmp_path / "UL", "UL", seed=1))
    with pytest.raises(SystemExit, match=rf"{ul.folder} differs from {ur.folder} in task_code \('UL', not 'UR'\)"):
        read_stack([str(ur.folder), str(ul.folder)])
    longer = written(job(tmp_path / "longer", seed=2, max_steps=8))
    with pytest.raises(SystemExit, match=r"in train\.max_steps \(8, not 16\)"):
        read_stack([str(ur.folder), str(longer.folder)])
    with pytest.raises(SystemExit, match="named more than once"):
        read_stack([str(ur.folder), str(ur.folder)])
    twin = written(job(tmp_path / "twin"))
    with pytest.raises(SystemExit, match="repeat one"):
        read_stack([str(ur.folder), str(twin.folder)])
    assert not any((tmp_path / name / "metrics.jsonl").exists() for name in ("UR", "UL", "longer", "twin"))


def test_the_worker_trains_several_folders_as_the_stack_run_stack_trains(tmp_path):
    """Same code path, same numbers: the worker on two folders equals run_stack on the same two
    jobs, file by file (times aside). Run again on finished folders, it trains nothing and exits 0."""
    by_worker = [written(job(tmp_path / "worker" / f"seed{seed}", seed=seed)) for seed in (0, 1)]
    done = run_workers(*(j.folder for j in by_worker))
    assert done.returncode == 0, done.stderr[-3000:]
    direct = [job(tmp_path / "direct" / f"seed{seed}", seed=seed) for seed in (0, 1)]
    run_stack(direct)
    for a, b in zip(by_worker, direct):
        assert comparable(a.folder) == comparable(b.folder)
        assert json.loads(a.files.progress_file.read_text())["step"] == 16
        [started] = [json.loads(line)["from_step"] for line in a.files.provenance_file.open()]
        assert started == 0
    finished = [a.files.result_file.stat().st_mtime_ns for a in by_worker]
    again = run_workers(*(j.folder for j in by_worker))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [a.files.result_file.stat().st_mtime_ns for a in by_worker] == finished


def test_jobs_resume_in_one_stack_per_checkpoint_step(tmp_path):
    """A stack killed while it wrote its checkpoints leaves them at different steps; each step's
    jobs resume together (and jobs without a checkpoint start together)."""
    jobs = [job(tmp_path / f"seed{seed}", seed=seed) for seed in range(4)]
    for j, step in zip(jobs, (8, None, 16, 8)):
        j.folder.mkdir()
        if step is not None:
            save_checkpoint(j.files.checkpoint_file, {}, dict(step=step))
    assert [[j.seed for j in group] for group in by_resume_step(jobs)] == [[0, 3], [1], [2]]


# -- on Ray with a (fake) GPU -------------------------------------------------------------------
@pytest.mark.slow
def test_on_a_gpu_share_the_seeds_of_a_task_go_to_one_ray_task(tmp_path):
    """One fake GPU: Ray gives the stack's task CUDA_VISIBLE_DEVICES=0 (JAX on this CPU-only
    install ignores it) and both folders record one attempt that names both."""
    ray = pytest.importorskip("ray", reason="the Ray engine needs Ray: pip install -e '.[cluster]'")
    ray.shutdown()
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False)
    try:
        jobs = [job(tmp_path / f"seed{seed}", seed=seed, max_steps=8) for seed in (0, 1)]
        run_on_ray(jobs, EngineSettings(engine="ray", gpu_share=0.5), show_progress=False)
    finally:
        ray.shutdown()
    folders = [str(j.folder.resolve()) for j in jobs]
    for j in jobs:
        start, end = [json.loads(line) for line in (j.folder / PLACEMENTS_FILE).read_text().splitlines()]
        assert (start["event"], end["event"], end["returncode"]) == ("start", "end", 0)
        assert start["folders"] == folders and start["gpu_share"] == 0.5
        assert start["cuda_visible_devices"] == "0"
        assert json.loads(j.files.result_file.read_text())["steps"] == 8
