"""Verify programs against tasks and languages: exhaustively on short strings, then on long samples.

A next-token program is checked on full task strings `prompt + answer`, teacher-forced in one
pass (crasp.nexttoken.check_teacher_forced); an acceptance program on strings of a language
(crasp.languages), read at the last position. Both run the same two stages: every short string
first, over a reduced alphabet where the task lets us choose one, then random strings at longer
lengths. A disagreement is reported with the shortest counterexample of the first stage that
has one, and the program as it ran on it (over the reduced alphabet, if that is where it failed).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from crasp.evaluate import evaluate
from crasp.fragment import Fragment, fragment_of
from crasp.languages import LANGUAGES, Language
from crasp.nexttoken import Failure, check_teacher_forced, encode, what_the_outputs_say
from crasp.program import CraspProgramError, Program
from crasp.source import ProgramSource
from crasp.tasks import (
    PAD_ID,
    PROGRAM_SPECIALS,
    TASK_CODES,
    Examples,
    InvalidInputError,
    Task,
    UnknownTaskError,
    get_task,
    parameters_of,
)

EXHAUSTIVE_ALPHABET = 3  # symbols for the exhaustive stage, where the task lets us choose
EXHAUSTIVE_MAX_LENGTH = 6
SAMPLE_LENGTHS = (1, 2, 3, 4, 5, 7, 10, 16, 25, 40, 64, 100, 150, 200, 300)
# Languages: every string of up to about this many, then samples at the longer SAMPLE_LENGTHS.
LANGUAGE_EXHAUSTIVE_STRINGS = 10_000


@dataclass(frozen=True)
class Counterexample:
    string: tuple[str, ...]
    program: Program  # the program as it ran on the string
    problem: str  # what the program got wrong, and where

    def __str__(self) -> str:
        return f"{' '.join(self.string)}\n    {self.problem}"


@dataclass(frozen=True)
class CheckReport:
    task: str
    witness: Program
    fragment: Fragment
    strings: int
    agreeing: int
    seconds: float
    failure: Counterexample | None
    method: str  # which strings were checked, in words

    @property
    def agreement(self) -> float:
        return self.agreeing / self.strings if self.strings else 0.0

    @property
    def verified(self) -> bool:
        return self.strings > 0 and self.agreeing == self.strings

    @property
    def counterexample(self) -> str | None:
        return None if self.failure is None else str(self.failure)


def _lengths(lengths: list[int]) -> str:
    return f"{len(lengths)} lengths from {lengths[0]} to {lengths[-1]}" if lengths else "no length"


@dataclass(frozen=True)
class _Batch:
    correct: np.ndarray  # bool, one per string
    shortest_failure: Counterexample | None


def _report(name: str, program: Program, batches: Iterator[_Batch], method: str) -> CheckReport:
    started = time.perf_counter()
    checked = agreeing = 0
    failure = None
    for batch in batches:
        checked += len(batch.correct)
        agreeing += int(batch.correct.sum())
        failure = failure or batch.shortest_failure
    return CheckReport(
        name, program, fragment_of(program), checked, agreeing, time.perf_counter() - started, failure, method
    )


# ---------------------------------------------------------------- next-token tasks
def to_program_ids(tokens: np.ndarray, vocab: tuple[str, ...], program: Program) -> np.ndarray:
    ids = program.symbol_ids()
    missing = [s for s in vocab if s not in ids and s != vocab[PAD_ID]]
    if missing:
        raise CraspProgramError(f"the program's alphabet lacks the task symbols {missing[:5]}")
    table = np.array([-1 if k == PAD_ID else ids[s] for k, s in enumerate(vocab)])
    return table[tokens]


def program_vocabulary(task: Task) -> tuple[str, ...]:
    """The symbols a program over the task reads (<pad> is never read)."""
    return PROGRAM_SPECIALS + task.symbols


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


def _next_token_problem(failure: Failure, string: list[str]) -> str:
    said = what_the_outputs_say(failure.outputs)
    return f"position {failure.position} ({string[failure.position - 1]}): expected {failure.expected} next, but {said}"


def _task_batch(
    program: Program, task: Task, tokens: np.ndarray, prompt_lengths: np.ndarray, lengths: np.ndarray
) -> _Batch:
    result = check_teacher_forced(program, to_program_ids(tokens, task.vocab, program), prompt_lengths, lengths)
    if not result.failures:
        return _Batch(result.correct, None)
    shortest = min(result.failures, key=lambda f: lengths[f.example])
    string = [task.vocab[k] for k in tokens[shortest.example, : lengths[shortest.example]]]
    return _Batch(result.correct, Counterexample(tuple(string), program, _next_token_problem(shortest, string)))


def _task_strings_batch(program: Program, task: Task, strings: list[list[str]]) -> _Batch:
    vocab_ids = {s: k for k, s in enumerate(task.vocab)}
    width = max(len(s) for s in strings)
    tokens = np.full((len(strings), width), PAD_ID, np.int64)
    for row, string in enumerate(strings):
        tokens[row, : len(string)] = [vocab_ids[x] for x in string]
    lengths = np.array([len(s) for s in strings])
    prompt_lengths = np.array([s.index("<sep>") + 1 + int(task.has_query) for s in strings])
    return _task_batch(program, task, tokens, prompt_lengths, lengths)


def check_lengths(task: Task, lengths: Iterable[int]) -> list[int]:
    """The lengths, if the task's sampler produces each; else its SamplerError, which names the
    accepted lengths (checked before any is used: a negative one must not reach a seed)."""
    lengths = list(lengths)
    for length in lengths:
        task.check_length(length)
    return lengths


def agreement_by_length(
    task: Task, program: Program, lengths: Iterable[int], samples_per_length: int = 200, seed: int = 0
) -> dict[int, float]:
    """For each length, the fraction of the task's sampled strings on which `program` predicts every
    answer token and the final <eos>: how well a program that is not a witness approximates the
    task on the task's own test distribution."""
    lengths = check_lengths(task, lengths)
    # One generator per length: a length's strings do not depend on which other lengths are asked for.
    return {
        length: float(
            correct_answers(
                task, program, task.sample(np.random.default_rng((seed, length)), samples_per_length, length)
            ).mean()
        )
        for length in lengths
    }


def correct_answers(task: Task, program: Program, examples: Examples) -> np.ndarray:
    """One bool per sampled string: `program` predicts every answer token and the final <eos>."""
    return _task_batch(program, task, examples.tokens, examples.prompt_lengths, examples.lengths).correct


def small_version(task: Task) -> Task:
    """The task over a reduced alphabet, where it has that parameter, for exhaustive enumeration:
    at most EXHAUSTIVE_ALPHABET symbols, never more than the task's own."""
    if "alphabet_size" in parameters_of(type(task)):
        return get_task(task.code, **{**task.params, "alphabet_size": min(EXHAUSTIVE_ALPHABET, task.alphabet_size)})
    return task


def check_witness(
    task: Task,
    make_witness: Callable[[tuple[str, ...]], Program],
    samples_per_length: int = 200,
    seed: int = 0,
    exhaustive_max_length: int = EXHAUSTIVE_MAX_LENGTH,
    lengths: tuple[int, ...] = SAMPLE_LENGTHS,
) -> CheckReport:
    """Check `make_witness(symbols)` on every short string of a small version of the task and on
    random samples of the task itself at `lengths` (those its sampler allows)."""
    small = small_version(task)
    program = make_witness(task.symbols)
    sampled = [length for length in lengths if task.length_problem(length) is None]

    def batches() -> Iterator[_Batch]:
        strings = exhaustive_strings(small, exhaustive_max_length)
        if strings:
            yield _task_strings_batch(make_witness(small.symbols), small, strings)
        rng = np.random.default_rng(seed)
        for length in sampled:
            examples = task.sample(rng, samples_per_length, length)
            yield _task_batch(program, task, examples.tokens, examples.prompt_lengths, examples.lengths)

    method = (
        f"every input up to length {exhaustive_max_length} over {' '.join(small.symbols)}, then "
        f"{samples_per_length} random inputs at each of {_lengths(sampled)}"
    )
    return _report(task.code, program, batches(), method)


# ---------------------------------------------------------------- languages
def _language_batch(program: Program, language: Language, strings: list[list[str]]) -> _Batch:
    lengths = np.array([len(s) for s in strings])
    values = evaluate(program, encode(program, strings), [program.accept])[program.accept].array
    accepted = values[np.arange(len(strings)), lengths - 1]
    members = np.array([language.contains(s) for s in strings])
    correct = accepted == members
    wrong = np.flatnonzero(~correct)
    if not len(wrong):
        return _Batch(correct, None)
    shortest = int(wrong[np.argmin(lengths[wrong])])
    problem = (
        f"the program accepts it, but it is not in {language.name}"
        if accepted[shortest]
        else f"the program rejects it, but it is in {language.name}"
    )
    return _Batch(correct, Counterexample(tuple(strings[shortest]), program, problem))


def exhaustive_language_length(language: Language) -> int:
    """The longest length up to which every string is checked (about LANGUAGE_EXHAUSTIVE_STRINGS)."""
    length, total = 0, 0
    while total + len(language.symbols) ** (length + 1) <= LANGUAGE_EXHAUSTIVE_STRINGS:
        length += 1
        total += len(language.symbols) ** length
    return length


def language_samples(language: Language, rng: np.random.Generator, n: int, length: int) -> list[list[str]]:
    """n strings of this length: a third uniform, a third members, a third members with one
    symbol changed (uniform strings where the language has no member of this length)."""
    symbols = language.symbols
    strings = []
    for k in range(n):
        member = language.member(rng, length) if k % 3 else None
        if member is not None and k % 3 == 2:
            at = int(rng.integers(length))
            member[at] = symbols[(symbols.index(member[at]) + 1 + int(rng.integers(len(symbols) - 1))) % len(symbols)]
        strings.append(member or [symbols[s] for s in rng.integers(len(symbols), size=length)])
    return strings


def check_language(
    language: Language,
    program: Program,
    samples_per_length: int = 200,
    seed: int = 0,
    lengths: tuple[int, ...] = SAMPLE_LENGTHS,
) -> CheckReport:
    """Check an acceptance program on every string up to exhaustive_language_length(language),
    then on samples at the longer `lengths`."""
    exhaustive_length = exhaustive_language_length(language)
    sampled = [length for length in lengths if length > exhaustive_length]

    def batches() -> Iterator[_Batch]:
        strings = [
            list(s)
            for length in range(1, exhaustive_length + 1)
            for s in itertools.product(language.symbols, repeat=length)
        ]
        yield _language_batch(program, language, strings)
        rng = np.random.default_rng(seed)
        for length in sampled:
            yield _language_batch(program, language, language_samples(language, rng, samples_per_length, length))

    method = (
        f"every string up to length {exhaustive_length}, then {samples_per_length} random strings at each "
        f"of {_lengths(sampled)} (uniform, members, members with one symbol changed)"
    )
    return _report(language.name, program, batches(), method)


# ---------------------------------------------------------------- a user's program
def lookup(name: str) -> Task | Language:
    """A task by code (or class name) or a language by name."""
    if name in LANGUAGES:
        return LANGUAGES[name]
    try:
        return get_task(name)
    except UnknownTaskError:
        raise UnknownTaskError(
            f"no task or language {name!r}; tasks: {', '.join(TASK_CODES)}; languages: {', '.join(LANGUAGES)}"
        ) from None


def vocabulary_of(target: Task | Language) -> tuple[str, ...]:
    return target.vocabulary if isinstance(target, Language) else program_vocabulary(target)


def describe(target: Task | Language) -> str:
    return f"language {target.name}" if isinstance(target, Language) else f"task {target.code}"


def program_for(source: ProgramSource, target: Task | Language) -> Program:
    """The program over the target's symbols (an error if it cannot read them)."""
    return source.program_for(vocabulary_of(target), describe(target))


def check_program(
    source: ProgramSource, target: Task | Language, samples_per_length: int = 200, seed: int = 0
) -> CheckReport:
    """Check a user's program against a task (next-token, `output:`) or a language (`accept:`)."""
    owner = describe(target)
    wanted = "accept" if isinstance(target, Language) else "output"
    as_written = source.program()
    if (as_written.accept if wanted == "accept" else as_written.output) is None:
        kinds = {
            "accept": "an acceptance program (`accept: NAME`, a Boolean read at the last position)",
            "output": "a next-token program (`output: O` with a family O[s])",
        }
        other = "output" if wanted == "accept" else "accept"
        raise CraspProgramError(f"{source.name} is {kinds[other]}, but {owner} needs {kinds[wanted]}")
    program = program_for(source, target)
    if isinstance(target, Language):
        return check_language(target, program, samples_per_length, seed)
    if source.generic:
        return check_witness(
            target, lambda symbols: source.program(PROGRAM_SPECIALS + symbols), samples_per_length, seed
        )
    return check_witness(target, lambda symbols: program, samples_per_length, seed)
