"""Greedy answers of a pretrained model to batches of prompts: batched prefill, then KV-cache
decoding, each answer read up to the end of its line. Prompts and answers beyond the model's
context are refused before a run starts (check_context); a batch that runs out of memory is
reported with what to lower (GenerationMemoryError)."""

from __future__ import annotations

import jax
import numpy as np

from crasplab.errors import LabError
from crasplab.models.generate import generate

# Prompts of a batch are padded to a multiple of this many tokens, and the number of generated
# tokens is rounded up likewise, so a handful of compiled programs serve a whole run.
WIDTH_BUCKET = 32
NEW_TOKENS_BUCKET = 8


class ContextError(LabError, ValueError):
    """Prompts and the tokens to generate after them do not fit in the model's context."""


class GenerationMemoryError(LabError, RuntimeError):
    """A batch of prompts and answers needed more memory than the machine has."""


def check_context(pretrained, prompts: list[str], new_tokens: int, flags: str) -> None:
    """Refuse (ContextError naming `flags`, the flags that set the sizes) prompts whose tokens and
    `new_tokens` generated ones exceed the model's context."""
    longest = max(map(len, pretrained.tokenizer.encode_batch(prompts)))
    context = pretrained.config.max_positions
    if longest + new_tokens > context:
        raise ContextError(
            f"a prompt of {longest} tokens and {new_tokens} generated tokens exceed the context of "
            f"{context} positions of {pretrained.path}; lower {flags}"
        )


def answer_budget(tokenizer, expected: list[str]) -> int:
    """The tokens answer_lines generates for these expected answers: the longest with its line
    break, plus two, rounded up to NEW_TOKENS_BUCKET."""
    answer_tokens = max(len(tokenizer.encode(" " + answer + "\n")) for answer in expected)
    return _round_up(answer_tokens + 2, NEW_TOKENS_BUCKET)


def check_answers_fit(pretrained, prompts: list[str], expected: list[str], flags: str) -> None:
    """check_context for the prompts that answer_lines will answer, with its budget of tokens."""
    check_context(pretrained, prompts, answer_budget(pretrained.tokenizer, expected), flags)


def answer_line(tokenizer, generated: list[int]) -> str:
    """The generated text up to the first special token or line break, stripped."""
    special = tokenizer.special_ids
    end = next((k for k, token in enumerate(generated) if token in special), len(generated))
    return tokenizer.decode(generated[:end]).split("\n", 1)[0].strip()


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def answer_lines(pretrained, prompts: list[str], expected: list[str], newline_id: int, batch_size: int) -> list[str]:
    """The greedy answer line to each prompt, decoded for as many tokens as the longest expected
    answer and its line break take, plus two; batches of up to `batch_size` prompts share compiled
    programs."""
    generated_BxN = _generated_tokens(
        pretrained, prompts, answer_budget(pretrained.tokenizer, expected), newline_id, batch_size
    )
    return [answer_line(pretrained.tokenizer, row.tolist()) for row in generated_BxN]


def continuation_lines(
    pretrained, prompts: list[str], limits: list[int], max_new_tokens: int, newline_id: int, batch_size: int
) -> list[str]:
    """The greedy continuation of each prompt up to the end of its line, read from no more than its
    own limit of generated tokens. Decoding runs for up to `max_new_tokens` (at least the largest
    limit): one value for every batch of a run lets the batches share compiled programs."""
    generated_BxN = _generated_tokens(pretrained, prompts, max_new_tokens, newline_id, batch_size)
    return [answer_line(pretrained.tokenizer, row[:limit].tolist()) for row, limit in zip(generated_BxN, limits)]


def _generated_tokens(
    pretrained, prompts: list[str], max_new_tokens: int, newline_id: int, batch_size: int
) -> np.ndarray:
    """The greedy tokens generated after each prompt, [len(prompts), max_new_tokens], line breaks
    ending a row early (padded with line breaks after it)."""
    prompt_ids = pretrained.tokenizer.encode_batch(prompts)
    width = _round_up(max(map(len, prompt_ids)), WIDTH_BUCKET)
    # models.generate pads to the longest prompt of the batch and compiles once per shape: filler
    # rows of exactly the bucket width fix the padded width and the batch size, so batches share
    # compiled programs. Their outputs are dropped. A filler is the first prompt behind line
    # breaks, so that it ends its line about when the real rows do: decoding goes on until every
    # row has, and a long row of line breaks alone may never end one (SmolLM2's does not).
    filler = [newline_id] * (width - len(prompt_ids[0])) + prompt_ids[0]
    rows = [*prompt_ids, *[filler] * (batch_size + 1 - len(prompts))]
    tokens_BxT = np.full((len(rows), width), newline_id, dtype=np.int32)
    for r, row in enumerate(rows):
        tokens_BxT[r, : len(row)] = row
    try:
        generation = generate(
            pretrained.model,
            tokens_BxT,
            np.array([len(row) for row in rows]),
            max_new_tokens=max_new_tokens,
            eos_id=newline_id,
            pad_id=newline_id,
        )
        return np.asarray(generation.tokens_BxN)[: len(prompts)]
    except jax.errors.JaxRuntimeError as error:
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        raise GenerationMemoryError(
            f"out of memory decoding a batch of {len(rows)} rows (batch size {batch_size} plus one) of {width} "
            f"prompt tokens and {max_new_tokens} generated ones ({error}); run the same command again with a smaller "
            "batch (--batch-size; --eval-batch-size when fine-tuning) or smaller prompts: the batches already "
            "answered are kept"
        ) from error
