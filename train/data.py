"""Batches drawn online from a task: fresh strings every step, derived from (seed, step).

Deriving each batch's random generator from (seed, stream, step) instead of carrying one
generator through the run is what makes an interrupted run resume to the same result: the data
a step sees does not depend on how many steps this process has already taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.tasks import PAD

TRAIN_STREAM, EVAL_STREAM = 0, 1


def batch_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, index])


@dataclass(frozen=True)
class Batch:
    """Model inputs and loss targets; logits at position t predict token t + 1."""

    tokens_BxT: np.ndarray      # int32 vocab ids, right-padded with PAD
    positions_BxT: np.ndarray   # int32 position ids (offset + t; clipped inside the table on padding)
    valid_BxT: np.ndarray       # bool: t < length (the padding mask)
    targets_BxT: np.ndarray     # int32: tokens shifted left by one
    loss_mask_BxT: np.ndarray   # float32: 1 where t + 1 is an answer token or EOS

    @property
    def lengths_B(self) -> np.ndarray:
        return self.valid_BxT.sum(axis=1)

    def as_dict(self) -> dict[str, np.ndarray]:
        return dict(tokens_BxT=self.tokens_BxT, positions_BxT=self.positions_BxT, valid_BxT=self.valid_BxT,
                    targets_BxT=self.targets_BxT, loss_mask_BxT=self.loss_mask_BxT)


def effective_range(task, lo: int, hi: int) -> tuple[int, int]:
    """(lo, hi) clipped to the lengths the task's sampler can produce; error if nothing is left."""
    clipped = (max(lo, task.min_length()), min(hi, task.max_length()))
    if clipped[0] > clipped[1]:
        raise ValueError(f"task {task.code}: length range {lo}-{hi} is outside what its sampler produces "
                         f"({task.min_length()}-{task.max_length()}); choose lengths in that range")
    return clipped


def sequence_length(task, input_length: int) -> int:
    """Full token length (BOS .. EOS) of an example with this input length."""
    examples = task.sample(np.random.default_rng(0), 1, input_length)
    return int(examples.lengths[0])


def sample_batch(task, rng: np.random.Generator, batch_size: int, length_range: tuple[int, int],
                 padded_length: int, max_positions: int, random_offset: bool) -> Batch:
    """`batch_size` examples with input lengths uniform in `length_range`, padded to `padded_length`.

    With `random_offset`, example i starts at position o_i ~ U{0 .. max_positions - length_i}
    (the APE training trick); otherwise every example starts at position 0.
    """
    lo, hi = length_range
    input_lengths_B = rng.integers(lo, hi + 1, size=batch_size)
    tokens_BxT = np.full((batch_size, padded_length), PAD, dtype=np.int32)
    prompt_lengths_B = np.zeros(batch_size, dtype=np.int64)
    lengths_B = np.zeros(batch_size, dtype=np.int64)
    for input_length in np.unique(input_lengths_B):
        rows = np.flatnonzero(input_lengths_B == input_length)
        examples = task.sample(rng, len(rows), int(input_length))
        width = examples.tokens.shape[1]
        if width > padded_length:
            raise ValueError(f"task {task.code}: an example of input length {input_length} has {width} tokens, "
                             f"more than the padded length {padded_length}")
        tokens_BxT[rows, :width] = examples.tokens
        prompt_lengths_B[rows] = examples.prompt_lengths
        lengths_B[rows] = examples.lengths
    if lengths_B.max() > max_positions:
        raise ValueError(f"task {task.code}: a {lengths_B.max()}-token example does not fit in "
                         f"max_positions={max_positions}; raise max_positions")
    offsets_B = (rng.integers(0, max_positions - lengths_B + 1) if random_offset
                 else np.zeros(batch_size, dtype=np.int64))
    return make_batch(tokens_BxT, prompt_lengths_B, lengths_B, offsets_B, max_positions)


def make_batch(tokens_BxT: np.ndarray, prompt_lengths_B: np.ndarray, lengths_B: np.ndarray,
               offsets_B: np.ndarray, max_positions: int) -> Batch:
    t_T = np.arange(tokens_BxT.shape[1])
    valid_BxT = t_T[None, :] < lengths_B[:, None]
    positions_BxT = np.minimum(offsets_B[:, None] + t_T[None, :], max_positions - 1).astype(np.int32)
    targets_BxT = np.concatenate([tokens_BxT[:, 1:], np.full_like(tokens_BxT[:, :1], PAD)], axis=1)
    # Position t predicts token t + 1; the answer and EOS are tokens prompt_length .. length - 1.
    loss_mask_BxT = (t_T[None, :] >= prompt_lengths_B[:, None] - 1) & (t_T[None, :] <= lengths_B[:, None] - 2)
    return Batch(tokens_BxT=tokens_BxT.astype(np.int32), positions_BxT=positions_BxT, valid_BxT=valid_BxT,
                 targets_BxT=targets_BxT.astype(np.int32), loss_mask_BxT=loss_mask_BxT.astype(np.float32))


def stack_batches(batches: list[Batch]) -> Batch:
    """Batches for several models trained in one vmapped step: a leading model axis."""
    return Batch(**{name: np.stack([b.as_dict()[name] for b in batches]) for name in batches[0].as_dict()})
