"""crasp/search_results.json, which every prediction reads: concurrent `--record` runs both kept,
a damaged file an `error:` line that names it, never a traceback."""

from __future__ import annotations

import json
import multiprocessing
import time
import warnings

import pytest

from crasp import output_files, prediction
from crasp.__main__ import main
from crasp.search import results

RECORDS = 6


def a_record(task: str) -> results.Record:
    return results.Record(
        task=task,
        fragment="none",
        command=f"python -m crasp search {task}",
        seconds=1.0,
        complete_through=3,
        behaviours=[1, 2, 3],
        claim=f"no program of size <= 3 for {task}",
    )


def save_slowly(path, task: str, start) -> None:
    """save() with a pause between reading the file and writing it back: without a lock every
    process reads the same old file, and the last to write drops the others' records."""
    load = results.load

    def slow_load(*args, **kwargs):
        loaded = load(*args, **kwargs)
        time.sleep(0.2)
        return loaded

    results.load = slow_load
    start.wait()
    results.save(a_record(task), path)


def test_concurrent_records_are_all_kept(tmp_path):
    """Also where the test process runs JAX, as it does in the suite: JAX's threads make a fork
    unsafe (a child may inherit a lock some thread held, and deadlock), so the workers are spawned."""
    import jax  # here, not at the top: each spawned worker imports this module, and needs no jax

    jax.devices()  # starts JAX's threads, and arms its warning on os.fork
    path = tmp_path / "search_results.json"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(RECORDS)
    workers = [context.Process(target=save_slowly, args=(path, f"T{k}", start)) for k in range(RECORDS)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for worker in workers:
            worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [str(w.message) for w in caught if "fork" in str(w.message)] == []
    assert [worker.exitcode for worker in workers] == [0] * RECORDS
    assert sorted(results.load(path)) == [f"T{k} none" for k in range(RECORDS)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["search_results.json", "search_results.json.lock"]


def test_a_save_replaces_the_file_in_one_step(tmp_path, monkeypatch):
    """A process killed while writing leaves the old file whole: the new text goes to a temporary."""
    path = tmp_path / "search_results.json"
    results.save(a_record("UL"), path)
    before = path.read_text()

    def killed(*args):
        raise KeyboardInterrupt  # what a kill between writing the temporary and replacing looks like

    monkeypatch.setattr(output_files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        results.save(a_record("UR"), path)
    assert path.read_text() == before
    monkeypatch.undo()
    assert results.save(a_record("UR"), path)
    assert sorted(results.load(path)) == ["UL none", "UR none"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{\n "UL none": {\n  "task": "UL",\n  "fra', "not valid JSON at line 4, column 3"),
        ("[1, 2]", "holds a JSON list, not an object of records"),
        ('{"UL none": {"task": "UL"}}', "record 'UL none' is not an object with exactly the fields"),
    ],
)
def test_a_damaged_file_is_one_error_line_in_the_commands_that_read_it(text, problem, tmp_path, monkeypatch, capsys):
    path = tmp_path / "search_results.json"
    path.write_text(text)
    monkeypatch.setattr(results, "RESULTS_PATH", path)
    prediction.verified_witnesses.cache_clear()
    try:
        with pytest.raises(results.SearchResultsError, match=problem):
            prediction.predict("UL", "nope")
        assert main(["tasks"]) == 2
    finally:
        prediction.verified_witnesses.cache_clear()
    printed = capsys.readouterr()
    assert printed.err.startswith(f"error: {path}: {problem}") and "git checkout -- search_results.json" in printed.err
    assert len(printed.err.splitlines()) == 1 and printed.out == ""


def test_the_shipped_file_reads_back_as_records():
    shipped = json.loads(results.RESULTS_PATH.read_text())
    assert set(results.load()) == set(shipped) and shipped
