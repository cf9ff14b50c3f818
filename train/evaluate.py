"""Accuracy per length bin: exact match of the whole answer, plus a greedy-decoding cross-check.

Under teacher forcing with argmax, a string is right when every answer token and EOS is the
argmax; this equals exact match of greedy generation (the first wrong token is generated in
both). The cross-check decodes a subsample with the model's KV-cache greedy decoding and counts
the strings where the two verdicts differ, which catches a mismatch between the training-time
forward pass and cached decoding (positions, masks) that teacher forcing alone cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from crasp.tasks import EOS_ID, PAD_ID
from crasplab.models.generate import generate
from crasplab.train.data import EVAL_STREAM, Batch, batch_rng, length_counts, make_batch, stack_batches
from crasplab.train.device import accelerator_path

# What one teacher-forced pass of a stack may hold in activations on the accelerator path: a few
# GiB, so that several stacks evaluate side by side on one device and a pass still covers
# thousands of strings (on an H200, 139 GiB).
EVAL_PASS_BYTES = 2 << 30


@dataclass(frozen=True)
class EvalSet:
    """The test strings of one bin for one seed, at position offset 0: the same number of strings
    at every input length of the bin, so the bin's accuracy is the mean over its lengths and the
    accuracy at each length can be drawn as a curve (on a sampler that weights its lengths, such
    as the official one, numbers in proportion to the weights: train.data.length_counts)."""

    lo: int
    hi: int
    batch: Batch
    prompt_lengths_N: np.ndarray
    input_lengths_N: np.ndarray

    def by_length(self, exact_N: np.ndarray) -> dict:
        """{"lengths": [...], "length_accuracy": [...]}: exact match at each input length of the bin."""
        lengths = np.unique(self.input_lengths_N)
        return dict(
            lengths=[int(n) for n in lengths],
            length_accuracy=[round(float(exact_N[self.input_lengths_N == n].mean()), 6) for n in lengths],
        )


def build_eval_sets(
    task,
    seed: int,
    bins: list[tuple[int, int]],
    examples_per_length: int,
    max_positions: int,
    score_eos: bool = True,
) -> list[EvalSet]:
    """The test strings of each bin; with `score_eos` False, exact match leaves out the EOS after
    the answer (train.data.make_batch)."""
    sets = []
    for index, (lo, hi) in enumerate(bins):
        rng = batch_rng(seed, EVAL_STREAM, index)
        counts = length_counts(task, (lo, hi), examples_per_length)
        lengths = np.arange(lo, hi + 1)[counts > 0]
        parts = [task.sample(rng, int(count), int(n)) for n, count in zip(lengths, counts[counts > 0])]
        width = max(p.tokens.shape[1] for p in parts)
        tokens_NxT = np.concatenate([np.pad(p.tokens, ((0, 0), (0, width - p.tokens.shape[1]))) for p in parts])
        prompt_lengths_N = np.concatenate([p.prompt_lengths for p in parts]).astype(np.int64)
        lengths_N = np.concatenate([p.lengths for p in parts]).astype(np.int64)
        if lengths_N.max() > max_positions:
            raise ValueError(
                f"task {task.code}: test bin {lo}-{hi} has {lengths_N.max()}-token strings, "
                f"more than max_positions={max_positions}"
            )
        batch = make_batch(tokens_NxT, prompt_lengths_N, lengths_N, np.zeros_like(lengths_N), max_positions, score_eos)
        sets.append(
            EvalSet(
                lo=lo,
                hi=hi,
                batch=batch,
                prompt_lengths_N=prompt_lengths_N,
                input_lengths_N=np.repeat(lengths, counts[counts > 0]),
            )
        )
    return sets


def eval_rows(stack_size: int, eval_batch_size: int, eval_sets: list[list[EvalSet]], config) -> int:
    """Strings per model in one teacher-forced pass. On a CPU, the training settings'
    eval_batch_size, as every kept run was evaluated. On the accelerator path as many as the
    widest bin's activations (attention scores, MLP and logits of one layer, held a few times over)
    fit in EVAL_PASS_BYTES: a pass costs a few launches whatever its size, so fewer, larger passes
    are faster. At least eval_batch_size, at most the largest bin, a multiple of the devices the
    batch is sharded over. A string's verdict does not depend on the pass it is in."""
    if not accelerator_path():
        return eval_batch_size
    widest = max(s.batch.tokens_BxT.shape[1] for sets in eval_sets for s in sets)
    largest = max(len(s.input_lengths_N) for sets in eval_sets for s in sets)
    per_string = 4 * 4 * widest * (config.d_ff + config.n_heads * widest + config.vocab_size + 4 * config.d_model)
    rows = min(max(EVAL_PASS_BYTES // (stack_size * per_string), eval_batch_size), largest)
    devices = jax.local_device_count()
    return max(devices, rows - rows % devices)


def teacher_forced_exact(eval_step, params_S, stacked_sets: list[EvalSet], chunk: int, put) -> np.ndarray:
    """exact_SxN for one bin, whose EvalSets (one per model of the stack) are given in order.

    The N strings are evaluated `chunk` at a time (the last chunk padded by repeating rows), so
    every bin compiles one shape.
    """
    batch = stack_batches([s.batch for s in stacked_sets]).as_dict()
    n = batch["tokens_BxT"].shape[1]
    results = []
    for start in range(0, n, chunk):
        rows = np.arange(start, start + chunk) % n
        part = {name: array[:, rows] for name, array in batch.items()}
        results.append(np.asarray(eval_step(params_S, put(part))))
    return np.concatenate(results, axis=1)[:, :n]


def greedy_exact_match(model, tokens_NxT: np.ndarray, prompts_N: np.ndarray, lengths_N: np.ndarray) -> np.ndarray:
    """exact_N under the model's KV-cache greedy decoding: the answer is right when the first
    (length - prompt length) tokens generated equal the reference's. `lengths_N` ends what is
    scored: the string's length (the answer and its EOS), or one less (the answer alone)."""
    answers_N = lengths_N - prompts_N
    generated_NxM = np.asarray(
        generate(
            model, tokens_NxT, prompts_N, max_new_tokens=int(answers_N.max()), eos_id=EOS_ID, pad_id=PAD_ID
        ).tokens_BxN
    )
    return np.array(
        [
            np.array_equal(generated_NxM[i, : answers_N[i]], tokens_NxT[i, prompts_N[i] : lengths_N[i]])
            for i in range(len(tokens_NxT))
        ]
    )


def greedy_disagreements(model, eval_set: EvalSet, exact_N: np.ndarray, count: int) -> int:
    """How many of `count` strings, spread evenly over the bin (so over its lengths), get a
    different verdict from the model's KV-cache greedy decoding (`greedy_exact_match`)."""
    count = min(count, len(exact_N))
    if count == 0:
        return 0
    rows = np.linspace(0, len(exact_N) - 1, count).round().astype(int)
    # The scored tokens: the answer and its EOS, or the answer alone (build_eval_sets' score_eos).
    prompts_N = eval_set.prompt_lengths_N[rows]
    scored_ends_N = prompts_N + eval_set.batch.loss_mask_BxT[rows].sum(axis=1).astype(np.int64)
    greedy_N = greedy_exact_match(model, eval_set.batch.tokens_BxT[rows], prompts_N, scored_ends_N)
    return int(np.sum(greedy_N != exact_N[rows].astype(bool)))


def unstack(params_S, index: int):
    return jax.tree.map(lambda leaf: leaf[index], params_S)
