"""The job folder's format (crasplab.records.job_folder) and the trust the lab gives its files: a
job's records read back as their types, a checkpoint of another job refused, an out_dir in
job.json that points elsewhere ignored, task names from config.json accepted only from the library."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crasplab.records.files import compressed
from crasplab.records.job_folder import EvalRecord, JobFolder, JobResult, TrainRecord, read_metrics
from crasplab.train.checkpoint import CheckpointError
from crasplab.train.loop import Job, run_job

ROOT = Path(__file__).resolve().parents[1]


def make_job(folder: Path, config, model, seed=5) -> Job:
    return Job(
        task_code="UR", seed=seed, model=model, train=config, task_overrides=dict(alphabet_size=8), out_dir=str(folder)
    )


def test_a_finished_jobs_files_read_back_as_their_record_types(tmp_path, tiny_train_config, tiny_model_settings):
    result = run_job(make_job(tmp_path / "job", tiny_train_config(max_steps=8, eval_every=4), tiny_model_settings))
    files = JobFolder(tmp_path / "job")
    assert files.is_done() and files.read_result() == result
    assert "out_dir" not in json.loads(files.job_file.read_text())  # the folder is where job.json lies
    assert not files.metrics_file.exists()  # a done job's log is stored compressed, and reads back the same
    lines = [json.loads(line) for line in gzip.decompress(compressed(files.metrics_file).read_bytes()).splitlines()]
    records = read_metrics(files)
    assert [r.to_dict() for r in records] == lines
    train = [r for r in records if isinstance(r, TrainRecord)]
    evals = [r for r in records if isinstance(r, EvalRecord)]
    assert [r.step for r in train] == [4, 8] and [r.step for r in evals] == [4, 8]
    assert evals[-1].bins == result.bins
    assert JobResult.from_dict(result.to_dict()) == result
    assert all(b.correct == round(b.accuracy * b.n) and len(b.lengths) == b.hi - b.lo + 1 for b in result.bins)


def test_a_checkpoint_trained_for_another_job_is_refused(tmp_path, tiny_train_config, tiny_model_settings):
    config = tiny_train_config(max_steps=8, eval_every=8, checkpoint_every=4)
    run_job(make_job(tmp_path / "seed5", config, tiny_model_settings))
    other = make_job(tmp_path / "seed6", config, tiny_model_settings, seed=6)
    shutil.copytree(tmp_path / "seed5", other.folder)
    (other.folder / "result.json").unlink()
    (other.folder / "job.json").write_text(json.dumps(other.to_dict()))
    with pytest.raises(CheckpointError, match="was trained for .*'seed': 5.*'seed': 6"):
        run_job(other)


def test_the_worker_keeps_a_jobs_files_in_its_folder_whatever_job_json_says(
    tmp_path, tiny_train_config, tiny_model_settings
):
    folder, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    folder.mkdir()
    job = make_job(elsewhere, tiny_train_config(max_steps=4, eval_every=4), tiny_model_settings)
    (folder / "job.json").write_text(json.dumps(dict(job.to_dict(), out_dir=str(elsewhere))))  # as written before
    done = subprocess.run(
        [sys.executable, "-m", "crasplab.train.workers", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert JobFolder(folder).is_done() and not elsewhere.exists()


@pytest.mark.parametrize("tasks, message", [(["../../etc"], "does not have"), ("UF", "must be a list of task codes")])
def test_task_names_from_config_json_come_from_the_library(tmp_path, tasks, message):
    from crasplab.reports.length_gen import summarize
    from crasplab.records.run_folder import RunFolderError

    (tmp_path / "config.json").write_text(json.dumps(dict(preset="quick", tasks=tasks, seeds=[0], model={}, train={})))
    with pytest.raises(RunFolderError, match=message):
        summarize(tmp_path)


def test_a_damaged_middle_line_of_a_finished_jobs_metrics_is_an_error_line(tmp_path, capsys):
    from experiments import length_gen

    run = tmp_path / "run"
    flags = [
        "--tasks",
        "UR",
        "--max-steps",
        "4",
        "--eval-every",
        "4",
        "--warmup-steps",
        "1",
        "--no-progress",
        "--eval-examples-per-length",
        "1",
        "--out",
        str(run),
    ]
    length_gen.main(flags)
    metrics = JobFolder.of(run, "UR", 0).metrics_file
    lines = gzip.decompress(compressed(metrics).read_bytes()).decode().splitlines(keepends=True)
    metrics.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))  # a plain log is read before a compressed one
    for command in (flags, ["--report-only", str(run)]):
        with pytest.raises(SystemExit, match=r"metrics.jsonl:2: not a JSON record"):
            length_gen.main(command)
