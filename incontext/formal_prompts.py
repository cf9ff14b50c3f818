"""Few-shot prompts for the formal tasks, as pretrained models see them (retrieval/copying paper,
section 4.1).

Tokens are separated by spaces, demonstrations one per line, then the test item; the answer is
the rest of the line.
  retrieval  ` a b c d | c: d` (the paper uses 4 demonstrations), alphabet: ASCII letters and digits (62)
  copying    `a b c d e : a b c d e` (5 demonstrations of length 5), alphabet: ASCII letters (52)
Non-unique retrieval: the query occurs 2 to max(2, length // 5) times at non-adjacent positions;
non-unique copying draws symbols i.i.d.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.tasks import RETRIEVAL_AND_COPYING, RETRIEVAL_CODES, get_task

RETRIEVAL_ALPHABET = 62  # crasp.tasks' 62 symbols: ASCII letters, then digits
COPYING_ALPHABET = 52  # ASCII letters


def pretrained_task(code: str):
    """The task with the sampler parameters of the pretrained-model prompts."""
    if code in RETRIEVAL_CODES:
        extra = {} if code in ("UL", "UR") else dict(occurrences=(2, None), non_adjacent=True)
        return get_task(code, alphabet_size=RETRIEVAL_ALPHABET, **extra)
    return get_task(code, alphabet_size=COPYING_ALPHABET)


def format_item(code: str, inputs: list[str], query: str | None) -> str:
    """The prompt line of one item, up to where the answer starts."""
    if code in RETRIEVAL_CODES:
        return " " + " ".join(inputs) + f" | {query}:"
    return " ".join(inputs) + " :"


def format_answer(answer: list[str]) -> str:
    return " " + " ".join(answer)


@dataclass(frozen=True)
class Item:
    task: str
    length: int
    index: int
    prompt: str
    expected: str  # the answer line, stripped


def cell_items(code: str, length: int, n: int, seed: int, demonstrations: int, demo_length: int) -> list[Item]:
    """The n prompts of one (task, length) cell; the seed fixes them whatever else is evaluated."""
    task = pretrained_task(code)
    rng = np.random.default_rng([seed, RETRIEVAL_AND_COPYING.index(code), length])
    tests = task.sample(rng, n, length)
    demos = task.sample(rng, n * demonstrations, demo_length)
    test_queries = tests.queries or [None] * n
    demo_queries = demos.queries or [None] * (n * demonstrations)
    items = []
    for i in range(n):
        lines = [format_item(code, demos.inputs[j], demo_queries[j]) + format_answer(demos.answers[j])
                 for j in range(i * demonstrations, (i + 1) * demonstrations)]
        lines.append(format_item(code, tests.inputs[i], test_queries[i]))
        items.append(Item(code, length, i, "\n".join(lines), " ".join(tests.answers[i])))
    return items
