"""A trained model read back from its job folder, for analysis and evaluation after training.

from crasplab.train.trained import load_trained_model, job_folders
for folder in job_folders("runs/length_gen/ape-quick", "UF"):   # one per seed
    trained = load_trained_model(folder)   # .model (Transformer), .task, .job, .setup, .step
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flax import nnx

from crasplab.models.transformer import Transformer
from crasplab.errors import LabError
from crasplab.records.job_folder import BinEval, JobFolder, job_folder
from crasplab.train.checkpoint import load_checkpoint
from crasplab.train.config import RunSettings
from crasplab.train.evaluate import EvalSet, build_eval_sets, teacher_forced_exact
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.runs import read_job
from crasplab.train.steps import data_mesh, init_stack, make_eval_step, make_optimizer, shard_batch


class TrainedModelError(LabError, ValueError):
    """A folder that holds no trained model."""


@dataclass(frozen=True)
class TrainedModel:
    model: Transformer
    task: object
    job: Job
    setup: TaskSetup
    step: int  # the training step of the checkpoint


def job_folders(run_dir: Path, task_code: str) -> list[Path]:
    """The job folders (one per seed, in the run's seed order) of one task of a length_gen.py run."""
    settings = RunSettings.of_run(run_dir)
    if task_code not in settings.tasks:
        raise TrainedModelError(f"{run_dir} trained the tasks {', '.join(settings.tasks)}, not {task_code!r}")
    return [job_folder(run_dir, task_code, seed) for seed in settings.seeds]


def load_trained_model(job_dir: Path) -> TrainedModel:
    """The model of a job folder as its last checkpoint left it."""
    job_dir, files = Path(job_dir), JobFolder(Path(job_dir))
    for path in (files.job_file, files.checkpoint_file):
        if not path.is_file():
            raise TrainedModelError(
                f"{job_dir} has no {path.name}; give a job folder that experiments/length_gen.py "
                "wrote (<run folder>/<task>/seed<k>) and that has trained at least until its first "
                "checkpoint"
            )
    job = read_job(job_dir)
    setup = TaskSetup.for_job(job)
    model = job.model.build(len(setup.task.vocab), setup.max_positions, job.seed)
    params = nnx.state(model, nnx.Param)
    (params, _), meta = load_checkpoint(files.checkpoint_file, (params, make_optimizer(job.train).init(params)))
    nnx.update(model, params)
    return TrainedModel(model=model, task=setup.task, job=job, setup=setup, step=meta["step"])


def evaluation_strings(trained: TrainedModel) -> list[EvalSet]:
    """The strings of every bin of the job, drawn from its seed as training draws them (a bin's
    strings come from a stream numbered by its place among the bins)."""
    setup, config = trained.setup, trained.job.train
    return build_eval_sets(
        setup.task, trained.job.seed, setup.bins, config.eval_examples_per_length, setup.max_positions, setup.score_eos
    )


def exact_as_training_computes(trained: TrainedModel, eval_set: EvalSet) -> np.ndarray:
    """exact_N of the model on `eval_set`, computed by training's evaluation step (the same vmapped
    step and chunk size), so that on the machine that trained it the count equals the recorded one."""
    graphdef, rest, params_S, _ = init_stack([trained.model], make_optimizer(trained.job.train))
    mesh = data_mesh()
    exact_SxN = teacher_forced_exact(
        make_eval_step(graphdef, rest),
        params_S,
        [eval_set],
        trained.job.train.eval_batch_size,
        lambda part: shard_batch(mesh, part),
    )
    return exact_SxN[0]


def evaluate_bin_again(trained: TrainedModel, bin_index: int) -> tuple[EvalSet, np.ndarray]:
    """One bin's strings and the model's exact_N on them, as training's evaluation found them."""
    eval_set = evaluation_strings(trained)[bin_index]
    return eval_set, exact_as_training_computes(trained, eval_set)


def evaluate_every_bin(trained: TrainedModel) -> tuple[BinEval, ...]:
    """Every bin of the job, recorded as training records an evaluation (without the greedy
    decoding cross-check)."""
    bins = []
    for eval_set in evaluation_strings(trained):
        exact_N = exact_as_training_computes(trained, eval_set)
        bins.append(
            BinEval.from_dict(
                dict(
                    lo=eval_set.lo,
                    hi=eval_set.hi,
                    accuracy=round(float(exact_N.mean()), 6),
                    n=len(exact_N),
                    **eval_set.by_length(exact_N),
                )
            )
        )
    return tuple(bins)


def teacher_forced_argmax(trained: TrainedModel, eval_set: EvalSet, chunk: int = 500) -> np.ndarray:
    """argmax_NxT: the token the model predicts after each position of the bin's strings, fed the
    strings themselves (teacher forcing), `chunk` strings at a time. A string's answer is right
    exactly where this equals its next token at every answer position (exact_as_training_computes)."""
    batch = eval_set.batch
    parts = []
    for start in range(0, len(batch.tokens_BxT), chunk):
        rows = slice(start, start + chunk)
        output = trained.model(batch.tokens_BxT[rows], batch.positions_BxT[rows], batch.valid_BxT[rows])
        parts.append(np.asarray(output.logits_BxTxV.argmax(axis=-1)))
    return np.concatenate(parts)
