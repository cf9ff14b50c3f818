"""The fixed sample of task strings on which every candidate expression is evaluated.

A sample is a list of full strings `prompt + answer + <eos>` of the task, flattened into one
array of N positions (string after string), with the positions whose next token is an answer
token ("needed") and that token ("target"), as `crasp.check` checks them teacher-forced.

Strings come from a small version of the task (--sample-alphabet task symbols, where the task has
an alphabet_size): every string up to a short input length, then random longer ones, then any
counterexamples found while verifying. The program alphabet has two more task symbols than the
sample uses. They never occur, and stand for every symbol a larger alphabet adds: the grammar
names no task symbol, so the values of an expression at an absent symbol are those at one of the
two (two are needed for `s = t` with s and t both absent). Hence an expression that fails on a
sample string fails on that same string in the task with its own, larger alphabet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from crasp.check import exhaustive_strings, small_version
from crasp.tasks.base import PROGRAM_SPECIALS, SEP_SYMBOL
from crasp.search.options import SampleOptions, SearchError
from crasp.tasks import Task, get_task, parameters_of, symbol_names

ABSENT_SYMBOLS = 2
MAX_SYMBOLS = 6  # task symbols one sample string may use (a counterexample with more is not added)


class SampleError(SearchError):
    """Sample options the task cannot satisfy."""


@dataclass
class Sample:
    task: Task
    alphabet: tuple[str, ...]  # the program alphabet
    strings: list[tuple[str, ...]]
    sources: dict[str, int]  # how many strings came from where: exhaustive, random, counterexamples
    options: SampleOptions
    tokens: np.ndarray = field(init=False)  # (N,) symbol ids
    string_start: np.ndarray = field(init=False)  # (N,) flat index of the first position of the string
    offset: np.ndarray = field(init=False)  # (N,) 0-based position in the string
    needed: np.ndarray = field(init=False)  # flat indices whose next token is checked
    targets: np.ndarray = field(init=False)  # symbol id expected after each needed position

    def __post_init__(self):
        ids = {s: k for k, s in enumerate(self.alphabet)}
        lengths = np.array([len(s) for s in self.strings])
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        self.tokens = np.array([ids[x] for string in self.strings for x in string], np.int64)
        self.string_start = starts
        self.offset = np.arange(len(self.tokens)) - starts
        needed = []
        for start, string in zip(np.cumsum(lengths) - lengths, self.strings):
            first = string.index(SEP_SYMBOL) + int(self.task.has_query)  # the last prompt position
            needed.extend(range(start + first, start + len(string) - 1))
        self.needed = np.array(needed, np.int64)
        self.targets = self.tokens[self.needed + 1]

    @property
    def positions(self) -> int:
        return len(self.tokens)

    @property
    def symbols_used(self) -> int:
        return len(self.alphabet) - len(PROGRAM_SPECIALS) - (ABSENT_SYMBOLS if self.has_absent_symbols else 0)

    @property
    def has_absent_symbols(self) -> bool:
        return has_alphabet_size(self.task)

    def prediction(self, k: int) -> str:
        """The k-th checked prediction in words: the string so far and the expected next token."""
        position = int(self.needed[k])
        prefix = " ".join(self.alphabet[symbol] for symbol in self.tokens[self.string_start[position] : position + 1])
        return f"after `{prefix}` the next token is {self.alphabet[self.targets[k]]}"

    def with_string(self, string: tuple[str, ...]) -> "Sample":
        """The sample with one more string (over the first symbols of symbol_names, see relabel);
        the program alphabet grows if the string uses more symbols than the others."""
        sources = dict(self.sources, counterexamples=self.sources.get("counterexamples", 0) + 1)
        alphabet = self.alphabet
        if self.has_absent_symbols:
            used = len({x for x in string if x not in PROGRAM_SPECIALS})
            alphabet = PROGRAM_SPECIALS + symbol_names(max(used, self.symbols_used) + ABSENT_SYMBOLS)
        return Sample(self.task, alphabet, self.strings + [string], sources, self.options)

    def describe(self) -> str:
        used = " ".join(self.alphabet[len(PROGRAM_SPECIALS) : len(PROGRAM_SPECIALS) + self.symbols_used])
        absent = (
            f"; program alphabet adds {ABSENT_SYMBOLS} symbols that occur in no string, standing for the "
            "rest of any larger alphabet"
            if self.has_absent_symbols
            else ""
        )
        parts = [
            f"{self.sources['exhaustive']} strings (all with input length <= {self.options.exhaustive_length})",
            f"{self.sources['random']} random (input lengths {'/'.join(map(str, self.options.random_lengths))}, "
            f"seed {self.options.seed})",
        ]
        if self.sources.get("counterexamples"):
            parts.append(f"{self.sources['counterexamples']} counterexamples from verification")
        return (
            f"{self.task.code} over task symbols {used}{absent}: {' + '.join(parts)}; "
            f"{self.positions} positions, {len(self.needed)} predictions checked"
        )

    def relabel(self, string: list[str]) -> tuple[str, ...] | None:
        """A string of the full task renamed onto the first symbols of symbol_names, keeping their
        order (every task treats its symbols alike, up to their order), or None if it uses more
        than MAX_SYMBOLS task symbols."""
        if not self.has_absent_symbols:
            return tuple(string)
        # crasp.check reports strings of the task or of its small version (a b c); both name
        # their symbols by symbol_names, so either order is the alphabet's order.
        rank = {x: k for k, x in enumerate(small_version(self.task).symbols)}
        rank.update({x: k for k, x in enumerate(self.task.symbols)})
        used = sorted({x for x in string if x not in PROGRAM_SPECIALS}, key=rank.__getitem__)
        if len(used) > MAX_SYMBOLS:
            return None
        names = dict(zip(used, symbol_names(MAX_SYMBOLS)))
        return tuple(names.get(x, x) for x in string)


def has_alphabet_size(task: Task) -> bool:
    return "alphabet_size" in parameters_of(type(task))


def small_task(task: Task, options: SampleOptions) -> Task:
    if has_alphabet_size(task):
        return get_task(task.code, **{**task.params, "alphabet_size": options.alphabet})
    return task


def full_strings(examples) -> list[tuple[str, ...]]:
    return [tuple(examples.vocab[k] for k in row[:n]) for row, n in zip(examples.tokens, examples.lengths)]


def build_sample(task: Task, options: SampleOptions = SampleOptions()) -> Sample:
    small = small_task(task, options)
    alphabet = PROGRAM_SPECIALS + (
        symbol_names(options.alphabet + ABSENT_SYMBOLS) if has_alphabet_size(task) else task.symbols
    )
    exhaustive = [tuple(s) for s in exhaustive_strings(small, options.exhaustive_length)]
    seen = set(exhaustive)
    random = []
    rng = np.random.default_rng(options.seed)
    lengths = [n for n in options.random_lengths if small.length_problem(n) is None]
    for k in range(options.random_strings if lengths else 0):
        string = full_strings(small.sample(rng, 1, lengths[k % len(lengths)]))[0]
        if string not in seen:
            seen.add(string)
            random.append(string)
    if not exhaustive and not random:
        raise SampleError(
            f"task {task.code} has no string with input length <= {options.exhaustive_length} "
            f"over {options.alphabet} symbols and no random length among {options.random_lengths}; "
            "raise --exhaustive-length or the random lengths"
        )
    return Sample(task, alphabet, exhaustive + random, {"exhaustive": len(exhaustive), "random": len(random)}, options)
