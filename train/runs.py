"""A from-scratch run's jobs: one per (task, seed) of its settings (config.json), and the checks
that must pass before anything is written, so that a run never stops in a worker for a reason the
command line could have been told.

experiments/length_gen.py, experiments/sweep.py and experiments/paper_grid.py build their jobs here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from crasplab.models.memory import FLOAT_BYTES, check_batch_memory, decoding_bytes, training_bytes
from crasplab.records.files import ResultFileError, file_problem
from crasp.tasks import TASK_CODES
from crasplab.records.job_folder import JOB_FIX, SEED_FOLDER, JobFolder, job_folder, run_jobs
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
    wrong and what to do). Its folder is `folder`: job.json names none, and the out_dir that one
    written before held is ignored, so a copied or hand-edited job.json cannot send the job's files
    elsewhere."""
    files = JobFolder(Path(folder))
    values = files.read_job_values()
    try:
        job = Job.from_dict(values)  # its settings validate themselves as they are built
    except (TypeError, KeyError, ValueError) as error:
        raise file_problem(
            files.job_file, f"a job that does not read ({type(error).__name__}: {error})", JOB_FIX
        ) from None
    if problem := _folder_name_problem(Path(folder), job):
        raise ResultFileError(
            f"{files.job_file}: {problem}; a job's task and seed come from its job.json, so its folder was renamed "
            "or the file replaced: move the folder back to <run>/<task>/seed<k> of its own task and seed, or "
            "restore the job.json that was there"
        )
    return dataclasses.replace(job, out_dir=str(folder))


def _folder_name_problem(folder: Path, job: Job) -> str | None:
    """What a job folder's name says against its job.json: a `seed<k>` of another seed, or a task
    folder (the parent in a run, the grandparent in a sweep) named after another task."""
    named_seed = SEED_FOLDER.fullmatch(folder.name)
    if named_seed is None:  # a folder of another layout (a compiled job's, a test's): its name says nothing
        return None
    if int(named_seed["seed"]) != job.seed:
        return f"a job of seed {job.seed} in a folder named {folder.name}"
    named_tasks = {name for name in (folder.parent.name, folder.parent.parent.name) if name in TASK_CODES}
    if named_tasks and job.task_code not in named_tasks:
        return f"a job of task {job.task_code} in the folder of task {sorted(named_tasks)[0]} ({folder})"
    return None


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
        f"{job.task_code}: a training batch of {job.train.batch_size} strings of {train_tokens} tokens through "
        f"{config.n_layers} layers of width {config.d_model}",
        "--batch-size, or the model's layers or width",
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
