"""A compiled program as a job of a from-scratch run, so the lab's tools for trained models read it.

`python -m crasp compile PROGRAM --pe PE --task TASK --out DIR` writes, beside the compiled files,

    DIR/config.json                  the run's settings (train.config.RunSettings): one task, one seed
    DIR/<task>/seed<k>/job.json      the job (train.loop.Job): the model's settings with the compiled
                                     architecture, a preset's lengths and test bins
    DIR/<task>/seed<k>/checkpoint.npz  the weights over the task's token ids, at step 0

and the job's evaluation of every bin at step 0 (metrics.jsonl, result.json, with the run's
predictions.json), so that
`experiments/length_gen.py --report-only DIR` reports it beside the prediction,
`train.trained.load_trained_model(DIR/<task>/seed<k>)` builds the model,
`train.evaluate.build_eval_sets` gives the strings training would test it on, and
`experiments/mechanism.py --run DIR --task TASK` analyses its heads. The model is the compiled one
with its vocabulary re-indexed to the task's ids (`task_weights`): no special case at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flax import nnx

from crasp.check import to_program_ids
from crasp.tasks import get_task
from crasplab.compiler import CompiledProgram
from crasplab.compiler.lower import CompileError
from crasplab.models import ModelConfig, set_params
from crasplab.records.files import write_json, write_jsonl
from crasplab.records.job_folder import EvalRecord, JobResult, job_folder
from crasplab.verdicts.predictions import PREDICTIONS_FILE, settings_predictions, write_predictions
from crasplab.records.run_folder import CONFIG_FILE
from crasplab.train.checkpoint import encode_checkpoint, write_encoded
from crasplab.train.config import ModelSettings, RunSettings, TrainConfig
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.steps import make_optimizer
from crasplab.train.trained import evaluate_every_bin, load_trained_model


def task_weights(compiled: CompiledProgram, vocab: tuple[str, ...]) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """The compiled model over a task's token ids (`vocab`, <pad> first) instead of the program's
    alphabet: the embedding rows and output columns of each task symbol are the compiled ones of
    that symbol. <pad> embeds as zeros (padding only follows a string, which causal attention never
    reads) and its logit is 0 everywhere: between the +8 of a true output and the -8 of a false one,
    so the argmax is the program's output where exactly one is true, and <pad> (always wrong) where
    none is. Program symbols the task lacks are never read or answered, and are dropped."""
    program_id = to_program_ids(np.arange(len(vocab)), vocab, compiled.program)  # -1 for <pad>
    read = program_id >= 0
    params = dict(compiled.params)
    embedding = np.zeros((len(vocab), compiled.config.d_model))
    embedding[read] = params["embed.embedding"][program_id[read]]
    output = np.zeros((compiled.config.d_model, len(vocab)))
    output[:, read] = params["lm_head.kernel"][:, program_id[read]]
    params["embed.embedding"], params["lm_head.kernel"] = embedding, output
    return compiled.config.replace(vocab_size=len(vocab)), params


@dataclass(frozen=True)
class CompiledJob:
    """The job folder of a compiled model before it is written: the job, its checkpoint's bytes
    (their size is what the command announces) and the run's settings."""

    job: Job
    checkpoint: bytes
    settings: RunSettings


def compiled_job(
    compiled: CompiledProgram,
    run_dir: Path,
    task_code: str,
    train: TrainConfig,
    preset: str,
    seed: int = 0,
    task_overrides: dict | None = None,
) -> CompiledJob:
    """The job folder of the compiled model for the task (see the module's docstring), nothing
    written yet. `train` gives the lengths and test bins the job records (those of the named
    `preset`); its position table is the compiled model's, max_length rows. A job whose test
    strings exceed max_length is refused here."""
    task_overrides = dict(task_overrides or {})
    config, params = task_weights(compiled, get_task(task_code, **task_overrides).vocab)
    job = Job(
        task_code=task_code,
        seed=seed,
        model=ModelSettings.of_config(config),
        train=train.replace(max_positions=compiled.max_length),
        task_overrides=task_overrides,
        out_dir=str(job_folder(run_dir, task_code, seed)),
    )
    try:
        setup = TaskSetup.for_job(job)
    except ValueError as error:
        raise CompileError(
            f"{error}. The job folder records the {preset} preset's test bins {list(train.test_bins)} "
            f"for {task_code}; compile with a --max-length of at least their longest string"
        ) from None
    model = job.model.build(len(setup.task.vocab), setup.max_positions, seed)
    set_params(model, params, require_all=True)
    weights = nnx.state(model, nnx.Param)
    # A training job's checkpoint at step 0: the weights and the optimizer's initial state, so the
    # folder loads through the same template as every trained job's (compressed: mostly zeros).
    checkpoint = encode_checkpoint((weights, make_optimizer(job.train).init(weights)), {"step": 0})
    settings = RunSettings(
        preset=preset,
        tasks=(task_code,),
        seeds=(seed,),
        model=job.model,
        train={task_code: job.train},
        task_overrides={task_code: task_overrides},
    )
    return CompiledJob(job, checkpoint, settings)


def write_compiled_job(compiled: CompiledJob, run_dir: Path) -> None:
    """Write `run_dir`'s config.json and the job folder. The caller has checked that the folder
    holds nothing but a compile's (crasplab.records.run_folder.check_output_folder)."""
    job = compiled.job
    job.folder.mkdir(parents=True, exist_ok=True)
    write_encoded(job.files.checkpoint_file, compiled.checkpoint)
    write_json(job.files.job_file, job.to_dict())
    write_json(Path(run_dir) / CONFIG_FILE, compiled.settings.to_dict())
    record_evaluation(Path(run_dir), job, compiled.settings)


def save_compiled_job(compiled: CompiledProgram, run_dir: Path, *args, **keywords) -> Job:
    """compiled_job (same arguments), written into `run_dir`; the job."""
    prepared = compiled_job(compiled, run_dir, *args, **keywords)
    write_compiled_job(prepared, run_dir)
    return prepared.job


def record_evaluation(run_dir: Path, job: Job, settings: RunSettings) -> None:
    """The job's evaluation at step 0, written as training writes a finished job's, and what the
    interpreter predicts for the task: the files length_gen's report reads."""
    bins = evaluate_every_bin(load_trained_model(job.folder))
    write_jsonl(job.files.metrics_file, [EvalRecord(step=0, bins=bins).to_dict()])  # a recompiled job: afresh
    result = JobResult(job.task_code, job.seed, job.model.pe, steps=0, stopped_early=False, elapsed_s=0.0, bins=bins)
    write_json(job.files.result_file, result.to_dict())
    predictions = settings_predictions(settings, None)
    (run_dir / PREDICTIONS_FILE).unlink(missing_ok=True)  # the prediction for this compile, not an earlier one
    write_predictions(run_dir, predictions)


__all__ = ["CompiledJob", "compiled_job", "save_compiled_job", "task_weights", "write_compiled_job"]
