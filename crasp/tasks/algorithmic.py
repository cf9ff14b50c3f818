"""The algorithmic tasks of Huang et al. 2025, in the same `<bos> input <sep> answer <eos>` format.

Definitions where the paper leaves a choice (length is always the number of input symbols):
- BinaryMajority: i.i.d. uniform bits conditioned on no tie (even lengths reject tied strings).
- Majority: i.i.d. uniform letters conditioned on a unique most frequent letter.
- Sort: distinct symbols; the answer lists them in the order of task.symbols.
- Parity: i.i.d. uniform bits; the answer is "1" if the number of ones is odd, else "0".
- Addition: input `x + y`, two binary numbers, most significant bit first, without leading zeros
  (a one-bit number may be 0); length = |x| + 1 + |y|, with |x| uniform in 1 .. length-2. The
  answer is x + y in binary, MSB first, without leading zeros ("0" for zero).
- BinaryMajorityInterleave: bits b_1 .. b_n; string k (k = 1, 2, 3) is b_k b_{k+3} b_{k+6} ...
  (any length n >= 3, so the three strings differ in length by at most one); each string is
  i.i.d. uniform bits conditioned on no tie; the answer is the 3 majority bits, string 1 first.
"""

from dataclasses import dataclass

import numpy as np

from crasp.tasks import literature
from crasp.tasks.base import AlphabetTask, BinaryTask, Draw, InvalidInputError, sample_by_rejection
from crasp.tasks.copying import distinct_length_problem, distinct_symbols, require_distinct


def untied_bits(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """n rows of `length` i.i.d. uniform bits, conditioned on unequal numbers of zeros and ones."""
    return sample_by_rejection(
        n,
        length,
        lambda count: (rng.integers(2, size=(count, length)),),
        lambda bits_NxM: 2 * bits_NxM.sum(axis=1) != length,
    )[0]


def majority_bit(code: str, bits: list[int]) -> int:
    ones = sum(bits)
    zeros = len(bits) - ones
    if ones == zeros:
        raise InvalidInputError(f"task {code}: a string with as many zeros as ones ({ones}) has no majority")
    return 1 if ones > zeros else 0


def one_answer(answers_N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return answers_N[:, None], np.ones(len(answers_N), dtype=np.int64)


@dataclass(frozen=True)
class BinaryMajority(BinaryTask):
    code = "BinaryMajority"
    description = "a bit string without ties; answer the more frequent bit"
    literature = literature.counting_only("compare #[j <= i] Q_1(j) with #[j <= i] Q_0(j)")

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        bits_NxM = untied_bits(rng, n, length)
        return Draw(bits_NxM, *one_answer((2 * bits_NxM.sum(axis=1) > length).astype(np.int64)))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        return [majority_bit(self.code, inputs)]


@dataclass(frozen=True)
class Majority(AlphabetTask):
    code = "Majority"
    alphabet_size: int = 26
    description = "a string with a unique most frequent symbol; answer that symbol"
    literature = literature.counting_only("for each symbol s compare its count with the count of every other symbol")

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        alphabet = self.alphabet_size

        def counts(symbols_NxM):
            flat = (np.arange(len(symbols_NxM))[:, None] * alphabet + symbols_NxM).ravel()
            return np.bincount(flat, minlength=len(symbols_NxM) * alphabet).reshape(-1, alphabet)

        def unique_argmax(symbols_NxM):
            counts_NxA = counts(symbols_NxM)
            return (counts_NxA == counts_NxA.max(axis=1, keepdims=True)).sum(axis=1) == 1

        # A round's counts hold a row of `alphabet` entries per drawn string.
        (symbols_NxM,) = sample_by_rejection(
            n, max(length, alphabet), lambda count: (rng.integers(alphabet, size=(count, length)),), unique_argmax
        )
        return Draw(symbols_NxM, *one_answer(counts(symbols_NxM).argmax(axis=1)))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        counts = [0] * self.alphabet_size
        for symbol in inputs:
            counts[symbol] += 1
        best = max(counts)
        if counts.count(best) != 1:
            raise InvalidInputError(f"task {self.code}: {counts.count(best)} symbols tie as most frequent")
        return [counts.index(best)]


@dataclass(frozen=True)
class Sort(AlphabetTask):
    code = "Sort"
    alphabet_size: int = 150
    description = "distinct symbols; answer them sorted in the order of the vocabulary"
    literature = literature.counting_only(
        "the next output is the symbol s in the input such that exactly as many "
        "input symbols as output symbols so far are smaller than s"
    )

    def length_problem(self, length: int) -> str | None:
        return super().length_problem(length) or distinct_length_problem(length, self.alphabet_size)

    def max_length(self) -> int:
        return self.alphabet_size

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        symbols_NxM = distinct_symbols(rng, n, length, self.alphabet_size)
        return Draw(symbols_NxM, np.sort(symbols_NxM, axis=1), np.full(n, length, dtype=np.int64))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        require_distinct(self.code, inputs)
        present = set(inputs)
        return [symbol for symbol in range(self.alphabet_size) if symbol in present]


@dataclass(frozen=True)
class Parity(BinaryTask):
    code = "Parity"
    description = "a bit string; answer 1 if it has an odd number of ones, else 0"
    literature = literature.PARITY

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        bits_NxM = rng.integers(2, size=(n, length))
        return Draw(bits_NxM, *one_answer(bits_NxM.sum(axis=1) % 2))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        parity = 0
        for bit in inputs:
            parity ^= bit
        return [parity]


PLUS = 2  # symbol index of "+" in Addition.symbols


@dataclass(frozen=True)
class Addition(BinaryTask):
    code = "Addition"
    description = "two binary numbers x+y, most significant bit first; answer their sum in binary"
    literature = literature.ADDITION

    def _make_symbols(self) -> tuple[str, ...]:
        return ("0", "1", "+")

    def length_problem(self, length: int) -> str | None:
        if length < 3:
            return "the input x+y has at least one bit per number and the '+', so length >= 3"
        return super().length_problem(length)

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        first_lengths_N = rng.integers(1, length - 1, size=n)
        columns_NxM = np.broadcast_to(np.arange(length), (n, length))
        inputs_NxM = rng.integers(2, size=(n, length))
        plus_N = first_lengths_N
        # Each number of two or more bits starts with 1 (no leading zeros).
        starts_number_NxM = (columns_NxM == 0) | (columns_NxM == plus_N[:, None] + 1)
        long_number_NxM = np.where(columns_NxM < plus_N[:, None], plus_N[:, None] > 1, length - 1 - plus_N[:, None] > 1)
        inputs_NxM = np.where(starts_number_NxM & long_number_NxM, 1, inputs_NxM)
        inputs_NxM[np.arange(n), plus_N] = PLUS
        # Right-align both numbers in `length` columns and add with a ripple carry, LSB first.
        shift_x_N = length - plus_N
        x_NxW = np.where(
            columns_NxM >= shift_x_N[:, None],
            np.take_along_axis(inputs_NxM, np.clip(columns_NxM - shift_x_N[:, None], 0, length - 1), 1),
            0,
        )
        y_NxW = np.where(columns_NxM > plus_N[:, None], inputs_NxM, 0)
        sum_NxW1 = np.zeros((n, length + 1), dtype=np.int64)
        carry_N = np.zeros(n, dtype=np.int64)
        for column in range(length - 1, -1, -1):
            total_N = x_NxW[:, column] + y_NxW[:, column] + carry_N
            sum_NxW1[:, column + 1] = total_N & 1
            carry_N = total_N >> 1
        sum_NxW1[:, 0] = carry_N
        # Drop leading zeros, keeping at least one digit.
        leading_N = np.where(sum_NxW1.any(axis=1), sum_NxW1.argmax(axis=1), length)
        answer_lengths_N = length + 1 - leading_N
        gather_NxW1 = np.clip(np.arange(length + 1)[None, :] + leading_N[:, None], 0, length)
        return Draw(inputs_NxM, np.take_along_axis(sum_NxW1, gather_NxW1, 1), answer_lengths_N)

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        if inputs.count(PLUS) != 1 or inputs[0] == PLUS or inputs[-1] == PLUS:
            raise InvalidInputError(f"task {self.code}: the input must be two non-empty bit strings joined by one '+'")
        plus = inputs.index(PLUS)
        x, y = inputs[:plus][::-1], inputs[plus + 1 :][::-1]  # least significant bit first
        digits, carry = [], 0
        for column in range(max(len(x), len(y))):
            total = (x[column] if column < len(x) else 0) + (y[column] if column < len(y) else 0) + carry
            digits.append(total % 2)
            carry = total // 2
        digits.append(carry)
        while len(digits) > 1 and digits[-1] == 0:
            digits.pop()
        return digits[::-1]


@dataclass(frozen=True)
class BinaryMajorityInterleave(BinaryTask):
    code = "BinaryMajorityInterleave"
    description = (
        "three bit strings interleaved (string k holds bits k, k+3, k+6, ...); answer the majority bit of each"
    )
    literature = literature.BINARY_MAJORITY_INTERLEAVE

    def length_problem(self, length: int) -> str | None:
        if length < 3:
            return "each of the 3 interleaved strings needs at least one bit, so length >= 3"
        return super().length_problem(length)

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        bits_NxM = np.empty((n, length), dtype=np.int64)
        majorities_Nx3 = np.empty((n, 3), dtype=np.int64)
        for k in range(3):
            string_length = len(range(k, length, 3))
            bits_NxM[:, k::3] = untied_bits(rng, n, string_length)
            majorities_Nx3[:, k] = 2 * bits_NxM[:, k::3].sum(axis=1) > string_length
        return Draw(bits_NxM, majorities_Nx3, np.full(n, 3, dtype=np.int64))

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        if len(inputs) < 3:
            raise InvalidInputError(f"task {self.code}: the input needs at least 3 bits, got {len(inputs)}")
        return [majority_bit(self.code, inputs[k::3]) for k in range(3)]
