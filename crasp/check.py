"""Verify witness programs against tasks: exhaustively on short strings, then on long samples.

Both stages build full strings `prompt + answer` and check them teacher-forced in one pass
(crasp.nexttoken.check_teacher_forced). A disagreement is reported with the shortest
counterexample found.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from crasp.fragment import Fragment, fragment_of
from crasp.nexttoken import check_teacher_forced
from crasp.program import Program
from crasp.tasks import PAD_ID, InvalidInputError, Task, get_task, parameters_of

EXHAUSTIVE_ALPHABET = 3  # symbols for the exhaustive stage, where the task lets us choose
EXHAUSTIVE_MAX_LENGTH = 6
SAMPLE_LENGTHS = (1, 2, 3, 4, 5, 7, 10, 16, 25, 40, 64, 100, 150, 200, 300)


@dataclass(frozen=True)
class CheckReport:
    task: str
    witness: Program
    fragment: Fragment
    strings: int
    agreeing: int
    seconds: float
    counterexample: str | None

    @property
    def agreement(self) -> float:
        return self.agreeing / self.strings if self.strings else 0.0

    @property
    def verified(self) -> bool:
        return self.strings > 0 and self.agreeing == self.strings


def to_program_ids(tokens: np.ndarray, vocab: tuple[str, ...], program: Program) -> np.ndarray:
    ids = program.symbol_ids()
    missing = [s for s in vocab if s not in ids and s != vocab[PAD_ID]]
    if missing:
        raise ValueError(f"the witness's alphabet lacks the task symbols {missing[:5]}")
    table = np.array([-1 if k == PAD_ID else ids[s] for k, s in enumerate(vocab)])
    return table[tokens]


def exhaustive_strings(task: Task, max_length: int) -> list[list[str]]:
    """Every valid full string (<bos> input <sep> [q] answer <eos>) with input length <= max_length."""
    strings = []
    queries = task.symbols if task.has_query else (None,)
    for length in range(1, max_length + 1):
        for inputs in itertools.product(task.symbols, repeat=length):
            for query in queries:
                try:
                    answer = task.answer(list(inputs), query) if task.has_query else task.answer(list(inputs))
                except InvalidInputError:
                    continue
                prompt = ["<bos>", *inputs, "<sep>"] + ([query] if task.has_query else [])
                strings.append(prompt + answer + ["<eos>"])
    return strings


def _check_strings(program: Program, strings: list[list[str]], task: Task):
    vocab_ids = {s: k for k, s in enumerate(task.vocab)}
    width = max(len(s) for s in strings)
    tokens = np.full((len(strings), width), PAD_ID, np.int64)
    for row, string in enumerate(strings):
        tokens[row, :len(string)] = [vocab_ids[x] for x in string]
    lengths = np.array([len(s) for s in strings])
    prompt_lengths = np.array([s.index("<sep>") + 1 + int(task.has_query) for s in strings])
    return check_teacher_forced(program, to_program_ids(tokens, task.vocab, program), prompt_lengths, lengths)


def _describe(failure, string: list[str]) -> str:
    return f"{' '.join(string)}\n    {failure.describe()}"


def small_version(task: Task) -> Task:
    """The task over a reduced alphabet, where it has that parameter, for exhaustive enumeration."""
    if "alphabet_size" in parameters_of(type(task)):
        return get_task(task.code, **{**task.params, "alphabet_size": EXHAUSTIVE_ALPHABET})
    return task


def check_witness(task: Task, make_witness, samples_per_length: int = 200, seed: int = 0,
                  exhaustive_max_length: int = EXHAUSTIVE_MAX_LENGTH,
                  lengths: tuple[int, ...] = SAMPLE_LENGTHS) -> CheckReport:
    """Check `make_witness(symbols)` on every short string of a small version of the task and on
    random samples of the task itself at `lengths` (those its sampler allows)."""
    started = time.perf_counter()
    checked = agreeing = 0
    counterexample = None
    small = small_version(task)
    small_program = make_witness(small.symbols)
    strings = exhaustive_strings(small, exhaustive_max_length)
    if strings:
        result = _check_strings(small_program, strings, small)
        checked, agreeing = len(strings), int(result.correct.sum())
        if result.failures:
            shortest = min(result.failures, key=lambda f: len(strings[f.example]))
            counterexample = _describe(shortest, strings[shortest.example])
    program = make_witness(task.symbols)
    rng = np.random.default_rng(seed)
    for length in lengths:
        if task.length_problem(length) is not None:
            continue
        examples = task.sample(rng, samples_per_length, length)
        result = check_teacher_forced(program, to_program_ids(examples.tokens, task.vocab, program),
                                      examples.prompt_lengths, examples.lengths)
        checked += len(examples)
        agreeing += int(result.correct.sum())
        if result.failures and counterexample is None:
            failure = result.failures[0]
            row = examples.tokens[failure.example, :examples.lengths[failure.example]]
            counterexample = _describe(failure, [task.vocab[k] for k in row])
    return CheckReport(task.code, program, fragment_of(program), checked, agreeing,
                       time.perf_counter() - started, counterexample)
