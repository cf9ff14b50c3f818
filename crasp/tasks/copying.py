"""Copying (Veitsman et al. 2025; Huang et al. 2025): the answer is the whole input, forward or reversed.

`<bos> x_1 .. x_n <sep> answer <eos>`, length = n (the source length). Unique variants draw n
distinct symbols (a uniform random arrangement), so n <= alphabet_size; the others draw i.i.d.
uniform symbols, which repeat often over the small default alphabet. Repeat copy (Huang et al.)
is forward copying over {a, b}.

Copying with repeats can also draw inputs that defeat copying by lookup (`repeat_break_from`): in
copy order (the input read backward for NB), a periodic stretch, a token that breaks the period,
then a few i.i.d. tokens. A lookup that answers the token after an occurrence of the answer's last
k tokens is misled there as soon as the stretch is k + period tokens long: the key recurs every
period tokens, and the occurrences disagree on what follows (the break, or the period's next
token), so both the first and the last occurrence answer wrong somewhere (crasp.approximations).
I.i.d. strings over 5 symbols hold no long repeat, so on them a long enough k-gram lookup copies
every string, at any length: this is the shape on which a copying test bin can discriminate.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from crasp.tasks import literature
from crasp.tasks.base import AlphabetTask, Draw, InvalidInputError


@dataclass(frozen=True)
class Copy(AlphabetTask):
    backward: ClassVar[bool]

    def _answer_draw(self, inputs_NxM: np.ndarray) -> Draw:
        answers_NxM = inputs_NxM[:, ::-1] if self.backward else inputs_NxM
        return Draw(inputs_NxM, answers_NxM, np.full(len(inputs_NxM), inputs_NxM.shape[1], dtype=np.int64))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        return list(reversed(inputs)) if self.backward else list(inputs)


def distinct_symbols(rng: np.random.Generator, n: int, length: int, alphabet_size: int) -> np.ndarray:
    """n rows of `length` distinct symbol indices, each row a uniform arrangement."""
    return rng.random((n, alphabet_size)).argsort(axis=1)[:, :length]


def distinct_length_problem(length: int, alphabet_size: int) -> str | None:
    if length > alphabet_size:
        return (
            f"an input of {length} distinct symbols needs alphabet_size >= {length} "
            f"(alphabet_size={alphabet_size}); raise alphabet_size or shorten the input"
        )
    return None


def require_distinct(code: str, inputs: list[int]) -> None:
    if len(set(inputs)) != len(inputs):
        raise InvalidInputError(f"task {code}: the input symbols must be distinct")


@dataclass(frozen=True)
class UniqueCopy(Copy):
    alphabet_size: int = 150

    def length_problem(self, length: int) -> str | None:
        return super().length_problem(length) or distinct_length_problem(length, self.alphabet_size)

    def max_length(self) -> int:
        return self.alphabet_size

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        return self._answer_draw(distinct_symbols(rng, n, length, self.alphabet_size))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        require_distinct(self.code, inputs)
        return super()._reference(inputs)


class UniqueCopyForward(UniqueCopy):
    code = "UF"
    backward = False
    description = "copy an input of distinct tokens in the same order"
    literature = literature.unique_copy()


class UniqueCopyBackward(UniqueCopy):
    code = "UB"
    backward = True
    description = "copy an input of distinct tokens in reverse order"
    literature = literature.unique_copy()


# The repeat-break shape: the period's length and the i.i.d. tokens after the break, each uniform
# from 1 to these, so that a stretch of k + period tokens fits inputs of k + 9 tokens and more.
MAX_PERIOD, MAX_TAIL = 4, 4


def repeat_break_strings(rng: np.random.Generator, n: int, length: int, alphabet_size: int) -> np.ndarray:
    """n inputs in copy order: a periodic stretch (period p uniform in 1..MAX_PERIOD, its first p
    tokens i.i.d.), one token that differs from what the period predicts there, then t i.i.d. tokens
    (t uniform in 0..MAX_TAIL), p and t shrunk to fit short inputs (the stretch keeps p + 1 tokens
    where it can, so that the period is seen to repeat)."""
    tail = np.minimum(rng.integers(0, MAX_TAIL + 1, size=n), max(length - 2, 0))
    stretch = length - 1 - tail  # tokens before the break (>= 1 where length >= 2)
    period = np.minimum(rng.integers(1, MAX_PERIOD + 1, size=n), np.maximum((stretch - 1), 1))
    block = rng.integers(alphabet_size, size=(n, MAX_PERIOD))
    column = np.arange(length)[None, :]
    strings = np.take_along_axis(block, column % period[:, None], axis=1)
    rows = np.arange(n)
    breaks = stretch < length  # an input of one token has no break
    predicted = strings[rows, np.minimum(stretch, length - 1)]
    shift = rng.integers(1, alphabet_size, size=n)  # any other symbol, uniformly
    strings[rows[breaks], stretch[breaks]] = (predicted[breaks] + shift[breaks]) % alphabet_size
    after = column > stretch[:, None]
    strings[after] = rng.integers(alphabet_size, size=int(after.sum()))
    return strings


@dataclass(frozen=True)
class NonUniqueCopy(Copy):
    alphabet_size: int = 5
    # Inputs of at least this many tokens are drawn in the repeat-break shape (0: none): a run sets
    # it above its training lengths, so that it trains on i.i.d. strings and is tested on the shape.
    repeat_break_from: int = 0

    def _check_parameters(self) -> None:
        super()._check_parameters()
        self._require_int("repeat_break_from", 0)

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        if self.repeat_break_from and length >= self.repeat_break_from:
            in_copy_order = repeat_break_strings(rng, n, length, self.alphabet_size)
            return self._answer_draw(in_copy_order[:, ::-1] if self.backward else in_copy_order)
        return self._answer_draw(rng.integers(self.alphabet_size, size=(n, length)))


class NonUniqueCopyForward(NonUniqueCopy):
    code = "NF"
    control = "UF"
    backward = False
    description = "copy an input whose tokens may repeat, in the same order"
    literature = literature.copy_with_repeats()


class NonUniqueCopyBackward(NonUniqueCopy):
    code = "NB"
    control = "UB"
    backward = True
    description = "copy an input whose tokens may repeat, in reverse order"
    literature = literature.copy_with_repeats()


@dataclass(frozen=True)
class RepeatCopy(NonUniqueCopyForward):
    code = "RepeatCopy"
    control = None  # not one of the paper's tasks: no control is defined for it
    alphabet_size: int = 2
    description = "copy a string over {a, b} (tokens repeat), in the same order"
    literature = literature.copy_with_repeats()
