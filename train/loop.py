"""Train and evaluate models on one task: resumable, deterministic, one folder per (task, seed).

A job folder holds `job.json` (everything that defines the run), `metrics.jsonl` (training and
evaluation records), `checkpoint.npz` (parameters, optimizer state, step, stopping state),
`provenance.jsonl` (what decided the bits of each process that trained it: train.provenance) and,
once the job has finished, `result.json` (its metrics.jsonl is then stored compressed, as
metrics.jsonl.gz). Running a job whose folder has a checkpoint resumes from it; a job with
`result.json` is done and is not run again. Because every batch is drawn from a generator seeded
by (seed, step) and the checkpoint holds the exact float32 state, a resumed run ends with the same
numbers as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import jax
import numpy as np
from flax import nnx

from crasp.tasks import get_task
from crasplab.models.positions import SCHEMES
from crasplab.records.job_folder import BinEval, EvalRecord, JobFolder, JobResult, TrainRecord
from crasplab.records.files import append_jsonl, read_jsonl, write_json, write_jsonl
from crasplab.train.allocator import keep_freed_memory
from crasplab.train.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_meta, save_checkpoint
from crasplab.train.compile_cache import use_compile_cache
from crasplab.train.config import ModelSettings, TrainConfig
from crasplab.records.settings import Settings, SettingsError
from crasplab.train.provenance import provenance, require_run_commit
from crasplab.train.sampling import BatchStream, StackBatches
from crasplab.train.data import LengthBuckets, effective_range, sequence_length, stack_steps
from crasplab.train.evaluate import build_eval_sets, eval_rows, greedy_disagreements, teacher_forced_exact, unstack
from crasplab.train.steps import (
    check_divisible,
    data_mesh,
    from_scratch_batch_parts,
    init_stack,
    make_eval_step,
    make_optimizer,
    make_scanned_train_step,
    make_train_step,
    replicate,
    shard_batch,
)


@dataclass(frozen=True)
class Job(Settings):
    """One model: a task, a seed, the model (with its position encoding), the training settings,
    the task's sampler parameters and where results go. Where they go (`out_dir`) is not a setting:
    job.json leaves it out, a job's folder being the one its job.json lies in (train.runs.read_job),
    so that a run folder can be moved or copied; and two jobs of the same settings are equal
    wherever they are. A job.json written before holds an out_dir, which is read and ignored."""

    task_code: str
    seed: int
    model: ModelSettings
    train: TrainConfig
    task_overrides: dict = field(default_factory=dict)
    out_dir: str = field(default="", compare=False)

    NOT_STORED = ("out_dir",)

    def stack_key(self) -> tuple:
        """Jobs with equal keys differ only in seed and can share one compiled step."""
        return (self.task_code, repr(self.model), repr(self.train), repr(sorted(self.task_overrides.items())))

    def stack_differences(self, other: Job) -> list[str]:
        """The settings in which this job differs from `other`, each as "name (this job's value,
        not other's)": the parts of stack_key that differ, field by field, compared as the key
        compares them."""
        parts = [("task_code", repr(self.task_code), repr(other.task_code))]
        for part in ("model", "train"):
            mine, theirs = getattr(self, part), getattr(other, part)
            parts += [
                (f"{part}.{f.name}", repr(getattr(mine, f.name)), repr(getattr(theirs, f.name)))
                for f in dataclasses.fields(mine)
            ]
        overrides = (repr(sorted(self.task_overrides.items())), repr(sorted(other.task_overrides.items())))
        parts.append(("task_overrides", *overrides))
        return [f"{name} ({mine}, not {theirs})" for name, mine, theirs in parts if mine != theirs]

    @property
    def folder(self) -> Path:
        return Path(self.out_dir)

    @property
    def files(self) -> JobFolder:
        return JobFolder(self.folder)


def is_done(job: Job) -> bool:
    return job.files.is_done()


@dataclass(frozen=True)
class TaskSetup:
    """What a job needs to know about its task, with lengths starting at its sampler's shortest input."""

    task: object
    train_range: tuple[int, int]
    bins: list[tuple[int, int]]
    buckets: LengthBuckets
    max_positions: int
    score_eos: bool  # the loss and exact match cover the EOS after the answer (TrainConfig.scores_eos)

    @classmethod
    def for_job(cls, job: Job) -> TaskSetup:
        task = get_task(job.task_code, **job.task_overrides)
        train_range = effective_range(task, *job.train.train_lengths, what="training lengths")
        bins = [effective_range(task, lo, hi, what="test bin") for lo, hi in job.train.test_bins]
        longest = sequence_length(task, max(hi for _, hi in bins + [train_range]))
        reach = job.train.position_reach
        covered = sequence_length(task, min(reach, task.max_length())) if reach else longest
        max_positions = job.train.max_positions or covered
        if max_positions < longest:
            raise SettingsError(
                f"task {task.code}: max_positions={max_positions} is below the longest "
                f"string ({longest} tokens); raise max_positions or shorten the test bins"
            )
        return cls(
            task=task,
            train_range=train_range,
            bins=bins,
            max_positions=max_positions,
            buckets=LengthBuckets.split(task, train_range, job.train.length_buckets),
            score_eos=job.train.scores_eos(task),
        )


ProgressCallback = Callable[[dict], None]


def _identity(job: Job) -> dict:
    """What a checkpoint was trained for: a checkpoint of another job must never be resumed."""
    return dict(task=job.task_code, seed=job.seed, pe=job.model.pe, task_overrides=job.task_overrides)


def _check_identity(job: Job, meta: dict) -> None:
    saved = meta.get("job")  # absent in checkpoints written before they carried it
    if saved is not None and saved != json.loads(json.dumps(_identity(job))):
        raise CheckpointError(
            f"{job.files.checkpoint_file} was trained for {saved}, but {job.files.job_file} is "
            f"{_identity(job)}; restore this job's own checkpoint, or delete it to start the job over"
        )


def run_job(job: Job, progress: ProgressCallback | None = None) -> dict:
    return run_stack([job], progress)[0]


def stack_mismatch(jobs: list[Job]) -> str | None:
    """Why the jobs cannot train as one stack (each job whose settings differ from the first's,
    with the settings), or None when they differ in the seed alone."""
    first = jobs[0]
    lines = [
        f"{job.folder} differs from {first.folder} in {', '.join(job.stack_differences(first))}"
        for job in jobs[1:]
        if job.stack_key() != first.stack_key()
    ]
    return "; ".join(lines) or None


def run_stack(
    jobs: list[Job],
    progress: ProgressCallback | None = None,
    sampler_pool: Executor | None = None,
    stop: threading.Event | None = None,
) -> list[dict]:
    """Train the jobs (same settings, different seeds) in one vmapped step; return their results.
    Jobs whose checkpoints stand at different steps (a stack killed while it wrote its
    checkpoints, or folders first trained apart) train as one stack per step, one after another,
    so that each resumes exactly where it stopped.

    With `sampler_pool`, helper processes sample the batches ahead of the device (the same
    batches: crasplab.train.sampling). When `stop` is set the stack stops after its current step,
    unfinished, as if killed there: a later run resumes it from its last checkpoint."""
    if (mismatch := stack_mismatch(jobs)) is not None:
        raise ValueError(f"run_stack: the jobs differ in more than the seed: {mismatch}; run them separately")
    pending = [job for job in jobs if not is_done(job)]
    if pending:
        require_run_commit(pending[0].folder.resolve().parents[1])  # the run folder: task/seed<k> below it
        keep_freed_memory()
        use_compile_cache()
        for same_start in by_resume_step(pending):
            if stop is not None and stop.is_set():
                break
            _StackRun(same_start, progress, sampler_pool, stop).run()
    return [job.files.read_result() if is_done(job) else None for job in jobs]


def by_resume_step(jobs: list[Job]) -> list[list[Job]]:
    """The jobs grouped by the step their checkpoint holds (jobs without one start at step 0 as
    a group of their own), groups in the order of their first job."""
    groups: dict[int | None, list[Job]] = {}
    for job in jobs:
        path = job.files.checkpoint_file
        step = read_checkpoint_meta(path)["step"] if path.exists() else None
        groups.setdefault(step, []).append(job)
    return list(groups.values())


class _StackRun:
    def __init__(
        self,
        jobs: list[Job],
        progress: ProgressCallback | None,
        sampler_pool: Executor | None = None,
        stop: threading.Event | None = None,
    ):
        self.jobs = jobs
        self.config = jobs[0].train
        self.progress = progress or (lambda _: None)
        self.sampler_pool, self.stop = sampler_pool, stop
        self.setup = TaskSetup.for_job(jobs[0])
        self.mesh = data_mesh()
        check_divisible(self.mesh, self.config.batch_size, "batch_size")
        check_divisible(self.mesh, self.config.eval_batch_size, "eval_batch_size")
        models = [job.model.build(len(self.setup.task.vocab), self.setup.max_positions, job.seed) for job in jobs]
        optimizer = make_optimizer(self.config)
        self.graphdef, self.rest, params_S, opt_state_S = init_stack(models, optimizer)
        self.state = replicate(self.mesh, (params_S, opt_state_S))
        make_step = make_train_step if self.config.steps_per_call == 1 else make_scanned_train_step
        self.train_step = make_step(self.graphdef, self.rest, optimizer, from_scratch_batch_parts())
        self.eval_step = make_eval_step(self.graphdef, self.rest)
        self.eval_sets = [
            build_eval_sets(
                self.setup.task,
                job.seed,
                self.setup.bins,
                self.config.eval_examples_per_length,
                self.setup.max_positions,
                self.setup.score_eos,
            )
            for job in jobs
        ]
        self.step = 0
        self.elapsed_s = [0.0] * len(jobs)
        self.perfect_streak = [0] * len(jobs)
        self.finished = [False] * len(jobs)
        self.last_eval: list[dict | None] = [None] * len(jobs)
        self.last_losses = np.zeros(len(jobs))
        self.eval_rows = eval_rows(len(jobs), self.config.eval_batch_size, self.eval_sets, models[0].config)
        self._resume_or_start()
        started = dict(provenance(), from_step=self.step)
        for job in jobs:
            append_jsonl(job.files.provenance_file, started)

    # -- files ---------------------------------------------------------------------------------
    def _resume_or_start(self) -> None:
        # run_stack hands over jobs that all have a checkpoint at one step, or none that has one.
        checkpoints = [job.files.checkpoint_file for job in self.jobs]
        if checkpoints[0].exists():
            loaded = [load_checkpoint(path, unstack(self.state, 0)) for path in checkpoints]
            stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *[state for state, _ in loaded])
            self.state = replicate(self.mesh, stacked)
            self.step = loaded[0][1]["step"]
            for i, (job, (_, meta)) in enumerate(zip(self.jobs, loaded)):
                _check_identity(job, meta)
                self.elapsed_s[i] = meta["elapsed_s"]
                self.perfect_streak[i] = meta["perfect_streak"]
                self.last_eval[i] = meta["last_eval"]
                # Records written after the checkpoint are replayed by the resumed run.
                write_jsonl(job.files.metrics_file, read_jsonl(job.files.metrics_file)[: meta["records"]])
                # A kill after a job's final checkpoint and before its result.json: the stopping
                # rule is already met, so the job is finished from the checkpoint, not trained on.
                if self._stop_reached(i):
                    self._write_result(i)
            return
        for job in self.jobs:
            job.folder.mkdir(parents=True, exist_ok=True)
            write_json(job.files.job_file, job.to_dict())
            write_jsonl(job.files.metrics_file, [])
            write_json(
                job.files.task_file,
                dict(
                    task=job.task_code,
                    train_range=self.setup.train_range,
                    bins=self.setup.bins,
                    max_positions=self.setup.max_positions,
                    length_buckets=self.setup.buckets.ranges,
                    vocab_size=len(self.setup.task.vocab),
                ),
            )

    def _append(self, index: int, record: TrainRecord | EvalRecord) -> None:
        append_jsonl(self.jobs[index].files.metrics_file, record.to_dict())

    def _checkpoint(self) -> None:
        for i in self._active():
            self._checkpoint_one(i)

    def _stop_reached(self, index: int) -> bool:
        """The job has trained enough (see `_stops_now`) and has been evaluated."""
        return self.last_eval[index] is not None and self._stops_now(index)

    def _stops_now(self, index: int) -> bool:
        """Its training bin perfect in enough consecutive evaluations, or its step budget spent."""
        config = self.config
        return 0 < config.stop_after_perfect_evals <= self.perfect_streak[index] or self.step >= config.max_steps

    def _finish(self, index: int) -> None:
        """Checkpoint, then result.json. Both are written atomically and result.json only from what
        the checkpoint holds, so a job killed between the two is finished on resume by
        `_write_result` alone, with the same result. Then a progress report marked done: a seed
        that ends before its stack shows as done when it ends, not when the stack does."""
        self._checkpoint_one(index)
        self._write_result(index)
        self.progress(dict(self._progress_of(index), done=True))

    def _write_result(self, index: int) -> None:
        job = self.jobs[index]
        write_json(
            job.files.result_file,
            JobResult(
                task=job.task_code,
                seed=job.seed,
                pe=job.model.pe,
                steps=self.step,
                stopped_early=self.step < self.config.max_steps,
                elapsed_s=round(self.elapsed_s[index], 1),
                bins=EvalRecord.from_dict(self.last_eval[index]).bins,
            ).to_dict(),
        )
        # After result.json: the job is done and its log complete. A kill between the two leaves the log
        # plain, which reads as well (experiments/calibration/keep_run.py compresses a kept copy's).
        job.files.compress_metrics()
        self.finished[index] = True

    def _checkpoint_one(self, index: int) -> None:
        job = self.jobs[index]
        meta = dict(
            job=_identity(job),
            step=self.step,
            elapsed_s=self.elapsed_s[index],
            perfect_streak=self.perfect_streak[index],
            last_eval=self.last_eval[index],
            records=len(read_jsonl(job.files.metrics_file)),
        )
        save_checkpoint(job.files.checkpoint_file, unstack(self.state, index), meta)

    # -- training ------------------------------------------------------------------------------
    def run(self) -> None:
        stream = BatchStream(
            self._batches(), self.step, self.config.max_steps, self.sampler_pool, self.config.steps_per_call
        )
        try:
            self._train(stream)
        finally:
            stream.close()

    def _batches(self) -> StackBatches:
        job, config, setup = self.jobs[0], self.config, self.setup
        return StackBatches.of(
            job.task_code,
            job.task_overrides,
            [job.seed for job in self.jobs],
            config.batch_size,
            setup.buckets,
            setup.max_positions,
            config.random_position_offset and SCHEMES[job.model.pe].learned_table,
            setup.score_eos,
        )

    def _train(self, stream: BatchStream) -> None:
        config = self.config
        window_losses, window_accuracies = [], []
        clock = time.monotonic()
        while self.step < config.max_steps and not all(self.finished):
            if self._stopped():
                return
            params_S, opt_state_S = self.state
            k = config.steps_per_call  # it divides every count below: each falls between two calls
            batch = stream.next() if k == 1 else stack_steps([stream.next() for _ in range(k)])
            params_S, opt_state_S, loss, accuracy = self.train_step(
                params_S, opt_state_S, shard_batch(self.mesh, batch)
            )
            self.state = (params_S, opt_state_S)
            # [S] per step, or [K, S] for K steps: the window's mean is over steps either way.
            window_losses += [loss] if k == 1 else list(loss)
            window_accuracies += [accuracy] if k == 1 else list(accuracy)
            self.step += k
            if self.step % config.log_every == 0:
                losses = np.mean(np.stack(jax.device_get(window_losses)), axis=0)
                accuracies = np.mean(np.stack(jax.device_get(window_accuracies)), axis=0)
                window_losses, window_accuracies = [], []
                for i in self._active():
                    self._append(
                        i,
                        TrainRecord(
                            step=self.step,
                            loss=round(float(losses[i]), 6),
                            sequence_accuracy=round(float(accuracies[i]), 6),
                        ),
                    )
                self.last_losses = losses
            reporting = self.step % config.log_every == 0
            # The jobs that are still training, and the progress they show, before the evaluation
            # that may finish some of them: a bar then ends on that evaluation's accuracy, not the one before.
            reported = self._active()
            if self.step % config.eval_every == 0 or self.step == config.max_steps:
                if not self._evaluate():
                    return  # stopped within the evaluation: as a kill, it resumes from the last checkpoint
                self._checkpoint()
            elif self.step % config.checkpoint_every == 0:
                self._checkpoint()
            if reporting:
                self._report_progress(reported)
            clock = self._count_time(clock)

    def _count_time(self, since: float) -> float:
        now = time.monotonic()
        for i in self._active():
            self.elapsed_s[i] += now - since
        return now

    def _active(self) -> list[int]:
        return [i for i in range(len(self.jobs)) if not self.finished[i]]

    def _report_progress(self, indices: list[int]) -> None:
        for i in indices:
            self.progress(self._progress_of(i))

    def _progress_of(self, index: int) -> dict:
        last = self.last_eval[index]
        return dict(
            task=self.jobs[index].task_code,
            seed=self.jobs[index].seed,
            folder=str(self.jobs[index].folder),
            step=self.step,
            max_steps=self.config.max_steps,
            loss=float(self.last_losses[index]),
            train_bin_accuracy=None if last is None else last["bins"][0]["accuracy"],
        )

    def _stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def _evaluate(self) -> bool:
        """Score the training bin of every active job, then the test bins: of every active job,
        or with `test_bins_at_stop_only` of the jobs this evaluation stops (their training bin
        alone decides that), so that no test accuracy exists before a job is done. False, with
        nothing recorded, when `stop` was set before a test bin of an evaluation that finishes no
        job: a paper-scale evaluation (bins to 200, decoded greedily too) can take a while, and a
        deadline need not wait for one that ends nothing; one that ends a job is completed."""
        active = self._active()
        scored: dict[int, list[BinEval]] = {i: [] for i in active}
        self._score_bin(0, active, scored)
        stopping = []
        for i in active:
            perfect = scored[i][0].accuracy == 1.0
            self.perfect_streak[i] = self.perfect_streak[i] + 1 if perfect else 0
            if self._stops_now(i):
                stopping.append(i)
        tested = stopping if self.config.test_bins_at_stop_only else active
        if tested:
            for b in range(1, len(self.setup.bins)):
                if self._stopped() and not stopping:
                    return False
                self._score_bin(b, tested, scored)
        for i in active:
            record = EvalRecord(step=self.step, bins=tuple(scored[i]))
            # Kept as written (a dict): the checkpoint stores it, and result.json is made from it.
            self.last_eval[i] = record.to_dict()
            self._append(i, record)
            if i in stopping:
                self._finish(i)
        return True

    def _score_bin(self, b: int, indices: list[int], scored: dict[int, list[BinEval]]) -> None:
        """Bin b teacher-forced (one pass over the whole stack) and, for the jobs `indices`, a few
        strings decoded greedily as a cross-check; their BinEvals go to `scored`."""
        config = self.config
        params_S = self.state[0]
        lo, hi = self.setup.bins[b]
        put = lambda part: shard_batch(self.mesh, part)  # noqa: E731
        stacked_sets = [sets[b] for sets in self.eval_sets]
        exact_SxN = teacher_forced_exact(self.eval_step, params_S, stacked_sets, self.eval_rows, put)
        for i in indices:
            model = nnx.merge(self.graphdef, unstack(params_S, i), self.rest)
            disagreements = greedy_disagreements(
                model, self.eval_sets[i][b], exact_SxN[i], config.greedy_examples_per_bin
            )
            scored[i].append(
                BinEval.from_dict(
                    dict(
                        lo=lo,
                        hi=hi,
                        accuracy=round(float(exact_SxN[i].mean()), 6),
                        n=int(exact_SxN.shape[1]),
                        **self.eval_sets[i][b].by_length(exact_SxN[i]),
                        greedy_checked=min(config.greedy_examples_per_bin, exact_SxN.shape[1]),
                        greedy_disagreements=disagreements,
                    )
                )
            )
