"""The Ray engine (train.engines) against the local pool: the same files from the same jobs, and
the environment each job runs in (one XLA thread, its own core, its own GPU share).

Training tests are slow (a Ray cluster starts in 5-7 s, each tiny job compiles its steps);
everything here is skipped with its reason where Ray is not installed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.tiny import comparable
from tests.tiny import TINY_MODEL, tiny_config
from crasplab.train.engines import (
    PLACEMENTS_FILE,
    EngineError,
    EngineSettings,
    claim_core,
    connect,
    job_environment,
    run_jobs_on,
    run_on_ray,
)
from crasplab.train.loop import Job
from crasplab.train.workers import SINGLE_THREAD_XLA_FLAGS, WorkerError

ray = pytest.importorskip("ray", reason="the Ray engine needs Ray: pip install -e '.[cluster]'")


def tiny_jobs(folder: Path) -> list[Job]:
    """Two jobs of different tasks that train in a few seconds after their compile."""
    return [
        Job(
            task_code=code,
            seed=0,
            model=TINY_MODEL,
            train=tiny_config(max_steps=40, eval_every=20),
            task_overrides=dict(alphabet_size=8),
            out_dir=str(folder / code),
        )
        for code in ("UR", "UL")
    ]


def placements(job: Job) -> list[dict]:
    return [json.loads(line) for line in (job.folder / PLACEMENTS_FILE).read_text().splitlines()]


@pytest.fixture
def fresh_ray():
    """No Ray session left over from another test; the one a test starts is shut down after it."""
    ray.shutdown()
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(engine="slurm"), "engine must be one of"),
        (dict(engine="local", ray_address="auto"), "needs --engine ray"),
        (dict(engine="local", gpu_share=0.5), "needs --engine ray"),
        (dict(engine="ray", gpu_share=1.5), "must be in [0, 1]"),
    ],
)
def test_engine_settings_refuse_what_cannot_run(settings, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        EngineSettings(**settings)


def test_an_unreachable_cluster_is_named_with_what_to_do(fresh_ray):
    with pytest.raises(EngineError, match=r"cannot reach the Ray cluster at '127.0.0.1:1'.*ray start --head"):
        connect(EngineSettings(engine="ray", ray_address="127.0.0.1:1"))


def test_jobs_on_one_machine_claim_distinct_cores_and_wait_when_all_are_held(monkeypatch, tmp_path):
    monkeypatch.setattr("crasplab.train.engines.CORE_LOCK_FOLDER", tmp_path)
    first, first_lock = claim_core([0, 1])
    second, second_lock = claim_core([0, 1])
    assert {first, second} == {0, 1}
    claimed = []
    waiting = threading.Thread(target=lambda: claimed.append(claim_core([0, 1], wait_seconds=0.01)))
    waiting.start()
    waiting.join(timeout=0.3)
    assert waiting.is_alive(), "a third job took a core that two others hold"
    first_lock.close()  # the job on `first` ends: its core is free again
    waiting.join(timeout=5)
    assert claimed[0][0] == first
    second_lock.close()
    claimed[0][1].close()


def test_a_gpu_share_turns_off_preallocation_and_keeps_one_xla_thread(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    on_cpu = job_environment(0.0)
    assert SINGLE_THREAD_XLA_FLAGS in on_cpu["XLA_FLAGS"] and "XLA_PYTHON_CLIENT_PREALLOCATE" not in on_cpu
    on_gpu = job_environment(0.5)
    assert on_gpu["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" and SINGLE_THREAD_XLA_FLAGS in on_gpu["XLA_FLAGS"]


@pytest.mark.slow
def test_ray_on_a_private_cluster_writes_what_the_local_pool_writes(tmp_path, fresh_ray):
    local, on_ray = tiny_jobs(tmp_path / "local"), tiny_jobs(tmp_path / "ray")
    run_jobs_on(EngineSettings(engine="local", workers=2), local, show_progress=False)
    run_jobs_on(EngineSettings(engine="ray", workers=2), on_ray, show_progress=False)
    assert not ray.is_initialized(), "the private cluster was left running"
    for a, b in zip(local, on_ray):
        assert comparable(a.folder) == comparable(b.folder)
        assert (a.folder / "task.json").read_text() == (b.folder / "task.json").read_text()
        [start, end] = placements(b)
        assert (start["event"], end["event"], end["returncode"]) == ("start", "end", 0)
    run_jobs_on(EngineSettings(engine="ray", workers=2), on_ray, show_progress=False)  # all done: nothing reruns
    assert all(len(placements(job)) == 2 for job in on_ray)


@pytest.mark.slow
def test_each_ray_job_gets_one_xla_thread_its_own_core_and_its_own_gpu(tmp_path, fresh_ray):
    """Two fake GPUs, one per job: Ray sets CUDA_VISIBLE_DEVICES (JAX on a CPU-only install
    ignores it), the two jobs run at once on distinct cores."""
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False)
    jobs = tiny_jobs(tmp_path)
    run_on_ray(jobs, EngineSettings(engine="ray", gpu_share=1.0), show_progress=False)
    starts = [placements(job)[0] for job in jobs]
    assert all(SINGLE_THREAD_XLA_FLAGS in start["xla_flags"] for start in starts)
    assert sorted(start["cuda_visible_devices"] for start in starts) == ["0", "1"]
    ends = [placements(job)[1] for job in jobs]
    overlapped = max(s["time"] for s in starts) < min(e["time"] for e in ends)
    assert overlapped and len({start["core"] for start in starts}) == 2


@pytest.mark.slow
def test_a_job_that_fails_is_not_retried_and_shows_its_log(tmp_path, fresh_ray):
    [broken, _] = tiny_jobs(tmp_path)
    broken.folder.mkdir(parents=True)
    (broken.folder / "checkpoint.npz").write_text("not a checkpoint")  # the worker fails as it resumes
    # The worker's log ends with its one error line (no traceback: crasplab.errors).
    log_line = r"(?s)UR seed 0 .* exited with code 1; its log:.*checkpoint.npz: not a readable checkpoint"
    with pytest.raises(WorkerError, match=log_line):
        run_on_ray([broken], EngineSettings(engine="ray", workers=1), show_progress=False)
    assert [p["event"] for p in placements(broken)] == ["start", "end"]  # one attempt
