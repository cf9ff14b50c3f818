"""A from-scratch run's jobs: one per (task, seed) of its settings (config.json), and the checks
that must pass before anything is written, so that a run never stops in a worker for a reason the
command line could have been told.

experiments/length_gen.py, experiments/sweep.py and experiments/paper_grid.py build their jobs here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from crasplab.models.memory import FLOAT_BYTES, check_batch_memory, decoding_bytes, training_bytes
from crasplab.records.files import file_problem
from crasplab.records.job_folder import JOB_FIX, JobFolder, job_folder, run_jobs
from crasplab.records.run_folder import check_output_folder
from crasplab.train.compile_cache import compile_cache_folder
from crasplab.train.config import RunSettings
from crasplab.train.data import sequence_length
from crasplab.train.loop import Job, TaskSetup


def make_jobs(settings: RunSettings, run_dir: Path, seeds_by_task: dict[str, list[int]] | None = None) -> list[Job]:
    """The run's jobs: every task with every seed, or the seeds `seeds_by_task` names."""
    pairs = (
        run_jobs(settings.tasks, settings.seeds)
        if seeds_by_task is None
        else [(task, seed) for task, seeds in seeds_by_task.items() for seed in seeds]
    )
    return [
        Job(
            task_code=task,
            seed=seed,
            model=settings.model_for(task),
            train=settings.train[task],
            task_overrides=settings.task_overrides[task],
            out_dir=str(job_folder(run_dir, task, seed)),
        )
        for task, seed in pairs
    ]


def read_job(folder: Path | str) -> Job:
    """The job a job folder's job.json defines, validated (a ResultFileError names the file, what is
    wrong and what to do). Its folder is `folder`, whatever out_dir the file holds: a copied or
    hand-edited job.json cannot send the job's files elsewhere."""
    files = JobFolder(Path(folder))
    values = files.read_job_values()
    try:
        job = Job.from_dict(values)  # its settings validate themselves as they are built
    except (TypeError, KeyError, ValueError) as error:
        raise file_problem(
            files.job_file, f"a job that does not read ({type(error).__name__}: {error})", JOB_FIX
        ) from None
    return dataclasses.replace(job, out_dir=str(folder))


def check_jobs(jobs: list[Job], run_dir: Path) -> dict[str, TaskSetup]:
    """Everything that could fail once training has started, checked before a file is written;
    returns each task's setup (its lengths and bins) for checks of the caller's own."""
    check_output_folder(run_dir)
    compile_cache_folder()  # a cache path that names a file fails here, not in every worker
    setups = {}
    for job in jobs:
        setup = TaskSetup.for_job(job)  # task parameters, lengths the sampler can produce, the position table
        check_job_memory(job, setup)
        setups[job.task_code] = setup
    return setups


def check_job_memory(job: Job, setup: TaskSetup) -> None:
    """Refuse sizes whose smallest footprint exceeds this machine's memory, before config.json is
    written (a batch of 10^9 sequences used to grow to 4 GB in the worker first)."""
    config = job.model.model_config(len(setup.task.vocab), setup.max_positions)
    # Parameters, gradients and AdamW's two moments of the position table.
    check_batch_memory(
        4 * FLOAT_BYTES * setup.max_positions * config.d_model,
        f"{job.task_code}: a position table of {setup.max_positions} rows",
        "--max-positions",
    )
    train_tokens = sequence_length(setup.task, setup.train_range[1])
    attention = FLOAT_BYTES * job.train.batch_size * config.n_heads * train_tokens**2 * config.n_layers
    check_batch_memory(
        training_bytes(config, job.train.batch_size, train_tokens) + attention,
        f"{job.task_code}: a training batch of {job.train.batch_size} strings of {train_tokens} tokens",
        "--batch-size",
    )
    test_tokens = sequence_length(setup.task, max(hi for _, hi in setup.bins))
    strings = job.train.eval_examples_per_length * sum(hi - lo + 1 for lo, hi in setup.bins)
    check_batch_memory(
        3 * FLOAT_BYTES * strings * test_tokens,
        f"{job.task_code}: {strings} test strings of up to {test_tokens} tokens",
        "--eval-examples-per-length",
    )
    check_batch_memory(
        decoding_bytes(config, job.train.eval_batch_size, test_tokens),
        f"{job.task_code}: evaluating {job.train.eval_batch_size} strings at once",
        "the eval batch size",
    )
