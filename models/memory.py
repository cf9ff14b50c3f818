"""Whether a batch can fit in this machine's memory, judged before a run folder is written.

The estimates are lower bounds (float32 activations that a forward pass cannot avoid holding at
once: the logits over the vocabulary for every position, and the KV cache or, when training, one
residual stream and MLP activation per layer kept for the backward pass). A batch refused here
could never have run; one accepted may still run out of memory later (crasplab.incontext.greedy's
GenerationMemoryError then says what to lower), but no setting that fails for sure reaches config.json.
"""

from __future__ import annotations

import os

from crasplab.errors import LabError

FLOAT_BYTES = 4
# A prompt's entry (a dict of its task, length, prompt text and expected answer) takes more than
# this in Python, and every entry of a run is built before the first batch is answered.
PROMPT_ENTRY_BYTES = 200


class BatchMemoryError(LabError, ValueError):
    """A batch whose smallest possible footprint exceeds the machine's memory."""


def physical_memory() -> int:
    """Bytes of RAM of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def decoding_bytes(config, rows: int, positions: int) -> int:
    """Greedy decoding of `rows` sequences of `positions` tokens: the prefill's logits and the KV cache."""
    logits = rows * positions * config.vocab_size
    cache = 2 * rows * config.n_layers * positions * config.kv_heads * config.head_dim
    return FLOAT_BYTES * (logits + cache)


def training_bytes(config, rows: int, positions: int) -> int:
    """A training step on `rows` sequences of `positions` tokens: logits and their gradient, and per
    layer the residual stream and the MLP's hidden activation kept for the backward pass."""
    per_layer = config.d_model + config.d_ff
    return FLOAT_BYTES * rows * positions * (2 * config.vocab_size + config.n_layers * per_layer)


def check_batch_memory(needed: int, what: str, flag: str) -> None:
    """Refuse `what` (a batch described for the user) when it needs more than the machine's memory."""
    available = physical_memory()
    if needed > available:
        raise BatchMemoryError(
            f"{what} needs at least {needed / 2**30:.1f} GiB, and this machine has "
            f"{available / 2**30:.1f} GiB of memory; lower {flag}"
        )


def check_prompt_count(count: int, flag: str) -> None:
    """Refuse a run of `count` prompts (or sequences) whose entries alone exceed the machine's memory."""
    check_batch_memory(count * PROMPT_ENTRY_BYTES, f"building {count} prompts", flag)
