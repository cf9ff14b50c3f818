"""The on-disk compilation cache: where it lives, and that a job served from it ends with the same
numbers as the job that filled it."""

import pytest
from jax.experimental.compilation_cache import compilation_cache

import crasplab.train.compile_cache as compile_cache_module
from tests.tiny import TINY_MODEL, tiny_config
from crasplab.train.compile_cache import CACHE_ENV, compile_cache_folder, use_compile_cache
from crasplab.train.loop import Job, run_job


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache_folder() == tmp_path / "xdg" / "crasp-lab" / "xla"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert compile_cache_folder() == tmp_path / "mine"
    monkeypatch.setenv(CACHE_ENV, "off")
    assert compile_cache_folder() is None
    assert use_compile_cache() is None


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """A cache folder of this test's own, used from a pristine cache state, and the state reset
    after. Every program is stored, however fast it compiles: with the lab's threshold a program
    compiling near it on a loaded machine is skipped by one job and stored by the next, which
    this test would read as a miss."""
    folder = tmp_path / "xla"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    monkeypatch.setattr(compile_cache_module, "MIN_COMPILE_SECONDS", 0.0)
    compilation_cache.reset_cache()
    yield folder
    compilation_cache.reset_cache()


def test_a_second_identical_job_compiles_nothing_new_and_ends_with_the_same_numbers(fresh_cache, tmp_path):
    def job(name: str) -> Job:
        return Job(
            task_code="UR",
            seed=3,
            model=TINY_MODEL,
            train=tiny_config(),
            task_overrides=dict(alphabet_size=8),
            out_dir=str(tmp_path / name),
        )

    first = run_job(job("first"))
    entries = sorted(path.name for path in fresh_cache.iterdir())
    assert entries, "the first job stored no compiled program"
    second = run_job(job("second"))
    assert sorted(path.name for path in fresh_cache.iterdir()) == entries  # every compile was a hit
    assert first.bins == second.bins
    metrics = [(tmp_path / name / "metrics.jsonl.gz").read_bytes() for name in ("first", "second")]
    assert metrics[0] == metrics[1]  # every loss and accuracy, bit for bit (and compressed alike)
