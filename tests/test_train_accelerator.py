"""The accelerator path, rehearsed on the CPU (CRASPLAB_ACCELERATOR_PATH=rehearse): seeds as
vmapped stacks with length buckets, stacks side by side in threads, batches sampled by helper
processes, a time limit that stops stacks to resume later. Each test runs the training step
itself; the GPU runs the same code (benchmarks/gpu_run.py runs the tests marked `device` there)."""

import os
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crasp.tasks import PAD_ID, get_task
from crasplab.records.files import read_jsonl
from crasplab.records.settings import SettingsError
from crasplab.train.data import LengthBuckets, batch_rng, sample_training_batch, stack_batches
from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE, AcceleratorPathError, accelerator_path
from crasplab.train.engines import EngineSettings, run_jobs_on
from crasplab.train.loop import Job, _StackRun, is_done, run_stack
from crasplab.train.sampling import JAX_PLATFORMS_ENV, BatchStream, StackBatches, sampler_pool
from tests.tiny import TINY_MODEL, comparable, tiny_config


@pytest.fixture
def rehearsal(monkeypatch):
    monkeypatch.setenv(ACCELERATOR_PATH_ENV, REHEARSE)


def seed_jobs(root, task="UB", seeds=(0, 1, 2), **train_changes):
    config = tiny_config(**{**dict(max_steps=16, eval_every=8, checkpoint_every=8), **train_changes})
    return [
        Job(
            task_code=task,
            seed=seed,
            model=TINY_MODEL.replace(pe="ape"),
            train=config,
            task_overrides=dict(alphabet_size=8),
            out_dir=str(root / task / f"seed{seed}"),
        )
        for seed in seeds
    ]


def assert_same_training(together: Job, alone: Job) -> None:
    """The same steps, losses to float32 rounding (a vmapped step may reduce in another order)
    and the same end."""
    together_records, together_result = comparable(together.folder)
    alone_records, alone_result = comparable(alone.folder)
    assert [r["step"] for r in together_records] == [r["step"] for r in alone_records]
    np.testing.assert_allclose(
        [r["loss"] for r in together_records if r["kind"] == "train"],
        [r["loss"] for r in alone_records if r["kind"] == "train"],
        rtol=1e-4,
    )
    assert together_result["steps"] == alone_result["steps"]


def test_the_rehearsal_setting_takes_the_accelerator_path_and_refuses_other_values(monkeypatch):
    monkeypatch.delenv(ACCELERATOR_PATH_ENV, raising=False)
    assert not accelerator_path()  # the suite's CPU
    monkeypatch.setenv(ACCELERATOR_PATH_ENV, REHEARSE)
    assert accelerator_path()
    monkeypatch.setenv(ACCELERATOR_PATH_ENV, "yes")
    with pytest.raises(AcceleratorPathError, match="accepted value is 'rehearse'"):
        accelerator_path()


@pytest.mark.device
def test_seeds_with_length_buckets_train_as_one_stack_and_end_where_each_ends_alone(tmp_path, rehearsal):
    """Three seeds, five length buckets: each seed draws its own bucket at every step, so the
    stack's batches have different widths; padded to the widest, each seed trains as alone. Two
    tasks train side by side (two threads), their batches sampled by a helper process. This
    crashed at the first step before stacks padded their batches."""
    stacked = seed_jobs(tmp_path / "stacked", length_buckets=5) + seed_jobs(tmp_path / "stacked", "NF", (0, 1))
    settings = EngineSettings(concurrent_stacks=2, sampler_processes=1)
    assert run_jobs_on(settings, stacked, show_progress=False)
    alone = seed_jobs(tmp_path / "alone", length_buckets=5) + seed_jobs(tmp_path / "alone", "NF", (0, 1))
    for job in alone:
        run_stack([job])
    for together, by_itself in zip(stacked, alone):
        assert_same_training(together, by_itself)


def test_a_stopped_stack_resumes_to_the_end_of_an_uninterrupted_one(tmp_path, rehearsal):
    stop = threading.Event()

    def stop_at_step_12(progress):
        if progress["step"] >= 12:
            stop.set()

    interrupted = seed_jobs(tmp_path / "interrupted", length_buckets=3, log_every=4)
    assert run_stack(interrupted, stop_at_step_12, stop=stop) == [None, None, None]
    assert not any(is_done(job) for job in interrupted)
    run_stack(interrupted)
    uninterrupted = seed_jobs(tmp_path / "uninterrupted", length_buckets=3, log_every=4)
    run_stack(uninterrupted)
    for resumed, whole in zip(interrupted, uninterrupted):
        assert comparable(resumed.folder) == comparable(whole.folder)


def test_a_deadline_within_an_evaluation_stops_it_unless_it_ends_jobs(tmp_path, rehearsal, monkeypatch):
    """A deadline between the bins of an evaluation that ends no job stops it there, as a kill
    would: nothing of that evaluation is written, and the resumed stack ends where an
    uninterrupted one does. An evaluation that ends jobs (here the last step's) is completed, so
    that the deadline does not throw away jobs that were done."""
    stop = threading.Event()
    score_bin = _StackRun._score_bin

    def stop_after_the_training_bin(run, b, indices, scored):
        score_bin(run, b, indices, scored)
        if run.step == 16 and b == 0:
            stop.set()

    monkeypatch.setattr(_StackRun, "_score_bin", stop_after_the_training_bin)
    ending = seed_jobs(tmp_path / "ending", seeds=(0, 1), max_steps=16)
    assert all(run_stack(ending, stop=stop)) and all(is_done(job) for job in ending)
    stop.clear()
    interrupted = seed_jobs(tmp_path / "interrupted", seeds=(0, 1), max_steps=24)
    assert run_stack(interrupted, stop=stop) == [None, None]
    for job in interrupted:
        evaluations = [r["step"] for r in comparable_records(job) if r["kind"] == "eval"]
        assert evaluations == [8]  # step 16's evaluation was stopped after its first bin
    monkeypatch.setattr(_StackRun, "_score_bin", score_bin)
    run_stack(interrupted)
    uninterrupted = seed_jobs(tmp_path / "uninterrupted", seeds=(0, 1), max_steps=24)
    run_stack(uninterrupted)
    for resumed, whole in zip(interrupted, uninterrupted):
        assert comparable(resumed.folder) == comparable(whole.folder)


def comparable_records(job: Job) -> list[dict]:
    return read_jsonl(job.files.metrics_file)


def test_a_time_limit_leaves_the_jobs_to_resume(tmp_path, rehearsal):
    jobs = seed_jobs(tmp_path, seeds=(0, 1))
    limited = EngineSettings(time_limit_s=1e-3, sampler_processes=0)
    assert run_jobs_on(limited, jobs, show_progress=False) is False
    assert run_jobs_on(EngineSettings(sampler_processes=0), jobs, show_progress=False) is True
    assert all(is_done(job) for job in jobs)


def test_batches_sampled_by_helper_processes_are_the_batches_sampled_here():
    task = get_task("NLFirst", alphabet_size=5)
    batches = StackBatches.of(
        "NLFirst", dict(alphabet_size=5), (3, 4), 8, LengthBuckets.split(task, (4, 12), 3), 40, True
    )
    with sampler_pool(1) as pool:
        ahead = BatchStream(batches, start=5, end=12, pool=pool)
        from_pool = [ahead.next() for _ in range(4)]
        ahead.close()
    here = BatchStream(batches, start=5, end=12)
    for pooled in from_pool:
        inline = here.next()
        assert all(np.array_equal(pooled[name], inline[name]) for name in inline)


def jax_platforms(_) -> str | None:
    return os.environ.get(JAX_PLATFORMS_ENV)


def test_sampling_helpers_run_jax_on_the_cpu_and_leave_this_process_as_it_was(monkeypatch):
    """On a GPU machine a helper that touched JAX would take its own 75% of the device's memory."""
    monkeypatch.delenv(JAX_PLATFORMS_ENV, raising=False)
    with sampler_pool(2) as pool:
        assert list(pool.map(jax_platforms, range(4))) == ["cpu"] * 4
    assert JAX_PLATFORMS_ENV not in os.environ


@given(seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=4, unique=True), step=st.integers(0, 1000))
def test_a_stacked_batch_holds_each_seeds_own_batch_and_only_padding_beside_it(seeds, step):
    task = get_task("UF", alphabet_size=16)
    buckets = LengthBuckets.split(task, (1, 12), 4)
    own = [sample_training_batch(task, batch_rng(seed, 0, step), 4, buckets, 40, True) for seed in seeds]
    stacked = stack_batches(own)
    width = max(batch.tokens_BxT.shape[1] for batch in own)
    assert stacked.tokens_BxT.shape == (len(seeds), 4, width)
    for s, batch in enumerate(own):
        t = batch.tokens_BxT.shape[1]
        for name, array in batch.as_dict().items():
            assert np.array_equal(getattr(stacked, name)[s, :, :t], array)
        assert not stacked.valid_BxT[s, :, t:].any() and not stacked.loss_mask_BxT[s, :, t:].any()
        assert (stacked.tokens_BxT[s, :, t:] == PAD_ID).all() and (stacked.targets_BxT[s, :, t:] == PAD_ID).all()
        assert (stacked.positions_BxT[s] < 40).all()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(concurrent_stacks=0), "--concurrent-stacks must be at least 1"),
        (dict(sampler_processes=-1), "--sampler-processes must be at least 0"),
        (dict(time_limit_s=0.0), "--time-limit-minutes must be a number of minutes above 0"),
        (dict(time_limit_s=float("nan")), "setting time_limit_s = nan is not accepted; expected a finite number"),
    ],
)
def test_the_accelerator_settings_are_bounded(changes, message, rehearsal):
    with pytest.raises(SettingsError, match=message):
        EngineSettings(**changes)


def test_the_accelerator_settings_are_refused_where_jobs_run_one_per_core(monkeypatch):
    monkeypatch.delenv(ACCELERATOR_PATH_ENV, raising=False)
    with pytest.raises(SettingsError, match="applies to the accelerator path only"):
        EngineSettings(concurrent_stacks=2)


@pytest.mark.device
def test_bfloat16_trains_as_float32_does(tmp_path, rehearsal):
    """The compute dtype the paper grid may use: the same stack trained in bfloat16 follows the
    float32 losses (parameters and optimizer state stay float32 in both) and learns as much."""
    losses = {}
    for dtype in ("float32", "bfloat16"):
        jobs = [
            Job(job.task_code, job.seed, job.model.replace(dtype=dtype), job.train, job.task_overrides, job.out_dir)
            for job in seed_jobs(tmp_path / dtype, seeds=(0, 1), max_steps=32, log_every=4, learning_rate=1e-2)
        ]
        run_stack(jobs)
        losses[dtype] = np.array(
            [[r["loss"] for r in comparable(job.folder)[0] if r["kind"] == "train"] for job in jobs]
        )
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=0.05)
    assert (losses["bfloat16"][:, -1] < 0.9 * losses["bfloat16"][:, 0]).all()
