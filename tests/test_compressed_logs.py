"""JSON-lines logs stored compressed (crasplab.records.files.compress_jsonl, docs/evidence.md): read
back as they were written, the same bytes from the same log, appended to and rewritten without a
record lost or read twice (also after a kill between compressing and removing the plain file), and
a damaged one refused in one line naming it, never replaced by an empty log."""

import gzip
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.records.files import (
    ResultFileError,
    append_jsonl,
    compress_jsonl,
    compressed,
    read_jsonl,
    write_jsonl,
)
from crasplab.records.job_folder import job_folders

ROOT = Path(__file__).resolve().parents[1]
VALUES = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=8), st.booleans(), st.none())
RECORDS = st.lists(st.dictionaries(st.text(max_size=5), VALUES, max_size=4), max_size=6)


@settings(max_examples=50, deadline=None)
@given(records=RECORDS, more=RECORDS)
def test_a_compressed_log_reads_back_as_written_and_takes_appends_after_its_records(tmp_path_factory, records, more):
    path = tmp_path_factory.mktemp("log") / "metrics.jsonl"
    write_jsonl(path, records)
    plain = path.read_bytes()
    compress_jsonl(path)
    assert not path.exists() and gzip.decompress(compressed(path).read_bytes()) == plain
    assert read_jsonl(path) == records
    for record in more:
        append_jsonl(path, record)
    assert read_jsonl(path) == records + more
    assert compressed(path).exists() is not bool(more)  # an append makes the log plain again, whole
    compress_jsonl(path)
    assert read_jsonl(path) == records + more


def test_the_same_log_compresses_to_the_same_bytes(tmp_path):
    """No time or name in the gzip header: a kept run compressed again, or a job trained again,
    gives the file git already holds."""
    logs = [tmp_path / name / "metrics.jsonl" for name in ("a", "b")]
    for path in logs:
        path.parent.mkdir()
        write_jsonl(path, [{"kind": "train", "step": 4, "loss": 0.5}])
        compress_jsonl(path)
    assert compressed(logs[0]).read_bytes() == compressed(logs[1]).read_bytes()


def test_a_kill_between_compressing_and_removing_the_plain_log_reads_each_record_once(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_jsonl(path, [{"step": 1}])
    compressed(path).write_bytes(gzip.compress(path.read_bytes()))  # the .gz written, the plain log not yet removed
    assert read_jsonl(path) == [{"step": 1}]
    append_jsonl(path, {"step": 2})  # the plain log is the one written to
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    compress_jsonl(path)  # finishes: the .gz now holds both
    assert not path.exists() and read_jsonl(path) == [{"step": 1}, {"step": 2}]


def test_a_rewrite_replaces_the_compressed_log(tmp_path):
    """A resumed job cuts its log back to its checkpoint's records: the cut log is the whole log."""
    path = tmp_path / "metrics.jsonl"
    write_jsonl(path, [{"step": 1}, {"step": 2}])
    compress_jsonl(path)
    write_jsonl(path, read_jsonl(path)[:1])
    assert not compressed(path).exists() and read_jsonl(path) == [{"step": 1}]


def test_a_torn_line_is_kept_through_compression_and_skipped_when_read(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo')
    compress_jsonl(path)
    assert read_jsonl(path) == [{"step": 1}]
    assert f"{compressed(path)}:2: a torn line" in capsys.readouterr().err


@pytest.mark.parametrize("damage", [lambda data: data[:-12], lambda data: b"not gzip at all"], ids=["cut", "garbage"])
def test_a_damaged_compressed_log_is_one_error_naming_it_and_is_never_appended_over(tmp_path, damage):
    path = tmp_path / "metrics.jsonl"
    write_jsonl(path, [{"step": step, "loss": 1.0 / step} for step in range(1, 40)])
    compress_jsonl(path)
    compressed(path).write_bytes(damage(compressed(path).read_bytes()))
    for touch in (read_jsonl, lambda p: append_jsonl(p, {"step": 40})):
        with pytest.raises(ResultFileError, match=r"^\S+metrics\.jsonl\.gz: not a whole gzip stream .*restore it"):
            touch(path)
    assert not path.exists()  # no fresh log started beside the records it could not read


def test_a_kept_run_stores_its_logs_compressed_and_rebuilds_its_report(tmp_path, capsys):
    """keep_run on a run whose jobs finished before their logs were compressed (older code, or a
    kill): the copy holds each log compressed, the bytes evidence/ holds, and its report rebuilds
    byte-identical."""
    from experiments import length_gen
    from experiments.calibration.keep_run import keep_run

    kept = ROOT / "evidence/protocol-clip-rope-nb"
    run = tmp_path / "run"
    shutil.copytree(kept, run)
    for _, _, job in job_folders(run):
        job.metrics_file.write_bytes(gzip.decompress(compressed(job.metrics_file).read_bytes()))
        compressed(job.metrics_file).unlink()
        (job.path / "checkpoint.npz").write_bytes(b"weights")
    keep_run(run, tmp_path / "copy")
    jobs = job_folders(tmp_path / "copy")
    assert jobs and not any(job.metrics_file.exists() or job.checkpoint_file.exists() for _, _, job in jobs)
    for task, seed, job in jobs:
        assert compressed(job.metrics_file).read_bytes() == (kept / task / f"seed{seed}/metrics.jsonl.gz").read_bytes()
    length_gen.main(["--report-only", str(tmp_path / "copy")])
    for name in ("summary.json", "report.md"):
        assert (tmp_path / "copy" / name).read_bytes() == (kept / name).read_bytes(), name
