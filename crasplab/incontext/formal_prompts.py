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

from crasp.tasks import RETRIEVAL_AND_COPYING, RETRIEVAL_CODES, UNBOUNDED, TaskError, get_task

RETRIEVAL_ALPHABET = 62  # crasp.tasks' 62 symbols: ASCII letters, then digits
COPYING_ALPHABET = 52  # ASCII letters


def pretrained_task(code: str):
    """The task with the sampler parameters of the pretrained-model prompts."""
    if code in RETRIEVAL_CODES:
        extra = {} if code in ("UL", "UR") else dict(occurrences=(2, None), non_adjacent=True)
        return get_task(code, alphabet_size=RETRIEVAL_ALPHABET, **extra)
    return get_task(code, alphabet_size=COPYING_ALPHABET)


@dataclass(frozen=True)
class Demonstrations:
    """How many solved items come before each test item, and their input length, per task family:
    (count, length). The defaults are the paper's. A fixed short length makes the test lengths a
    probe of in-context length generalization."""

    retrieval: tuple[int, int] = (4, 4)
    copying: tuple[int, int] = (5, 5)

    def for_task(self, code: str) -> tuple[int, int]:
        return self.retrieval if code in RETRIEVAL_CODES else self.copying


def check_prompt_lengths(tasks, lengths, demonstrations: Demonstrations) -> None:
    """Refuse, before anything is loaded or written, test or demonstration lengths that a task's
    sampler cannot produce (TaskError naming the task, the lengths and what it accepts)."""
    for code in tasks:
        task = pretrained_task(code)
        _, demo_length = demonstrations.for_task(code)
        for what, asked in (("test lengths", lengths), ("demonstration length", [demo_length])):
            bad = [length for length in asked if not task.min_length() <= length <= task.max_length()]
            if bad:
                accepted = (
                    f"{task.min_length()} or more"
                    if task.max_length() == UNBOUNDED
                    else f"{task.min_length()} to {task.max_length()}"
                )
                raise TaskError(
                    f"{what} {_as_ranges(bad)}: task {code} (alphabet of {task.alphabet_size}) accepts "
                    f"lengths {accepted}"
                )


def _as_ranges(lengths: list[int]) -> str:
    """Lengths written as sorted runs: [7, 3, 5, 6] -> "3, 5-7"."""
    runs = []
    for length in sorted(set(lengths)):
        if runs and length == runs[-1][1] + 1:
            runs[-1][1] = length
        else:
            runs.append([length, length])
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


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
        lines = [
            format_item(code, demos.inputs[j], demo_queries[j]) + format_answer(demos.answers[j])
            for j in range(i * demonstrations, (i + 1) * demonstrations)
        ]
        lines.append(format_item(code, tests.inputs[i], test_queries[i]))
        items.append(Item(code, length, i, "\n".join(lines), " ".join(tests.answers[i])))
    return items
