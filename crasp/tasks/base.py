"""Shared machinery of the task library: vocabulary, errors, the Examples batch and the Task base.

Format (Huang et al. 2025): `<bos> input <sep> answer <eos>`; retrieval puts the query after SEP:
`<bos> c_1 .. c_m <sep> q answer <eos>`. Token ids are positions in `task.vocab`: the four special
tokens first, then the task's symbols. Samplers work on symbol indices (0 .. |symbols|-1) and add
NUM_SPECIALS once, when the batch is assembled.

Limits, so that a request cannot exhaust memory (the papers use at most 150 symbols and inputs of
a few hundred tokens): alphabet_size <= MAX_ALPHABET_SIZE = 4,096; input lengths <= MAX_LENGTH =
16,384, for every task, also those whose definition has no upper bound (max_length() is UNBOUNDED);
and one call to `sample` draws at most MAX_SAMPLE_ELEMENTS = 2**24 elements, counted as
n * max(length, number of symbols) because some samplers hold a row per symbol for each example.
"""

import dataclasses
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, NamedTuple

import numpy as np

from crasp.tasks.literature import Claim

# Token ids of the special symbols in every task vocabulary, and the symbols themselves (as programs name them).
PAD_ID, BOS_ID, SEP_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<sep>", "<eos>")
BOS_SYMBOL, SEP_SYMBOL, EOS_SYMBOL = SPECIAL_TOKENS[BOS_ID], SPECIAL_TOKENS[SEP_ID], SPECIAL_TOKENS[EOS_ID]
# The symbols every program over a task reads besides the task's alphabet (<pad> is never read).
PROGRAM_SPECIALS = (BOS_SYMBOL, SEP_SYMBOL, EOS_SYMBOL)
NUM_SPECIALS = len(SPECIAL_TOKENS)

# max_length() of a task whose definition has no upper bound: an int, so min(hi, task.max_length()) works.
UNBOUNDED = sys.maxsize
MAX_ALPHABET_SIZE = 4096
MAX_LENGTH = 16384
MAX_SAMPLE_ELEMENTS = 1 << 24

# Alphabets of up to 62 symbols are single characters, letters first: 2 symbols are {a, b} (repeat
# copy), 26 the lowercase letters (majority), 52 the ASCII letters (pretrained copying prompts),
# 62 letters and digits (pretrained retrieval prompts). Larger alphabets are named s0, s1, ...
SHORT_SYMBOLS = string.ascii_lowercase + string.ascii_uppercase + string.digits


def symbol_names(alphabet_size: int) -> tuple[str, ...]:
    if alphabet_size <= len(SHORT_SYMBOLS):
        return tuple(SHORT_SYMBOLS[:alphabet_size])
    return tuple(f"s{k}" for k in range(alphabet_size))


class TaskError(ValueError):
    """A request the task library cannot satisfy; the message names the task and what is accepted."""


class UnknownTaskError(TaskError):
    pass


class ParameterError(TaskError):
    pass


class SamplerError(TaskError):
    pass


class InvalidInputError(TaskError):
    """task.answer() was given an input outside the task's domain (wrong symbols, no valid query, ties...)."""


class Draw(NamedTuple):
    """What a sampler draws, in symbol indices; answers_NxA beyond answer_lengths_N are ignored."""

    inputs_NxM: np.ndarray
    answers_NxA: np.ndarray
    answer_lengths_N: np.ndarray
    queries_N: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Examples:
    """A batch of n examples, right-padded with PAD.

    prompt = tokens[r, :prompt_lengths[r]] (ends with SEP, or with SEP q for retrieval);
    answer = tokens[r, prompt_lengths[r]:lengths[r]], whose last token is EOS.
    """

    tokens: np.ndarray  # int32 [n, T], T = lengths.max()
    prompt_lengths: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n]
    input_lengths: np.ndarray  # int64 [n]: input symbols sit at tokens[r, 1:1 + input_lengths[r]]
    vocab: tuple[str, ...]
    has_query: bool

    def __len__(self) -> int:
        return len(self.tokens)

    def _symbols(self, row: int, start: int, stop: int) -> list[str]:
        return [self.vocab[t] for t in self.tokens[row, start:stop]]

    @cached_property
    def inputs(self) -> list[list[str]]:
        return [self._symbols(r, 1, 1 + m) for r, m in enumerate(self.input_lengths)]

    @cached_property
    def answers(self) -> list[list[str]]:
        return [self._symbols(r, p, n - 1) for r, (p, n) in enumerate(zip(self.prompt_lengths, self.lengths))]

    @cached_property
    def queries(self) -> list[str] | None:
        if not self.has_query:
            return None
        return [self.vocab[self.tokens[r, p - 1]] for r, p in enumerate(self.prompt_lengths)]


def assemble(draw: Draw, vocab: tuple[str, ...]) -> Examples:
    n, m = draw.inputs_NxM.shape
    query_width = 0 if draw.queries_N is None else 1
    prompt_length = m + 2 + query_width
    answer_width = draw.answers_NxA.shape[1]
    tokens = np.full((n, prompt_length + answer_width + 1), PAD_ID, dtype=np.int32)
    tokens[:, 0] = BOS_ID
    tokens[:, 1 : m + 1] = draw.inputs_NxM + NUM_SPECIALS
    tokens[:, m + 1] = SEP_ID
    if draw.queries_N is not None:
        tokens[:, m + 2] = draw.queries_N + NUM_SPECIALS
    in_answer = np.arange(answer_width)[None, :] < draw.answer_lengths_N[:, None]
    tokens[:, prompt_length : prompt_length + answer_width] = np.where(
        in_answer, draw.answers_NxA + NUM_SPECIALS, PAD_ID
    )
    lengths = prompt_length + draw.answer_lengths_N.astype(np.int64) + 1
    tokens[np.arange(n), lengths - 1] = EOS_ID
    return Examples(
        tokens=tokens[:, : lengths.max(initial=prompt_length + 1)],
        prompt_lengths=np.full(n, prompt_length, dtype=np.int64),
        lengths=lengths,
        input_lengths=np.full(n, m, dtype=np.int64),
        vocab=vocab,
        has_query=draw.queries_N is not None,
    )


# Rows drawn per rejection round are capped so one round stays within a few MB.
MAX_ELEMENTS_PER_ROUND = 1 << 22


def sample_by_rejection(
    n: int, width: int, draw: Callable[[int], tuple[np.ndarray, ...]], accept: Callable[..., np.ndarray]
) -> tuple[np.ndarray, ...]:
    """Draw rows until n pass `accept`; kept rows stay in draw order, so a seed fixes the result.

    The batch size adapts to the acceptance rate seen so far; callers only use this where the
    acceptance rate is bounded below for every request their length check lets through.
    """
    parts, have, batch = [], 0, n
    while have < n:
        arrays = draw(batch)
        keep = accept(*arrays)
        parts.append(tuple(a[keep] for a in arrays))
        accepted = int(keep.sum())
        have += accepted
        rate = (accepted + 1) / (batch + 1)
        batch = int(min((n - have) / rate * 1.25 + 8, max(MAX_ELEMENTS_PER_ROUND // max(width, 1), 1)))
    return tuple(np.concatenate(column)[:n] for column in zip(*parts))


@dataclass(frozen=True)
class Task:
    """A task: symbols, a seeded sampler, the exact reference answer and literature claims.

    Subclasses are frozen dataclasses whose fields are the sampler parameters (with the paper's
    from-scratch values as defaults) and implement _make_symbols, _draw and _reference.
    """

    code: ClassVar[str]
    description: ClassVar[str]
    literature: ClassVar[Mapping[str, Claim]]
    has_query: ClassVar[bool] = False
    # For a task predicted not to generalize: the task theory says generalizes on strings of the same
    # shape (the First tasks for the Last ones, unique copying for copying with repeats). The verdict
    # protocol counts the task's verdict at a bin only where its control, trained alike, generalizes.
    control: ClassVar[str | None] = None

    def __post_init__(self):
        self._check_parameters()
        if self.min_length() > MAX_LENGTH:
            raise ParameterError(
                f"task {self.code}: no input length from 1 to {MAX_LENGTH} can be sampled with "
                f"{self.parameter_summary()}"
            )

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def params(self) -> dict:
        return dataclasses.asdict(self)

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        return self._make_symbols()

    @cached_property
    def vocab(self) -> tuple[str, ...]:
        return SPECIAL_TOKENS + self.symbols

    @cached_property
    def _symbol_index(self) -> dict[str, int]:
        return {s: k for k, s in enumerate(self.symbols)}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({params})"

    # --- lengths -----------------------------------------------------------------------------
    def length_problem(self, length: int) -> str | None:
        """Why the sampler cannot produce inputs of this length, or None if it can."""
        if length < 1:
            return "inputs have at least one symbol"
        if length > MAX_LENGTH:
            return f"inputs have at most MAX_LENGTH={MAX_LENGTH} symbols"
        return None

    def min_length(self) -> int:
        """The shortest length the sampler can produce (MAX_LENGTH + 1 if none)."""
        length = 1
        while length <= MAX_LENGTH and self.length_problem(length) is not None:
            length += 1
        return length

    def max_length(self) -> int:
        """The longest input the task's definition allows; sampling also stops at MAX_LENGTH."""
        return UNBOUNDED

    def length_weights(self, lengths: np.ndarray) -> np.ndarray:
        """How often each of `lengths` is drawn, relative to the others, where a range of lengths is
        drawn from: equally often, unless the sampler redraws the length with every rejected string
        (the official retrieval sampler: crasp.tasks.retrieval), which weights a length by the
        probability that a string drawn at it is kept."""
        return np.ones(len(lengths))

    def check_length(self, length) -> None:
        accepted = f"{self.min_length()} to {min(self.max_length(), MAX_LENGTH)}"
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
            raise SamplerError(
                f"task {self.code}: length={length!r} is not an integer; accepted: integers from {accepted}"
            )
        problem = self.length_problem(int(length))
        if problem is not None:
            raise SamplerError(
                f"task {self.code}: cannot sample length={length}: {problem}; accepted lengths with "
                f"{self.parameter_summary()}: {accepted}"
            )

    def parameter_summary(self) -> str:
        """The task's parameters as `name=value, ...` (for messages)."""
        return ", ".join(f"{k}={v!r}" for k, v in self.params.items()) or "no parameters"

    # --- sampling ----------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, n: int, length: int) -> Examples:
        """n examples of input length `length` (context length for retrieval, source length for copying)."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"task {self.code}: rng must be a numpy.random.Generator, got {type(rng).__name__}")
        self.check_length(length)
        most = MAX_SAMPLE_ELEMENTS // max(int(length), len(self.symbols))
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= most:
            raise SamplerError(
                f"task {self.code}: n={n!r} is not a valid number of examples; accepted: integers "
                f"from 1 to {most} at length={length} (at most MAX_SAMPLE_ELEMENTS={MAX_SAMPLE_ELEMENTS} "
                f"elements per call, n * max(length, {len(self.symbols)} symbols); sample in batches)"
            )
        return assemble(self._draw(rng, int(n), int(length)), self.vocab)

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        raise NotImplementedError

    # --- reference answer --------------------------------------------------------------------
    def answer(self, input_symbols: Sequence[str], query: str | None = None) -> list[str]:
        """The exact answer (without EOS) for an input given as symbols; retrieval tasks need the query."""
        indices = self._indices(input_symbols)
        if self.has_query:
            if query is None:
                raise InvalidInputError(f"task {self.code}: a retrieval task needs the query symbol")
            answer = self._reference(indices, self._indices([query])[0])
        else:
            if query is not None:
                raise InvalidInputError(f"task {self.code}: takes no query, got query={query!r}")
            answer = self._reference(indices)
        return [self.symbols[k] for k in answer]

    def _indices(self, symbols: Sequence[str]) -> list[int]:
        unknown = sorted({s for s in symbols if s not in self._symbol_index}, key=str)
        if unknown:
            shown = ", ".join(self.symbols) if len(self.symbols) <= 62 else f"{self.symbols[0]} .. {self.symbols[-1]}"
            raise InvalidInputError(f"task {self.code}: unknown symbols {unknown}; accepted: {shown}")
        return [self._symbol_index[s] for s in symbols]

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        raise NotImplementedError

    # --- parameters --------------------------------------------------------------------------
    def _make_symbols(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _check_parameters(self) -> None:
        pass

    def _require_int(self, name: str, minimum: int, maximum: int | None = None) -> None:
        value = getattr(self, name)
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= minimum
        if ok and maximum is not None:
            ok = value <= maximum
        if not ok:
            accepted = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
            raise ParameterError(f"task {self.code}: parameter {name}={value!r} is invalid; accepted: {accepted}")


@dataclass(frozen=True)
class AlphabetTask(Task):
    """A task over a parameterized alphabet of symbol_names(alphabet_size)."""

    alphabet_size: int = 2

    def _make_symbols(self) -> tuple[str, ...]:
        return symbol_names(self.alphabet_size)

    def _check_parameters(self) -> None:
        self._require_int("alphabet_size", 2, MAX_ALPHABET_SIZE)


class BinaryTask(Task):
    """A task over the fixed alphabet {0, 1} (no parameters)."""

    def _make_symbols(self) -> tuple[str, ...]:
        return ("0", "1")
