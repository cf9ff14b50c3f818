"""Batches drawn online from a task: fresh strings every step, derived from (seed, step).

Deriving each batch's random generator from (seed, stream, step) instead of carrying one
generator through the run is what makes an interrupted run resume to the same result: the data
a step sees does not depend on how many steps this process has already taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.tasks import MAX_LENGTH, PAD_ID
from crasplab.records.settings import SettingsError

TRAIN_STREAM, EVAL_STREAM = 0, 1


def batch_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, index])


@dataclass(frozen=True)
class Batch:
    """Model inputs and loss targets; logits at position t predict token t + 1."""

    tokens_BxT: np.ndarray  # int32 vocab ids, right-padded with PAD
    positions_BxT: np.ndarray  # int32 position ids (offset + t; clipped inside the table on padding)
    valid_BxT: np.ndarray  # bool: t < length (the padding mask)
    targets_BxT: np.ndarray  # int32: tokens shifted left by one
    loss_mask_BxT: np.ndarray  # float32: 1 where t + 1 is an answer token or EOS

    @property
    def lengths_B(self) -> np.ndarray:
        return self.valid_BxT.sum(axis=1)

    def as_dict(self) -> dict[str, np.ndarray]:
        return dict(
            tokens_BxT=self.tokens_BxT,
            positions_BxT=self.positions_BxT,
            valid_BxT=self.valid_BxT,
            targets_BxT=self.targets_BxT,
            loss_mask_BxT=self.loss_mask_BxT,
        )


def effective_range(task, lo: int, hi: int, what: str = "length range") -> tuple[int, int]:
    """(lo, hi) with lo raised to the task's shortest input: bins are written from 1, as in the
    papers, while some samplers start at 2 or 3. An error, naming `what`, if the sampler cannot
    produce inputs of length hi or nothing is left."""
    shortest, longest = task.min_length(), min(task.max_length(), MAX_LENGTH)
    if hi > longest or max(lo, shortest) > hi:
        raise SettingsError(
            f"task {task.code}, {what} {lo}-{hi}: not within the lengths its sampler produces "
            f"({shortest} to {longest}, with {task.parameter_summary()}); choose lengths in that range"
        )
    return max(lo, shortest), hi


def sequence_length(task, input_length: int) -> int:
    """Full token length (BOS .. EOS) of an example with this input length."""
    examples = task.sample(np.random.default_rng(0), 1, input_length)
    return int(examples.lengths[0])


def draw_lengths(task, rng: np.random.Generator, n: int, length_range: tuple[int, int]) -> np.ndarray:
    """n input lengths from `length_range` (both ends included), each as often as the task's
    sampler draws it (Task.length_weights): uniformly, except on the official retrieval sampler."""
    lo, hi = length_range
    weights = task.length_weights(np.arange(lo, hi + 1))
    if np.all(weights == weights[0]):
        return rng.integers(lo, hi + 1, size=n)  # the draw of every run made before weighted lengths
    return lo + rng.choice(hi - lo + 1, size=n, p=weights / weights.sum())


def length_counts(task, length_range: tuple[int, int], per_length: int) -> np.ndarray:
    """Test strings at each length of `length_range`: `per_length` at every length, or, where the
    task's sampler weights its lengths, as many in all shared out in proportion to the weights
    (largest remainders), so that a bin's accuracy, the mean over its strings, is the accuracy the
    sampler's own length distribution gives without the noise of drawing the lengths."""
    lo, hi = length_range
    weights = task.length_weights(np.arange(lo, hi + 1))
    if np.all(weights == weights[0]):
        return np.full(hi - lo + 1, per_length)
    shares = per_length * len(weights) * weights / weights.sum()
    counts = np.floor(shares).astype(int)
    counts[np.argsort(counts - shares, kind="stable")[: per_length * len(weights) - counts.sum()]] += 1
    return counts


@dataclass(frozen=True)
class LengthBuckets:
    """The training lengths split into contiguous ranges, each batch drawn from one range.

    A batch padded to its own longest string wastes little on padding when its strings are of
    nearly equal length: the step then costs what its real tokens cost, and there is one compiled
    shape per bucket. A bucket is drawn with probability proportional to the weight of its lengths
    (how many it holds, where the task draws lengths uniformly) and a length inside it as
    `draw_lengths` does, so every training length keeps the share it has when lengths are drawn
    from the whole range.
    """

    ranges: tuple[tuple[int, int], ...]
    padded_lengths: tuple[int, ...]  # tokens of the longest string of each range
    weights: tuple[float, ...]  # of each range: the sum of its lengths' Task.length_weights

    @classmethod
    def split(cls, task, length_range: tuple[int, int], count: int) -> LengthBuckets:
        """`count` ranges of lengths (as equal in size as possible) covering `length_range`."""
        lo, hi = length_range
        count = min(count, hi - lo + 1)
        edges = np.linspace(lo, hi + 1, count + 1).round().astype(int)
        ranges = tuple((int(a), int(b) - 1) for a, b in zip(edges[:-1], edges[1:]))
        return cls(
            ranges=ranges,
            padded_lengths=tuple(sequence_length(task, b) for _, b in ranges),
            weights=tuple(float(task.length_weights(np.arange(a, b + 1)).sum()) for a, b in ranges),
        )

    def sizes(self) -> np.ndarray:
        return np.array([b - a + 1 for a, b in self.ranges])

    def draw(self, rng: np.random.Generator) -> int:
        """The index of the bucket of the next batch (one bucket: no draw, so the stream is unchanged)."""
        if len(self.ranges) == 1:
            return 0
        weights = np.array(self.weights)
        return int(rng.choice(len(weights), p=weights / weights.sum()))


def sample_training_batch(
    task,
    rng: np.random.Generator,
    batch_size: int,
    buckets: LengthBuckets,
    max_positions: int,
    random_offset: bool,
    score_eos: bool = True,
) -> Batch:
    """A batch from one length bucket (drawn first), padded to that bucket's longest string."""
    index = buckets.draw(rng)
    return sample_batch(
        task,
        rng,
        batch_size,
        buckets.ranges[index],
        buckets.padded_lengths[index],
        max_positions,
        random_offset,
        score_eos,
    )


def sample_batch(
    task,
    rng: np.random.Generator,
    batch_size: int,
    length_range: tuple[int, int],
    padded_length: int,
    max_positions: int,
    random_offset: bool,
    score_eos: bool = True,
) -> Batch:
    """`batch_size` examples with input lengths from `length_range` (`draw_lengths`), padded to
    `padded_length`.

    With `random_offset`, example i starts at position o_i ~ U{0 .. max_positions - length_i}
    (the APE training trick); otherwise every example starts at position 0. With `score_eos`
    False, the loss leaves out the EOS after the answer (make_batch).
    """
    input_lengths_B = draw_lengths(task, rng, batch_size, length_range)
    tokens_BxT = np.full((batch_size, padded_length), PAD_ID, dtype=np.int32)
    prompt_lengths_B = np.zeros(batch_size, dtype=np.int64)
    lengths_B = np.zeros(batch_size, dtype=np.int64)
    for input_length in np.unique(input_lengths_B):
        rows = np.flatnonzero(input_lengths_B == input_length)
        examples = task.sample(rng, len(rows), int(input_length))
        width = examples.tokens.shape[1]
        if width > padded_length:
            raise ValueError(
                f"task {task.code}: an example of input length {input_length} has {width} tokens, "
                f"more than the padded length {padded_length}"
            )
        tokens_BxT[rows, :width] = examples.tokens
        prompt_lengths_B[rows] = examples.prompt_lengths
        lengths_B[rows] = examples.lengths
    if lengths_B.max() > max_positions:
        raise ValueError(
            f"task {task.code}: a {lengths_B.max()}-token example does not fit in "
            f"max_positions={max_positions}; raise max_positions"
        )
    offsets_B = (
        rng.integers(0, max_positions - lengths_B + 1) if random_offset else np.zeros(batch_size, dtype=np.int64)
    )
    return make_batch(tokens_BxT, prompt_lengths_B, lengths_B, offsets_B, max_positions, score_eos)


def make_batch(
    tokens_BxT: np.ndarray,
    prompt_lengths_B: np.ndarray,
    lengths_B: np.ndarray,
    offsets_B: np.ndarray,
    max_positions: int,
    score_eos: bool = True,
) -> Batch:
    """The batch of these strings; the loss and exact match cover the answer tokens and the EOS
    after them, or the answer tokens alone with `score_eos` False."""
    t_T = np.arange(tokens_BxT.shape[1])
    valid_BxT = t_T[None, :] < lengths_B[:, None]
    positions_BxT = np.minimum(offsets_B[:, None] + t_T[None, :], max_positions - 1).astype(np.int32)
    targets_BxT = np.concatenate([tokens_BxT[:, 1:], np.full_like(tokens_BxT[:, :1], PAD_ID)], axis=1)
    # Position t predicts token t + 1; the answer and EOS are tokens prompt_length .. length - 1.
    last_scored_B = lengths_B - 2 if score_eos else lengths_B - 3
    loss_mask_BxT = (t_T[None, :] >= prompt_lengths_B[:, None] - 1) & (t_T[None, :] <= last_scored_B[:, None])
    return Batch(
        tokens_BxT=tokens_BxT.astype(np.int32),
        positions_BxT=positions_BxT,
        valid_BxT=valid_BxT,
        targets_BxT=targets_BxT.astype(np.int32),
        loss_mask_BxT=loss_mask_BxT.astype(np.float32),
    )


def pad_batch(batch: Batch, width: int) -> Batch:
    """The batch right-padded to `width` tokens. The new columns are padding like any other:
    invalid, unsupervised, PAD tokens and targets, and their position ids repeat the last column's
    (any row of the table serves: a causal model never lets a valid position see them). Arrays
    with leading axes ([S, B, T]: a stack's batch) are padded along their last axis."""
    extra = width - batch.tokens_BxT.shape[-1]
    if extra <= 0:
        return batch

    def right(array, mode="constant", **fill):
        return np.pad(array, ((0, 0),) * (array.ndim - 1) + ((0, extra),), mode=mode, **fill)

    return Batch(
        tokens_BxT=right(batch.tokens_BxT, constant_values=PAD_ID),
        positions_BxT=right(batch.positions_BxT, mode="edge"),
        valid_BxT=right(batch.valid_BxT, constant_values=False),
        targets_BxT=right(batch.targets_BxT, constant_values=PAD_ID),
        loss_mask_BxT=right(batch.loss_mask_BxT, constant_values=0.0),
    )


def stack_batches(batches: list[Batch]) -> Batch:
    """Batches for several models trained in one vmapped step: a leading model axis, every batch
    padded to the widest. Each seed draws its own length bucket (so that its data stream is the
    same alone or in a stack, and a run trained on one CPU core resumes on an accelerator), so the
    seeds of a stack may stand in buckets of different widths at one step."""
    width = max(b.tokens_BxT.shape[-1] for b in batches)
    padded = [pad_batch(b, width).as_dict() for b in batches]
    return Batch(**{name: np.stack([b[name] for b in padded]) for name in padded[0]})


def stack_steps(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The stacked batches ([S, B, T] each) of consecutive steps trained in one device call
    (crasplab.train.steps.make_scanned_train_step): a leading step axis, every step padded to the
    widest. Padding changes no valid position's numbers beyond rounding (as in a stack of seeds)."""
    return stack_batches([Batch(**batch) for batch in batches]).as_dict()
