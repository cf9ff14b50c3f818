"""Retrieval (Veitsman et al. 2025): a query q follows the context; the answer is q's neighbour.

`<bos> c_1 .. c_m <sep> q answer <eos>`, length = m. The answer position always lies inside the
context: the occurrence is never the first context token for "left" variants nor the last for
"right" variants, and nothing wraps around (one official implementation lets position 0's left
neighbour wrap to the end of the context; that is a bug, not a definition).

Unique variants (UL, UR) place q exactly once among tokens different from q (other tokens may
repeat). Non-unique variants (NLFirst, NRFirst, NLLast, NRLast) take the occurrence of q with the
given rank, and draw contexts in one of two ways:
- occurrences="iid" (the paper's from-scratch data): the context is i.i.d. uniform; q is the
  token at a uniformly chosen context position (so frequent tokens are likelier queries, as in the
  official code); a draw is rejected unless q occurs at least twice and the answer position lies
  inside the context (and, with non_adjacent=True, no two occurrences of q are adjacent).
- occurrences=(lo, hi) (the pretrained-model sets use (2, None) with non_adjacent=True): q is
  uniform, its number of occurrences k is uniform in lo..hi, where hi=None means
  max(lo, length // 5); the k positions are a uniform k-subset of the positions that keep the
  answer inside the context (non-adjacent ones if non_adjacent=True); all other tokens are
  uniform among the symbols other than q.
- occurrences="official": "iid" as the official code draws it (lacoco-lab/always_a_transformer,
  fromscratch/create_datasets.py): it also rejects NLLast strings whose last occurrence is the
  final context slot (28% of "iid" NLLast strings at lengths 2-50), although the left neighbour
  lies inside the context; for the other three tasks it is "iid". (Its NLFirst wrap-around is
  a bug and is not reproduced.) The official code draws the length anew with every rejected
  string, so over a range of lengths a length comes up in proportion to the probability that a
  string of it is kept (`length_weights`, `official_acceptance`), and a range lo-hi holds the
  lengths max(4, lo) to hi - 1 (`official_lengths`). docs/official-sampler.md lists what else
  differs from the official code.
- occurrences="spread" (a sampler that can show the impossibility for the "last" tasks; the
  mirror image for the "first" ones, as their control): q is uniform, k is uniform in
  2..length // 2, then the distance D of the retrieved occurrence from its end of the context
  (from the end for "last", from the start for "first"; 0 is the end slot itself) is uniform
  among the distances that leave room for the other k - 1 occurrences and keep the answer
  inside the context; the other occurrences are a uniform subset of the positions beyond it
  (before the last, after the first); all other tokens are uniform among the symbols other
  than q. Every (D, k) with k <= length // 2 and D + k <= length is drawn, so at 3x-4x the
  training length the test holds strings whose D and k both exceed the training length,
  where every bounded program that is exact on the training lengths must fail
  (crasp.discrimination). `occurrence_cells` recovers (D, k) from any batch.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from crasp.tasks import literature
from crasp.tasks.base import AlphabetTask, Draw, Examples, InvalidInputError, ParameterError, sample_by_rejection


@dataclass(frozen=True)
class Retrieval(AlphabetTask):
    side: ClassVar[str]  # "left" or "right": which neighbour of the occurrence is the answer
    has_query: ClassVar[bool] = True

    @property
    def _step(self) -> int:
        return -1 if self.side == "left" else 1

    def _neighbour(self, context: list[int], position: int) -> int:
        neighbour = position + self._step
        if not 0 <= neighbour < len(context):
            raise InvalidInputError(
                f"task {self.code}: the {self.side} neighbour of the query occurrence at context "
                f"position {position} lies outside the context of length {len(context)}"
            )
        return context[neighbour]

    def _occurrences(self, context: list[int], query: int) -> list[int]:
        return [position for position, symbol in enumerate(context) if symbol == query]

    def _draw_others(self, rng: np.random.Generator, queries_N: np.ndarray, m: int) -> np.ndarray:
        """Uniform symbols different from each row's query: draw from A-1 symbols, skip over q."""
        others_NxM = rng.integers(self.alphabet_size - 1, size=(len(queries_N), m))
        return others_NxM + (others_NxM >= queries_N[:, None])

    def _answer_draw(self, contexts_NxM: np.ndarray, queries_N: np.ndarray, positions_N: np.ndarray) -> Draw:
        answers_N = contexts_NxM[np.arange(len(queries_N)), positions_N + self._step]
        return Draw(contexts_NxM, answers_N[:, None], np.ones(len(queries_N), dtype=np.int64), queries_N)


@dataclass(frozen=True)
class UniqueRetrieval(Retrieval):
    alphabet_size: int = 150

    def length_problem(self, length: int) -> str | None:
        if length < 2:
            return "the query needs a neighbour inside the context, so the context has at least 2 tokens"
        return super().length_problem(length)

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        queries_N = rng.integers(self.alphabet_size, size=n)
        contexts_NxM = self._draw_others(rng, queries_N, length)
        positions_N = rng.integers(length - 1, size=n) + (1 if self.side == "left" else 0)
        contexts_NxM[np.arange(n), positions_N] = queries_N
        return self._answer_draw(contexts_NxM, queries_N, positions_N)

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        occurrences = self._occurrences(inputs, query)
        if len(occurrences) != 1:
            raise InvalidInputError(
                f"task {self.code}: the query must occur exactly once in the context, "
                f"it occurs {len(occurrences)} times"
            )
        return [self._neighbour(inputs, occurrences[0])]


class UniqueRetrieveLeft(UniqueRetrieval):
    code = "UL"
    side = "left"
    description = "the query occurs once in the context; answer the token left of it"
    literature = literature.local_retrieval("left", "unique")


class UniqueRetrieveRight(UniqueRetrieval):
    code = "UR"
    side = "right"
    description = "the query occurs once in the context; answer the token right of it"
    literature = literature.local_retrieval("right", "unique")


@dataclass(frozen=True)
class NonUniqueRetrieval(Retrieval):
    alphabet_size: int = 5
    occurrences: str | tuple = "iid"
    non_adjacent: bool = False
    rank: ClassVar[str]  # "first" or "last": which occurrence of the query is retrieved

    def _check_parameters(self) -> None:
        super()._check_parameters()
        if self.occurrences == "spread" and self.non_adjacent:
            raise ParameterError(
                f"task {self.code}: occurrences='spread' places occurrences at any distance, "
                "adjacent ones included; accepted with it: non_adjacent=False"
            )
        if self.occurrences not in SAMPLERS:
            if not _is_occurrence_range(self.occurrences):
                raise ParameterError(
                    f"task {self.code}: parameter occurrences={self.occurrences!r} is invalid; "
                    'accepted: "iid", "official", "spread", or a pair (lo, hi) of integers with '
                    "2 <= lo <= hi, or hi=None for max(lo, length // 5)"
                )
            object.__setattr__(self, "occurrences", tuple(self.occurrences))
        if not isinstance(self.non_adjacent, bool):
            raise ParameterError(
                f"task {self.code}: parameter non_adjacent={self.non_adjacent!r} is invalid; accepted: True or False"
            )

    # The occurrence must not be the first token for "left of first" nor the last for "right of
    # last"; as all other occurrences lie beyond it, that excludes one end of the context for all.
    # The official code also keeps NLLast's last occurrence off the final slot.
    @property
    def _excludes_an_end(self) -> bool:
        return (self.side, self.rank) in {("left", "first"), ("right", "last")} or (
            self.occurrences == "official" and self.rank == "last"
        )

    def _slots(self, length: int) -> int:
        return length - 1 if self._excludes_an_end else length

    def _first_slot(self) -> int:
        return 1 if (self.side, self.rank) == ("left", "first") else 0

    def _most_occurrences(self, length: int) -> int:
        if self.occurrences in ("iid", "official"):
            return 2
        if self.occurrences == "spread":
            return max(2, length // 2)
        lo, hi = self.occurrences
        return max(lo, length // 5) if hi is None else hi

    def _fits(self, k: int, slots: int) -> bool:
        return (2 * k - 1 if self.non_adjacent else k) <= slots

    def length_problem(self, length: int) -> str | None:
        problem = super().length_problem(length)
        if problem is not None:
            return problem
        if self.occurrences == "spread" and length < 4:
            return (
                "occurrences='spread' draws 2 to length // 2 occurrences of the query, so the context has at "
                "least 4 tokens"
            )
        k = self._most_occurrences(length)
        slots = self._slots(length)
        if not self._fits(k, slots):
            spacing = "non-adjacent, " if self.non_adjacent else ""
            return (
                f"{k} occurrences of the query ({spacing}occurrences={self.occurrences!r}) do not fit in the "
                f"{slots} context positions that keep the {self.side} neighbour of the {self.rank} occurrence "
                f"inside a context of {length} tokens"
            )
        return None

    def _draw(self, rng: np.random.Generator, n: int, length: int) -> Draw:
        if self.occurrences in ("iid", "official"):
            contexts_NxM, queries_N = self._draw_iid(rng, n, length)
        elif self.occurrences == "spread":
            contexts_NxM, queries_N = self._draw_spread(rng, n, length)
        else:
            contexts_NxM, queries_N = self._draw_counted(rng, n, length)
        is_query_NxM = contexts_NxM == queries_N[:, None]
        if self.rank == "first":
            positions_N = is_query_NxM.argmax(axis=1)
        else:
            positions_N = length - 1 - is_query_NxM[:, ::-1].argmax(axis=1)
        return self._answer_draw(contexts_NxM, queries_N, positions_N)

    def _draw_iid(self, rng: np.random.Generator, n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        def draw(count):
            contexts_NxM = rng.integers(self.alphabet_size, size=(count, length))
            return contexts_NxM, contexts_NxM[np.arange(count), rng.integers(length, size=count)]

        def accept(contexts_NxM, queries_N):
            is_query_NxM = contexts_NxM == queries_N[:, None]
            ok_N = is_query_NxM.sum(axis=1) >= 2
            if self._excludes_an_end:
                ok_N &= ~is_query_NxM[:, 0 if self.rank == "first" else -1]
            if self.non_adjacent:
                ok_N &= ~(is_query_NxM[:, 1:] & is_query_NxM[:, :-1]).any(axis=1)
            return ok_N

        return sample_by_rejection(n, length, draw, accept)

    def _draw_counted(self, rng: np.random.Generator, n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        lo = self.occurrences[0]
        counts_N = rng.integers(lo, self._most_occurrences(length) + 1, size=n)
        slots = self._slots(length)
        # Non-adjacent k-subsets of `slots` positions correspond one-to-one to k-subsets of
        # slots-k+1 positions (subtract t from the t-th chosen position), so a uniform k-subset of
        # the smaller range, spread back out, is a uniform non-adjacent placement.
        choices_N = slots - counts_N + 1 if self.non_adjacent else np.full(n, slots)
        chosen_NxS = _uniform_subsets(rng, counts_N, choices_N, slots)
        rows, chosen_slots = np.nonzero(chosen_NxS)
        positions = chosen_slots + self._first_slot()
        if self.non_adjacent:
            positions = positions + (np.cumsum(chosen_NxS, axis=1)[rows, chosen_slots] - 1)
        queries_N = rng.integers(self.alphabet_size, size=n)
        contexts_NxM = self._draw_others(rng, queries_N, length)
        contexts_NxM[rows, positions] = queries_N[rows]
        return contexts_NxM, queries_N

    def _draw_spread(self, rng: np.random.Generator, n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        counts_N = rng.integers(2, length // 2 + 1, size=n)
        # Drawn as for "last" (the retrieved occurrence D slots before the end, the others before
        # it), then mirrored for "first". D = 0 is excluded where the answer would leave the context.
        distances_N = rng.integers(int(self._excludes_an_end), length - counts_N + 1)
        retrieved_N = length - 1 - distances_N
        chosen_NxM = _uniform_subsets(rng, counts_N - 1, retrieved_N, length)
        chosen_NxM[np.arange(n), retrieved_N] = True
        if self.rank == "first":
            chosen_NxM = chosen_NxM[:, ::-1]
        queries_N = rng.integers(self.alphabet_size, size=n)
        contexts_NxM = self._draw_others(rng, queries_N, length)
        contexts_NxM[chosen_NxM] = np.repeat(queries_N, counts_N)
        return contexts_NxM, queries_N

    def length_weights(self, lengths: np.ndarray) -> np.ndarray:
        """The official sampler's lengths come up as often as the official code keeps a string of
        them (`official_acceptance`); the other samplers draw strings at the length asked for."""
        if self.occurrences != "official":
            return super().length_weights(lengths)
        return official_acceptance(np.asarray(lengths), self.alphabet_size, self.rank)

    def occurrence_cells(self, examples: Examples) -> tuple[np.ndarray, np.ndarray]:
        """(D_N, k_N) of a batch of this task, whatever its sampler: D the distance of the
        retrieved occurrence from its end of the context (slots after the last occurrence, or
        before the first; 0 is the end slot itself), k the number of occurrences of the query."""
        width = int(examples.input_lengths.max(initial=0))
        rows = np.arange(len(examples))
        contexts_NxM = examples.tokens[:, 1 : 1 + width]
        in_context_NxM = np.arange(width)[None, :] < examples.input_lengths[:, None]
        is_query_NxM = (contexts_NxM == examples.tokens[rows, examples.prompt_lengths - 1][:, None]) & in_context_NxM
        counts_N = is_query_NxM.sum(axis=1)
        if self.rank == "first":
            distances_N = is_query_NxM.argmax(axis=1)
        else:
            positions_NxM = np.where(is_query_NxM, np.arange(width)[None, :], -1)
            distances_N = examples.input_lengths - 1 - positions_NxM.max(axis=1)
        return distances_N, counts_N

    def _reference(self, inputs: list[int], query: int | None = None) -> list[int]:
        occurrences = self._occurrences(inputs, query)
        if len(occurrences) < 2:
            raise InvalidInputError(
                f"task {self.code}: the query must occur at least twice in the context, "
                f"it occurs {len(occurrences)} times"
            )
        return [self._neighbour(inputs, occurrences[0] if self.rank == "first" else occurrences[-1])]


# The named samplers of the non-unique tasks; a pair (lo, hi) is the fourth kind.
SAMPLERS = ("iid", "official", "spread")


# The official code draws a length from a range lo-hi as randint(max(4, lo), hi - 1): its training
# range 1-50 holds the lengths 4-49, its test bins 51-100 and 101-150 hold 51-99 and 101-149.
OFFICIAL_SHORTEST = 4


def official_lengths(lo: int, hi: int) -> tuple[int, int]:
    """The lengths (both ends included) the official code draws for its length range lo-hi."""
    return max(OFFICIAL_SHORTEST, lo), hi - 1


def official_acceptance(lengths_N: np.ndarray, alphabet_size: int, rank: str) -> np.ndarray:
    """The probability that the official code keeps a non-unique retrieval string it drew at each
    length m. Its context is i.i.d. uniform over A symbols and its query the token at a uniform
    position j, so each other slot holds the query with probability 1/A, independently of the
    rest. It rejects a query that occurs once, and for "last" also one whose last occurrence is
    the final slot:
        first: 1 - (1 - 1/A)^(m - 1)                          another of the m - 1 slots holds q
        last:  (m - 1)/m (1 - 1/A) (1 - (1 - 1/A)^(m - 2))    j is not the final slot, the final slot
                                                              is not q, one of the m - 2 others is
    Its NLFirst keeps a first occurrence at position 0 (its answer wraps around to the end, a bug
    this library does not reproduce), so both "first" tasks get the first line."""
    m_N = np.asarray(lengths_N, dtype=np.float64)
    miss = 1.0 - 1.0 / alphabet_size
    if rank == "first":
        return 1.0 - miss ** (m_N - 1)
    return (m_N - 1) / m_N * miss * (1.0 - miss ** np.maximum(m_N - 2, 0))


def _uniform_subsets(rng: np.random.Generator, counts_N: np.ndarray, available_N: np.ndarray, width: int) -> np.ndarray:
    """[n, width] bools: in each row a uniform subset of counts_N[r] of its first available_N[r] columns."""
    keys_NxW = rng.random((len(counts_N), width))
    keys_NxW[np.arange(width)[None, :] >= available_N[:, None]] = np.inf
    ranks_NxW = keys_NxW.argsort(axis=1).argsort(axis=1)
    return ranks_NxW < counts_N[:, None]


def _is_occurrence_range(value) -> bool:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        return False
    lo, hi = value
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    return is_int(lo) and lo >= 2 and (hi is None or (is_int(hi) and hi >= lo))


class RetrieveLeftOfFirst(NonUniqueRetrieval):
    code = "NLFirst"
    side, rank = "left", "first"
    description = "the query occurs at least twice; answer the token left of its first occurrence"
    literature = literature.local_retrieval("left", "first")


class RetrieveRightOfFirst(NonUniqueRetrieval):
    code = "NRFirst"
    side, rank = "right", "first"
    description = "the query occurs at least twice; answer the token right of its first occurrence"
    literature = literature.local_retrieval("right", "first")


class RetrieveLeftOfLast(NonUniqueRetrieval):
    code = "NLLast"
    control = "NLFirst"
    side, rank = "left", "last"
    description = "the query occurs at least twice; answer the token left of its last occurrence"
    literature = literature.last_occurrence_retrieval()


class RetrieveRightOfLast(NonUniqueRetrieval):
    code = "NRLast"
    control = "NRFirst"
    side, rank = "right", "last"
    description = "the query occurs at least twice; answer the token right of its last occurrence"
    literature = literature.last_occurrence_retrieval()
