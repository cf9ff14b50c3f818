"""Run and job folders read into frozen typed records (crasplab.records): every record a writer
writes reads back as the object it was, and a file an earlier version of the lab wrote reads as
the same object as the file this one writes, upgraded in the one class that reads its kind."""

import dataclasses
import json

import pytest
from hypothesis import given, settings, strategies as st

from crasplab.records.files import ResultFileError, write_json, write_jsonl
from crasplab.records.job_folder import (
    BinEval,
    EvalRecord,
    FinetuneResult,
    JobFolder,
    JobRecords,
    JobResult,
    TrainRecord,
    read_metrics,
    run_jobs,
    run_records,
)
from crasplab.records.answers import GitAnswer, LoremAnswer, PromptAnswer, StagedAnswer, read_results
from crasplab.records.run_folder import read_run_settings
from crasplab.incontext.settings import FinetuneSettings
from crasplab.reports.length_gen import read_settings
from crasplab.train.config import ModelSettings, RunSettings, TrainConfig
from crasplab.verdicts.counting import final_evaluations

ACCURACIES = st.floats(0, 1, allow_nan=False)


@st.composite
def bins(draw):
    lo = draw(st.integers(1, 50))
    hi = lo + draw(st.integers(0, 4))
    lengths = tuple(range(lo, hi + 1))
    return BinEval(
        lo,
        hi,
        draw(ACCURACIES),
        draw(st.integers(1, 500)),
        lengths,
        tuple(draw(ACCURACIES) for _ in lengths),
        draw(st.integers(0, 8)),
        draw(st.integers(0, 8)),
    )


TRAIN_RECORDS = st.builds(
    TrainRecord,
    step=st.integers(0, 10**6),
    loss=st.floats(0, 20, allow_nan=False),
    sequence_accuracy=ACCURACIES,
    tokens=st.none() | st.integers(0, 10**9),
    elapsed_s=st.none() | st.floats(0, 1e5, allow_nan=False),
)
EVAL_RECORDS = st.builds(EvalRecord, step=st.integers(0, 10**6), bins=st.lists(bins(), max_size=3).map(tuple))


@settings(max_examples=40, deadline=None)
@given(records=st.lists(TRAIN_RECORDS | EVAL_RECORDS, max_size=6))
def test_metrics_records_read_back_as_the_records_written(tmp_path_factory, records):
    folder = JobFolder(tmp_path_factory.mktemp("job"))
    write_jsonl(folder.metrics_file, [record.to_dict() for record in records])
    assert read_metrics(folder) == tuple(records)


def test_a_run_reads_into_one_typed_record_per_job_with_its_last_evaluation_and_result(tmp_path):
    first = EvalRecord(4, (BinEval(1, 4, 0.5, 8, (1, 2, 3, 4), (1.0, 0.5, 0.5, 0.0)),))
    last = EvalRecord(8, (BinEval(1, 4, 1.0, 8, (1, 2, 3, 4), (1.0, 1.0, 1.0, 1.0)),))
    done = JobFolder.of(tmp_path, "UF", 0)
    write_jsonl(done.metrics_file, [first.to_dict(), TrainRecord(8, 0.1, 1.0).to_dict(), last.to_dict()])
    write_jsonl(done.provenance_file, [dict(lab_commit="abc", from_step=0)])
    result = JobResult("UF", 0, "ape", 8, True, 3.5, last.bins)
    write_json(done.result_file, result.to_dict())
    training = JobFolder.of(tmp_path, "UF", 1)
    write_jsonl(training.metrics_file, [first.to_dict()])

    jobs = run_records(tmp_path, run_jobs(["UF"], [0, 1, 2]))
    assert [(job.task, job.seed, job.finished) for job in jobs] == [("UF", 0, True), ("UF", 1, False), ("UF", 2, False)]
    assert jobs[0] == JobRecords(
        "UF", 0, (first, TrainRecord(8, 0.1, 1.0), last), ({"lab_commit": "abc", "from_step": 0},), result
    )
    assert jobs[0].final == last and jobs[0].evaluations == (first, last) and jobs[1].final == first
    assert jobs[2] == JobRecords("UF", 2, (), (), None)  # not started: no records
    assert {seed: job.final for seed, job in final_evaluations(jobs)["UF"].items()} == {0: last, 1: first}
    with pytest.raises(dataclasses.FrozenInstanceError):
        jobs[0].result = None


def test_a_fine_tuning_jobs_records_read_as_its_own_result_and_timed_train_records(tmp_path):
    folder = JobFolder.of(tmp_path, "UB", 0)
    line = dict(kind="train", step=10, loss=1.5, tokens=4096, elapsed_s=12.25, sequence_accuracy=0.25)
    write_jsonl(folder.metrics_file, [line])
    values = dict(task="UB", seed=0, steps=10, elapsed_s=12.3, tokens=4096, tokens_per_s=333.0, method="full")
    write_json(folder.result_file, dict(values, trainable_parameters=1000))
    (job,) = run_records(tmp_path, [("UB", 0)], FinetuneResult)
    assert job.training == (TrainRecord(10, 1.5, 0.25, tokens=4096, elapsed_s=12.25),)
    assert job.result == FinetuneResult(**values, trainable_parameters=1000)
    assert job.training[0].to_dict() == line


@pytest.mark.parametrize(
    "line",
    [dict(kind="train", step=1, loss=0.5), dict(kind="train", step=1, loss=0.5, sequence_accuracy=1.0, speed=3)],
    ids=["a field missing", "a field no record has"],
)
def test_a_metrics_line_of_no_record_type_is_an_error_naming_the_file_and_the_record(tmp_path, line):
    folder = JobFolder(tmp_path)
    write_jsonl(folder.metrics_file, [TrainRecord(0, 1.0, 0.0).to_dict(), line])
    with pytest.raises(ResultFileError, match=r"metrics.jsonl.*record 2 is neither a train record nor an eval record"):
        read_metrics(folder)


def test_a_result_of_another_kind_of_job_is_an_error_naming_the_file(tmp_path):
    folder = JobFolder(tmp_path)
    write_json(folder.result_file, dict(task="UB", seed=0, steps=10, elapsed_s=1.0, tokens=5, method="full"))
    with pytest.raises(ResultFileError, match=r"result.json: a result that does not read"):
        folder.read_result()


# The upgrades: an old file reads as the same object as the file written now.


def test_an_eval_record_written_before_per_length_results_and_greedy_checks_reads_with_none(tmp_path):
    folder = JobFolder(tmp_path)
    write_jsonl(folder.metrics_file, [dict(kind="eval", step=4, bins=[dict(lo=1, hi=4, accuracy=0.5, n=8)])])
    new = EvalRecord(
        4, (BinEval(1, 4, 0.5, 8, lengths=(), length_accuracy=(), greedy_checked=0, greedy_disagreements=0),)
    )
    assert read_metrics(folder) == (new,)


def _run_config(**changes) -> dict:
    train = TrainConfig(train_lengths=(1, 10), test_bins=((1, 10), (11, 20))).to_dict()
    return dict(
        dict(
            preset="quick",
            tasks=["UF"],
            seeds=[0],
            model=ModelSettings().to_dict(),
            train={"UF": train},
            task_overrides={"UF": {}},
            model_overrides={},
        ),
        **changes,
    )


def _read(folder, config: dict) -> RunSettings:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return read_settings(folder)


def test_a_run_config_written_before_per_task_models_dtypes_clipping_and_reading_rules_reads_as_now(tmp_path):
    """config.json of a length_gen run from before model_overrides, the model's dtype, the
    training's max_grad_norm (and the other settings added since) existed, and from when the
    verdict threshold was a run setting."""
    now = _run_config()
    old_model = {name: value for name, value in now["model"].items() if name != "dtype"}
    old_train = {name: value for name, value in now["train"]["UF"].items() if name not in TrainConfig.ADDED_LATER}
    old = dict(_run_config(model=old_model, train={"UF": old_train}, threshold=0.9))
    del old["model_overrides"]
    assert _read(tmp_path / "old", old) == _read(tmp_path / "new", now) == RunSettings.from_dict(now)


def test_a_run_config_reads_into_its_settings_and_the_facts_recorded_beside_them(tmp_path):
    now = FinetuneSettings().to_dict()
    (tmp_path / "config.json").write_text(json.dumps(dict(now, architecture="llama")))
    recorded = read_run_settings(tmp_path, FinetuneSettings, "experiments/finetune.py")
    assert recorded.settings == FinetuneSettings() and recorded.facts == dict(architecture="llama")


def test_a_job_json_written_when_it_named_its_folder_reads_as_the_job_in_the_folder_it_lies_in(tmp_path):
    from crasplab.train.loop import Job
    from crasplab.train.runs import read_job

    old, new = JobFolder.of(tmp_path / "old", "UR", 5), JobFolder.of(tmp_path / "new", "UR", 5)
    job = Job(
        task_code="UR", seed=5, model=ModelSettings(n_layers=1), train=TrainConfig(), task_overrides={}, out_dir=""
    )
    write_json(old.job_file, dict(job.to_dict(), out_dir=str(tmp_path / "elsewhere")))
    write_json(new.job_file, job.to_dict())
    assert read_job(old.path) == dataclasses.replace(read_job(new.path), out_dir=str(old.path))
    assert read_job(old.path).out_dir == str(old.path)


@pytest.mark.parametrize(
    "answer",
    [
        StagedAnswer("UF", "after", 7, 3, expected="ab", output="ab", correct=True, seconds=0.25),
        PromptAnswer(
            task="UR", length=10, index=3, prompt="a b | a:", expected="b", output="a", correct=False, seconds=0.5
        ),
        LoremAnswer(
            "backward", 4, 0, "lorem", "ab", [1, 2], ["a", "b"], output="a", output_ids=[1], limit=4, seconds=1.0
        ),
        GitAnswer(
            command="revert",
            commits=2,
            index=1,
            prompt="git log",
            expected="aaaaaaa",
            output="aaaaaaa",
            correct=True,
            seconds=2.0,
        ),
    ],
    ids=["fine-tuning", "pretrained", "lorem", "git"],
)
def test_a_runs_answers_read_as_their_type_and_a_line_of_another_shape_is_an_error(tmp_path, answer):
    write_jsonl(tmp_path / "results.jsonl", [dataclasses.asdict(answer)])
    assert read_results(tmp_path, type(answer)) == [answer]
    write_jsonl(tmp_path / "results.jsonl", [dataclasses.asdict(answer), dict(task="UF", correct=True)])
    with pytest.raises(ResultFileError, match=rf"results.jsonl.*line 2 is not a {type(answer).__name__}"):
        read_results(tmp_path, type(answer))
