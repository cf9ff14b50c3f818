"""The files of a from-scratch run and of each of its jobs: their names, and the records they hold.

Both the writers (train.loop, train.workers, train.engines) and the readers (the length_gen
report, train.trained, the mechanism experiment) take file names and record types from here, so
the format has one owner:

    <run>/config.json           the run's settings (train.config.RunSettings), written once
    <run>/predictions.json      what the interpreter predicted when the run started
    <run>/protocol.json         the verdict rules of a --protocol run
    <run>/invocations.jsonl     the wall time of each invocation that trained, kept current while
                                it trains (crasplab.records.invocations)
    <run>/<task>/seed<k>/       one job:
        job.json                everything that defines the job (train.loop.Job)
        task.json               the task's effective lengths, position table and vocabulary size
        metrics.jsonl           TrainRecord and EvalRecord lines, in step order; once the job is
                                done, stored compressed as metrics.jsonl.gz (compress_metrics)
        checkpoint.npz          parameters, optimizer state, step and stopping state
        provenance.jsonl        what decided the bits of each process that trained the job
        progress.json           the worker's last progress line (for the launcher's bars)
        worker.log              the worker's output
        result.json             JobResult, once the job has finished

The job folders are the run's only record of what was measured: reports read them through
`run_records`. A copy of a run kept for its numbers (experiments/calibration/keep_run.py) is the
run folder without its checkpoints, its logs compressed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crasplab.records.files import compress_jsonl, file_problem, read_json_object, read_jsonl

# What a report and train.trained read from a run's config.json.
RUN_SETTINGS_KEYS = ("preset", "tasks", "model", "train")
# What to do about a job's file that is not as the lab wrote it.
RESULT_FIX = (
    "delete it and run the run's command again: the finished job is read from its checkpoint and its "
    "result.json written anew"
)
JOB_FIX = (
    "give the folder of a job (<run>/<task>/seed<k>, where the run's command writes job.json before the job "
    "trains), run that command again, or restore the file"
)


@dataclass(frozen=True)
class JobFolder:
    path: Path

    @classmethod
    def of(cls, run_dir: Path | str, task: str, seed: int) -> JobFolder:
        return cls(Path(run_dir) / task / f"seed{seed}")

    job_file = property(lambda self: self.path / "job.json")
    task_file = property(lambda self: self.path / "task.json")
    metrics_file = property(lambda self: self.path / "metrics.jsonl")
    checkpoint_file = property(lambda self: self.path / "checkpoint.npz")
    provenance_file = property(lambda self: self.path / "provenance.jsonl")
    progress_file = property(lambda self: self.path / "progress.json")
    log_file = property(lambda self: self.path / "worker.log")
    result_file = property(lambda self: self.path / "result.json")

    def is_done(self) -> bool:
        return self.result_file.exists()

    def compress_metrics(self) -> None:
        """Store metrics.jsonl compressed, as a done job's is (nothing appends to it any more): a tenth
        of its size, read back as it was (crasplab.records.files.compress_jsonl)."""
        compress_jsonl(self.metrics_file)

    def read_result(self, result_type: type[JobResult | FinetuneResult] | None = None) -> JobResult | FinetuneResult:
        """result.json as `result_type` (None: a from-scratch job's JobResult; a fine-tuning job's
        FinetuneResult): a ResultFileError names the file, what is wrong and what to do."""
        result_type = result_type or JobResult
        values = read_json_object(self.result_file, RESULT_FIX, required=("steps", "elapsed_s"))
        steps, stopped_early, elapsed_s = values["steps"], values.get("stopped_early", False), values["elapsed_s"]
        if not (_is_number(steps, int) and isinstance(stopped_early, bool) and _is_number(elapsed_s, (int, float))):
            raise file_problem(
                self.result_file,
                f"steps {steps!r}, stopped_early {stopped_early!r} and elapsed_s {elapsed_s!r} (expected a "
                "count, true or false, and seconds)",
                RESULT_FIX,
            )
        try:
            return result_type.from_dict(values)
        except (TypeError, KeyError, ValueError) as error:
            raise file_problem(
                self.result_file, f"a result that does not read ({type(error).__name__}: {error})", RESULT_FIX
            ) from None

    def read_job_values(self) -> dict:
        """job.json as written (train.loop.Job's fields; train.runs.read_job makes the Job)."""
        return read_json_object(self.job_file, JOB_FIX, required=("task_code", "seed", "model", "train"))


@dataclass(frozen=True)
class JobRecords:
    """One job's records as reports read them: its metrics lines in step order, what decided the
    bits of each process that trained it (train.provenance's records, as written), and its result
    once it has finished (None before)."""

    task: str
    seed: int
    metrics: tuple[TrainRecord | EvalRecord, ...]
    provenance: tuple[dict, ...]
    result: JobResult | FinetuneResult | None

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def evaluations(self) -> tuple[EvalRecord, ...]:
        return tuple(record for record in self.metrics if isinstance(record, EvalRecord))

    @property
    def training(self) -> tuple[TrainRecord, ...]:
        return tuple(record for record in self.metrics if isinstance(record, TrainRecord))

    @property
    def final(self) -> EvalRecord | None:
        """The job's last evaluation (its final one once it has finished); None before its first."""
        evaluations = self.evaluations
        return evaluations[-1] if evaluations else None


def job_records(
    folder: JobFolder, task: str, seed: int, result_type: type[JobResult | FinetuneResult] | None = None
) -> JobRecords:
    """One job's records (JobRecords) from its folder; a job not started has none."""
    return JobRecords(
        task=task,
        seed=seed,
        metrics=read_metrics(folder),
        provenance=tuple(read_jsonl(folder.provenance_file)),
        result=folder.read_result(result_type) if folder.is_done() else None,
    )


def read_metrics(folder: JobFolder) -> tuple[TrainRecord | EvalRecord, ...]:
    """metrics.jsonl's records (read_jsonl) as TrainRecord and EvalRecord: a line that is neither
    is a ResultFileError naming the file, the record and what to do."""
    return tuple(
        _metrics_record(folder, number, record) for number, record in enumerate(read_jsonl(folder.metrics_file), 1)
    )


def _metrics_record(folder: JobFolder, number: int, values: dict) -> TrainRecord | EvalRecord:
    kind, step, bins = values.get("kind"), values.get("step"), values.get("bins")
    fits = _is_number(step, int) and (
        kind == "train"
        or kind == "eval"
        and isinstance(bins, list)
        and all(isinstance(b, dict) and {"lo", "hi", "accuracy", "n"} <= b.keys() for b in bins)
    )
    try:
        if fits:
            return TrainRecord.from_dict(values) if kind == "train" else EvalRecord.from_dict(values)
    except (TypeError, ValueError):  # a field it does not have, or one it lacks
        pass
    raise file_problem(
        folder.metrics_file,
        f"record {number} is neither a train record nor an eval record with its bins",
        "restore it from a copy, or delete the job's folder and run the run's command again: the job "
        "trains anew (same seed, same result)",
    )


def _is_number(value, kinds) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def run_jobs(tasks, seeds) -> list[tuple[str, int]]:
    """The (task, seed) jobs of a run, in the order they are listed and reported."""
    return [(task, seed) for task in tasks for seed in seeds]


def run_records(
    run_dir: Path | str,
    jobs: Iterable[tuple[str, int]],
    result_type: type[JobResult | FinetuneResult] | None = None,
) -> list[JobRecords]:
    """The records of a run's (task, seed) jobs, in that order, their results read as `result_type`
    (None: JobResult)."""
    return [job_records(JobFolder.of(run_dir, task, seed), task, seed, result_type) for task, seed in jobs]


SEED_FOLDER = re.compile(r"seed(?P<seed>\d+)")


def job_folders(run_dir: Path | str) -> list[tuple[str, int, JobFolder]]:
    """(task, seed, folder) of every job folder a run folder holds, in name order: the folders
    <run>/<task>/seed<k> alone, so that a stray file elsewhere (a result.json at the top of the run
    or of a task) never makes its folder count as a job."""
    run_dir = Path(run_dir)
    found = []
    for task_dir in sorted(p for p in run_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for seed_dir in sorted(p for p in task_dir.iterdir() if p.is_dir()):
            if match := SEED_FOLDER.fullmatch(seed_dir.name):
                found.append((task_dir.name, int(match["seed"]), JobFolder(seed_dir)))
    return found


def job_folder(run_dir: Path | str, task: str, seed: int) -> Path:
    """Where one (task, seed) job of a run keeps its files."""
    return JobFolder.of(run_dir, task, seed).path


@dataclass(frozen=True)
class BinEval:
    """One test bin of an evaluation: exact match over `n` strings, and at each of its lengths."""

    lo: int
    hi: int
    accuracy: float
    n: int
    lengths: tuple[int, ...] = ()
    length_accuracy: tuple[float, ...] = ()
    greedy_checked: int = 0
    greedy_disagreements: int = 0

    @property
    def correct(self) -> int:
        return round(self.accuracy * self.n)

    @classmethod
    def from_dict(cls, values: dict) -> BinEval:
        return cls(
            **{
                **values,
                "lengths": tuple(values.get("lengths", ())),
                "length_accuracy": tuple(values.get("length_accuracy", ())),
            }
        )


@dataclass(frozen=True)
class TrainRecord:
    step: int
    loss: float
    sequence_accuracy: float
    kind: str = field(default="train", init=False)
    # What a fine-tuning job's lines also hold (crasplab.incontext.finetune): tokens and seconds so far.
    tokens: int | None = None
    elapsed_s: float | None = None

    def to_dict(self) -> dict:
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, values: dict) -> TrainRecord:
        return cls(**{name: value for name, value in values.items() if name != "kind"})


@dataclass(frozen=True)
class EvalRecord:
    step: int
    bins: tuple[BinEval, ...]
    kind: str = field(default="eval", init=False)

    def to_dict(self) -> dict:
        return dict(kind=self.kind, step=self.step, bins=[_bin_dict(b) for b in self.bins])

    @classmethod
    def from_dict(cls, values: dict) -> EvalRecord:
        return cls(step=values["step"], bins=tuple(BinEval.from_dict(b) for b in values["bins"]))


@dataclass(frozen=True)
class JobResult:
    task: str
    seed: int
    pe: str
    steps: int
    stopped_early: bool
    elapsed_s: float
    bins: tuple[BinEval, ...]

    def to_dict(self) -> dict:
        return dict(asdict(self), bins=[_bin_dict(b) for b in self.bins])

    @classmethod
    def from_dict(cls, values: dict) -> JobResult:
        return cls(**{**values, "bins": tuple(BinEval.from_dict(b) for b in values["bins"])})


@dataclass(frozen=True)
class FinetuneResult:
    """result.json of a fine-tuning job (crasplab.incontext.finetune): its answers are the run's
    results.jsonl, so no bins, and it trains its steps to the end."""

    task: str
    seed: int
    steps: int
    elapsed_s: float
    tokens: int
    tokens_per_s: float | None
    method: str
    trainable_parameters: int

    @classmethod
    def from_dict(cls, values: dict) -> FinetuneResult:
        return cls(**values)


def _bin_dict(bin_eval: BinEval) -> dict:
    values = asdict(bin_eval)
    values["lengths"], values["length_accuracy"] = list(bin_eval.lengths), list(bin_eval.length_accuracy)
    return values
