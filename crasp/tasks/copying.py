"""Copying (Veitsman et al. 2025; Huang et al. 2025): the answer is the whole input, forward or reversed.

`<bos> x_1 .. x_n <sep> answer <eos>`, length = n (the source length). Unique variants draw n
distinct symbols (a uniform random arrangement), so n <= alphabet_size; the others draw i.i.d.
uniform symbols, which repeat often over the small default alphabet. Repeat copy (Huang et al.)
is forward copying over {a, b}.
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


@dataclass(frozen=True)
class NonUniqueCopy(Copy):
    alphabet_size: int = 5

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        return self._answer_draw(rng.integers(self.alphabet_size, size=(n, length)))


class NonUniqueCopyForward(NonUniqueCopy):
    code = "NF"
    backward = False
    description = "copy an input whose tokens may repeat, in the same order"
    literature = literature.copy_with_repeats()


class NonUniqueCopyBackward(NonUniqueCopy):
    code = "NB"
    backward = True
    description = "copy an input whose tokens may repeat, in reverse order"
    literature = literature.copy_with_repeats()


@dataclass(frozen=True)
class RepeatCopy(NonUniqueCopyForward):
    code = "RepeatCopy"
    alphabet_size: int = 2
    description = "copy a string over {a, b} (tokens repeat), in the same order"
    literature = literature.copy_with_repeats()
