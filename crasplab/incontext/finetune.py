"""Fine-tune a pretrained model per task on short inputs, and answer test prompts before and after.

    from crasplab.incontext.finetune import FinetuneRun
    FinetuneRun(run_dir, pretrained, tasks=["UF", "UB"], config=PRESETS["quick"].config, seed=0).run()

A run folder holds `results.jsonl` (one record per test prompt: task, stage "before" or "after",
length, index, expected, output, correct, seconds) and one folder per task,
`<task>/seed<seed>/`, with `metrics.jsonl` (training records), `checkpoint.npz` while training
(trainable parameters, optimizer state, step, time, tokens), then `model.npz` (the fine-tuned
trainable parameters) and `result.json`. The compiled steps are train.steps' (AdamW from
train.steps.make_optimizer, mean NLL over the answer tokens); what differs from training from
scratch is the starting point (the pretrained weights, or adapters on them: models.lora), the data
(crasplab.incontext.finetune_data) and the measure, greedy answers read as the in-context experiment reads them
(incontext.greedy), so the accuracy before and after fine-tuning is measured alike.

Running again resumes: test prompts already answered are skipped, and an unfinished task
continues from its checkpoint, its metrics cut back to the checkpoint, so a resumed run ends with
the numbers of an uninterrupted one (batches come from (seed, step); the checkpoint holds the exact
float32 state).
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from crasplab.incontext.formal_prompts import Item
from crasplab.incontext.greedy import answer_lines
from crasplab.models.lora import with_lora
from crasplab.records.files import append_jsonl, read_jsonl, write_json, write_jsonl
from crasplab.records.run_folder import RESULTS_FILE
from crasplab.records.job_folder import job_folder
from crasplab.train.allocator import keep_freed_memory
from crasplab.train.checkpoint import load_checkpoint, save_checkpoint
from crasplab.train.data import stack_batches
from crasplab.train.evaluate import unstack
from crasplab.incontext.finetune_config import FinetuneConfig
from crasplab.incontext.finetune_data import eval_items, token_batch, training_items
from crasplab.train.steps import (
    check_divisible,
    data_mesh,
    init_stack,
    make_optimizer,
    make_train_step,
    replicate,
    shard_batch,
)

CHECKPOINT_FILE, MODEL_FILE, RESULT_FILE, METRICS_FILE = "checkpoint.npz", "model.npz", "result.json", "metrics.jsonl"


def return_free_memory() -> None:
    """Hand back to the system what glibc keeps of freed memory. A task's large transient arrays
    (the stacked copy of the weights, the optimizer state, checkpoints) leave 2-3 GB in glibc's
    heap after they are freed; without this a run's peak grew with every task (SmolLM2, full
    fine-tuning: 6.6 GB after one task, 7.9 GB after four)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS): its allocator returns memory on its own terms
        return
    libc.malloc_trim(0)


def trainable_model(model: nnx.Module, config: FinetuneConfig, seed: int) -> nnx.Module:
    """The model whose nnx.Param variables training changes: the pretrained one itself (full
    fine-tuning), or a copy with adapters and every base weight frozen (LoRA)."""
    if config.method == "lora":
        return with_lora(model, config.lora_rank, config.lora_alpha, seed)
    return model


@dataclass(frozen=True)
class TaskTraining:
    """One task's fine-tuning, resumable from its folder."""

    code: str
    seed: int
    config: FinetuneConfig
    folder: Path

    def is_done(self) -> bool:
        return (self.folder / RESULT_FILE).exists()

    def finetuned(self, pretrained, show_progress: bool) -> nnx.Module:
        """The fine-tuned model: trained now (or the rest of it), or read back from model.npz."""
        model = trainable_model(pretrained.model, self.config, self.seed)
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        if self.is_done():
            params, _ = load_checkpoint(self.folder / MODEL_FILE, params)
        else:
            params = self._train(pretrained.tokenizer, model, show_progress)
        return nnx.merge(graphdef, params, rest)

    def _train(self, tokenizer, model: nnx.Module, show_progress: bool):
        config = self.config
        keep_freed_memory()
        optimizer = make_optimizer(config.optimizer_config())
        graphdef, rest, params_S, opt_state_S = init_stack([model], optimizer)
        mesh = data_mesh()
        check_divisible(mesh, config.batch_size, "batch_size")
        state = replicate(mesh, (params_S, opt_state_S))
        del params_S, opt_state_S  # host copies of the state: the device holds it from here on
        train_step = make_train_step(graphdef, rest, optimizer)
        step, elapsed_s, tokens, state = self._resume_or_start(state)
        pad_id = tokenizer.encode("\n")[-1]
        window_losses, window_accuracies = [], []
        bar = tqdm(
            total=config.max_steps,
            initial=step,
            desc=f"{self.code} fine-tune",
            unit="step",
            disable=not show_progress,
            dynamic_ncols=True,
        )
        clock = time.monotonic()
        while step < config.max_steps:
            items = training_items(
                self.code,
                self.seed,
                step,
                config.batch_size,
                config.train_lengths,
                config.demonstrations,
                config.demo_length,
            )
            batch = token_batch(tokenizer, items, pad_id)
            params_S, opt_state_S, loss_S, accuracy_S = train_step(
                *state, shard_batch(mesh, stack_batches([batch]).as_dict())
            )
            state = (params_S, opt_state_S)
            # Reading the loss waits for the step, so the time below is the step's, not its dispatch's.
            window_losses.append(float(loss_S[0]))
            window_accuracies.append(float(accuracy_S[0]))
            tokens += int(batch.valid_BxT.sum())
            step += 1
            now = time.monotonic()
            elapsed_s, clock = elapsed_s + now - clock, now
            bar.update(1)
            if step % config.log_every == 0 or step == config.max_steps:
                loss = float(np.mean(window_losses))
                append_jsonl(
                    self.folder / METRICS_FILE,
                    dict(
                        kind="train",
                        step=step,
                        loss=round(loss, 6),
                        tokens=tokens,
                        elapsed_s=round(elapsed_s, 2),
                        sequence_accuracy=round(float(np.mean(window_accuracies)), 6),
                    ),
                )
                window_losses, window_accuracies = [], []
                bar.set_postfix(loss=f"{loss:.3f}")
            if step % config.checkpoint_every == 0 or step == config.max_steps:
                self._checkpoint(state, step, elapsed_s, tokens)
        bar.close()
        return self._finish(state, step, elapsed_s, tokens)

    def _resume_or_start(self, state):
        """(step, elapsed seconds, tokens, state) from the checkpoint, or a fresh start."""
        path = self.folder / CHECKPOINT_FILE
        if not path.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            write_jsonl(self.folder / METRICS_FILE, [])
            return 0, 0.0, 0, state
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), state)
        # The fresh state is about to be replaced: freed first, the checkpoint's does not come on
        # top of it (1.6 GB for SmolLM2 with AdamW).
        for leaf in jax.tree.leaves(state):
            leaf.delete()
        state, meta = load_checkpoint(path, template)
        # Records written after the checkpoint are written again by the resumed run.
        write_jsonl(self.folder / METRICS_FILE, read_jsonl(self.folder / METRICS_FILE)[: meta["records"]])
        return meta["step"], meta["elapsed_s"], meta["tokens"], replicate(data_mesh(), state)

    def _checkpoint(self, state, step: int, elapsed_s: float, tokens: int) -> None:
        meta = dict(step=step, elapsed_s=elapsed_s, tokens=tokens, records=len(read_jsonl(self.folder / METRICS_FILE)))
        # The stack of one as it is: taking model 0 out first would copy the state (1.6 GB for
        # SmolLM2 with AdamW) just to write it.
        save_checkpoint(self.folder / CHECKPOINT_FILE, state, meta)

    def _finish(self, state, step: int, elapsed_s: float, tokens: int):
        """Keep the trained parameters (model.npz) and the result; drop the optimizer state."""
        params = unstack(state[0], 0)
        save_checkpoint(self.folder / MODEL_FILE, params, dict(step=step))
        trainable = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
        write_json(
            self.folder / RESULT_FILE,
            dict(
                task=self.code,
                seed=self.seed,
                steps=step,
                elapsed_s=round(elapsed_s, 1),
                tokens=tokens,
                tokens_per_s=round(tokens / elapsed_s, 1) if elapsed_s else None,
                method=self.config.method,
                trainable_parameters=trainable,
            ),
        )
        # The optimizer state is as large as the model twice over; the result no longer needs it.
        (self.folder / CHECKPOINT_FILE).unlink(missing_ok=True)
        return params


def answer_records(pretrained, items: list[Item], stage: str, batch_size: int) -> Iterator[list[dict]]:
    """The model's greedy answer lines to `items`, `batch_size` prompts at a time, as records."""
    newline_id = pretrained.tokenizer.encode("\n")[-1]
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        started = time.perf_counter()
        outputs = answer_lines(
            pretrained, [item.prompt for item in batch], [item.expected for item in batch], newline_id, batch_size
        )
        seconds = (time.perf_counter() - started) / len(batch)
        yield [
            dict(
                task=item.task,
                stage=stage,
                length=item.length,
                index=item.index,
                expected=item.expected,
                output=output,
                correct=output == item.expected,
                seconds=round(seconds, 4),
            )
            for item, output in zip(batch, outputs)
        ]


@dataclass
class FinetuneRun:
    """Every task of a run: the test prompts answered in context, then per task the fine-tuning
    and the same prompts answered by the fine-tuned model."""

    run_dir: Path
    pretrained: object  # models.loading.Pretrained
    tasks: list[str]
    config: FinetuneConfig
    seed: int
    show_progress: bool = True

    def run(self) -> None:
        path = self.run_dir / RESULTS_FILE
        records = read_jsonl(path)
        write_jsonl(path, records)  # drops a line a killed run left torn, before appending after it
        self.answered = {(r["task"], r["stage"], r["length"], r["index"]) for r in records}
        self._answer("before", self.pretrained, [item for code in self.tasks for item in self._pending(code, "before")])
        for code in self.tasks:
            return_free_memory()
            self._finetune_and_answer(code)

    def _finetune_and_answer(self, code: str) -> None:
        """One task, in a method of its own so that its fine-tuned model is freed before the next
        task trains."""
        training = TaskTraining(code, self.seed, self.config, job_folder(self.run_dir, code, self.seed))
        pending = self._pending(code, "after")
        if pending or not training.is_done():
            model = training.finetuned(self.pretrained, self.show_progress)
            self._answer("after", dataclasses.replace(self.pretrained, model=model), pending)

    def _pending(self, code: str, stage: str) -> list[Item]:
        """The test prompts of every bin not answered yet at this stage (a length in two bins once)."""
        config = self.config
        lengths = sorted({n for lo, hi in config.test_bins for n in range(lo, hi + 1)})
        items = eval_items(
            code, lengths, config.examples_per_length, self.seed, config.demonstrations, config.demo_length
        )
        return [item for item in items if (item.task, stage, item.length, item.index) not in self.answered]

    def _answer(self, stage: str, pretrained, items: list[Item]) -> None:
        if not items:
            return
        codes = sorted({item.task for item in items})
        bar = tqdm(
            total=len(items),
            desc=f"{stage}: {' '.join(codes)}",
            unit="prompt",
            disable=not self.show_progress,
            dynamic_ncols=True,
        )
        for records in answer_records(pretrained, items, stage, self.config.eval_batch_size):
            for record in records:
                append_jsonl(self.run_dir / RESULTS_FILE, record)
            bar.update(len(records))
        bar.close()
