"""Fine-tuning data: few-shot prompts of the in-context experiment as token batches with an
answer-only loss mask.

An example is the prompt of incontext.formal_prompts (demonstrations, then the item up to where
its answer starts) followed by the answer line and its line break: the tokens the model reads and
then should write, exactly as greedy decoding (incontext.greedy) sees them, since the prompt and
the answer are encoded separately, as there. The loss is on the answer and the line break, which
plays the part of EOS. Training prompts are drawn from (seed, step), so a resumed run sees the
batches an uninterrupted one does; test prompts are `cell_items` of the run's seed, the prompts
experiments/pretrained.py shows with the same seed and demonstrations.
"""

from __future__ import annotations

import numpy as np

from crasplab.incontext.formal_prompts import Item, cell_items, format_answer
from crasplab.train.data import TRAIN_STREAM, Batch, batch_rng, make_batch

# Training batches are padded to a multiple of this many tokens, so a handful of compiled steps
# serve a run (a compile of a 30-layer model costs tens of seconds on a CPU) with little padding.
WIDTH_MULTIPLE = 8


def training_items(
    code: str, seed: int, step: int, batch_size: int, lengths: tuple[int, int], demonstrations: int, demo_length: int
) -> list[Item]:
    """The prompts of training step `step`: input lengths uniform in `lengths`, fixed by (seed, step)."""
    rng = batch_rng(seed, TRAIN_STREAM, step)
    input_lengths = rng.integers(lengths[0], lengths[1] + 1, size=batch_size)
    # cell_items draws from (its seed, task, length); a 62-bit seed drawn from (seed, step) keeps
    # every step's prompts apart from each other and from the test prompts (seed itself).
    step_seed = int(rng.integers(2**62))
    return [
        item
        for length, count in zip(*np.unique(input_lengths, return_counts=True))
        for item in cell_items(code, int(length), int(count), step_seed, demonstrations, demo_length)
    ]


def encode_item(tokenizer, item: Item) -> tuple[list[int], int]:
    """(token ids of prompt, answer and line break; the prompt's length in tokens)."""
    prompt = tokenizer.encode(item.prompt)
    answer = tokenizer.encode(format_answer(item.expected.split(" ")) + "\n")
    return prompt + answer, len(prompt)


def token_batch(tokenizer, items: list[Item], pad_id: int) -> Batch:
    """The items right-padded to a multiple of WIDTH_MULTIPLE, positions from 0, loss on the answers."""
    encoded = [encode_item(tokenizer, item) for item in items]
    width = -(-max(len(ids) for ids, _ in encoded) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE
    tokens_BxT = np.full((len(items), width), pad_id, dtype=np.int32)
    for row, (ids, _) in enumerate(encoded):
        tokens_BxT[row, : len(ids)] = ids
    lengths_B = np.array([len(ids) for ids, _ in encoded])
    prompt_lengths_B = np.array([prompt_length for _, prompt_length in encoded])
    return make_batch(tokens_BxT, prompt_lengths_B, lengths_B, np.zeros_like(lengths_B), max_positions=width)


def eval_items(
    code: str, lengths: list[int], examples_per_length: int, seed: int, demonstrations: int, demo_length: int
) -> list[Item]:
    """The test prompts: `examples_per_length` at each input length, fixed by the seed."""
    return [
        item
        for length in lengths
        for item in cell_items(code, length, examples_per_length, seed, demonstrations, demo_length)
    ]
