"""What an enumerated Boolean predicts: output candidates, leaves and guards of decision lists.

The task's targets are the next tokens at the sample's "needed" positions (the answer positions,
teacher-forced). A Boolean over s is an output candidate O[s]: it is right at a needed position
when it is true for the target symbol and false for every other. Each Boolean E is also tried in
a few fixed contexts, the shapes outputs and conditions of witness programs take, which reach
programs larger than the enumerated size at the cost of a few numpy operations:

    s-family     E                                        (+0)
                 #[j <= i] E >= 1                         (+3: s held somewhere so far)
    (s,t)-family any t: Q(t) and E                        (+3: t is the current symbol)
                 any t: Q(t) and #[j <= i] E >= 1         (+6)
    closed       E                                        (+0, as a guard)
    t-family     any t: Q(t) and E,  any t: Q(t) and #[j <= i] E >= 1   (+3, +6, as guards)

An output that is right at every needed position is a hit. One that is right at some of them is
a leaf; a closed Boolean is a guard. `unify` builds a decision list `g1 ? L1 : g2 ? L2 : L3`
(written with and/or/not) from them when no single expression is right everywhere (the
divide-and-conquer of enumerative program synthesis).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.search.grammar import CLOSED, S, ST, T
from crasp.search.sample import Sample

# context name -> (size it adds, category of the Boolean it applies to, whether it makes an output)
CONTEXTS = {
    "itself": (0, S, True),
    "held": (3, S, True),
    "current": (3, ST, True),
    "current held": (6, ST, True),
    "guard": (0, CLOSED, False),
    "current guard": (3, T, False),
    "current held guard": (6, T, False),
}
LEAF_LIMIT = 400
GUARD_LIMIT = 20000


@dataclass(frozen=True)
class Found:
    """An expression in a context: the context, the expression's kind and arguments (children are
    behaviours of the enumerator's table), and the size in context."""

    context: str
    kind: int
    args: tuple[int, int, int]
    size: int  # the expression's own size
    category: int

    @property
    def total_size(self) -> int:
        return self.size + CONTEXTS[self.context][0]


@dataclass(frozen=True)
class FoundBatch:
    """A batch of expressions of one kind of candidate in one context; Found records are made
    only for the few that are kept."""

    context: str
    kinds: np.ndarray
    args: np.ndarray
    size: int
    category: int

    @property
    def total_size(self) -> int:
        return self.size + CONTEXTS[self.context][0]

    def at(self, k: int) -> Found:
        return Found(self.context, int(self.kinds[k]), tuple(int(a) for a in self.args[k]), self.size, self.category)


class Targets:
    """The needed positions of a sample, and the values there of bit-packed Booleans in context.

    Values arrive packed along the positions (crasp.search.enumerate.Store): the value at a
    needed position p is one bit, and "E held at some j <= p of the string" is an OR over the
    few bytes that hold the string up to p, each masked to those positions."""

    def __init__(self, sample: Sample):
        self.sample = sample
        needed = sample.needed
        self.current = sample.tokens[needed]  # the symbol at each needed position: t's value there
        V = len(sample.alphabet)
        self.expected = np.arange(V)[:, None] == sample.targets[None, :]  # (V, needed)
        self.byte, self.bit = needed // 8, (np.uint8(128) >> (needed % 8).astype(np.uint8))
        first = sample.string_start[needed]
        span = int((needed // 8 - first // 8).max(initial=0)) + 1
        self.window = np.minimum(first[:, None] // 8 + np.arange(span), needed[:, None] // 8)  # (needed, span)
        positions = self.window[:, :, None] * 8 + np.arange(8)  # the positions each byte holds
        inside = (positions >= first[:, None, None]) & (positions <= needed[:, None, None])
        self.window_mask = np.packbits(inside, axis=-1)[..., 0]  # (needed, span)

    def _at(self, packed: np.ndarray) -> np.ndarray:
        """(batch, rows, needed) -> the bits of the needed positions; packed is (batch, rows, needed, ...)"""
        return (packed & self.bit) != 0

    def _held(self, window_bytes: np.ndarray) -> np.ndarray:
        return (window_bytes & self.window_mask).any(axis=-1)

    def in_contexts(self, variables: int, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Values at the needed positions, per context: (batch, V, needed) for outputs, (batch, needed)
        for guards. `packed` has shape (batch, s axis, t axis, bytes of positions)."""
        if variables in (S, CLOSED):
            itself = self._at(packed[:, :, 0, self.byte])
            if variables == CLOSED:
                return {"guard": itself[:, 0]}
            return {"itself": itself, "held": self._held(packed[:, :, 0, self.window])}
        current = self._at(packed[:, :, self.current, self.byte])
        held = self._held(packed[:, :, self.current[:, None], self.window])
        if variables == ST:
            return {"current": current, "current held": held}
        return {"current guard": current[:, 0], "current held guard": held[:, 0]}

    def right(self, outputs: np.ndarray) -> np.ndarray:
        """(batch, needed): the output family names exactly the target there."""
        return (outputs == self.expected[None]).all(axis=1)


class LeafSet:
    """Leaves that no other kept leaf covers with a superset of points at a size no larger (at
    most LEAF_LIMIT), and which points any output candidate at all got right."""

    def __init__(self, points: int):
        self.coverage = np.zeros((0, points), bool)
        self.sizes = np.zeros(0, np.int64)
        self.found: list[Found] = []
        self.changed = False
        self.ever_right = np.zeros(points, bool)  # over every candidate, kept as a leaf or not

    def _dominated(self, coverage: np.ndarray, size: int) -> np.ndarray:
        """Rows of coverage that a kept leaf of size <= size covers entirely."""
        if not len(self.sizes):
            return np.zeros(len(coverage), bool)
        outside = coverage.astype(np.float32) @ (~self.coverage).astype(np.float32).T  # points a kept leaf misses
        return ((outside == 0) & (self.sizes <= size)).any(axis=1)

    def add(self, coverage: np.ndarray, batch: FoundBatch) -> None:
        self.ever_right |= coverage.any(axis=0)
        size = batch.total_size
        candidates = np.flatnonzero(coverage.any(axis=1))
        candidates = candidates[~self._dominated(coverage[candidates], size)]
        if not len(candidates):
            return
        _, first = np.unique(np.packbits(coverage[candidates], axis=1), axis=0, return_index=True)
        for k in candidates[np.sort(first)]:
            if not self._dominated(coverage[k][None], size)[0]:
                self._keep(coverage[k], size, batch.at(k))

    def _keep(self, coverage: np.ndarray, size: int, found: Found) -> None:
        if len(self.sizes):
            keep = ~(~(self.coverage & ~coverage).any(axis=1) & (self.sizes >= size))  # drop what it dominates
            self._select(keep)
        self.coverage = np.concatenate([self.coverage, coverage[None]])
        self.sizes = np.append(self.sizes, size)
        self.found.append(found)
        if len(self.found) > LEAF_LIMIT:  # drop the leaf covering the fewest points (the largest of those)
            drop = np.lexsort((-self.sizes, self.coverage.sum(axis=1)))[0]
            self._select(np.arange(len(self.found)) != drop)
        self.changed = True

    def _select(self, keep: np.ndarray) -> None:
        self.coverage, self.sizes = self.coverage[keep], self.sizes[keep]
        self.found = [f for f, k in zip(self.found, keep) if k]

    @property
    def covered(self) -> np.ndarray:
        return self.coverage.any(axis=0)


class GuardSet:
    """Closed Booleans, one per distinct value at the needed positions (the smallest)."""

    def __init__(self, points: int):
        self.values: list[np.ndarray] = []
        self.sizes: list[int] = []
        self.found: list[Found] = []
        self._index: dict[bytes, int] = {}

    def add(self, values: np.ndarray, batch: FoundBatch) -> None:
        splitting = np.flatnonzero(values.any(axis=1) & ~values.all(axis=1))
        if not len(splitting):
            return
        keys, first = np.unique(np.packbits(values[splitting], axis=1), axis=0, return_index=True)
        for key, k in zip(keys, splitting[first]):
            key = key.tobytes()
            if key not in self._index and len(self.found) < GUARD_LIMIT:
                self._index[key] = len(self.found)
                self.values.append(values[k])
                self.sizes.append(batch.total_size)
                self.found.append(batch.at(k))
            elif key in self._index and batch.total_size < self.sizes[self._index[key]]:
                known = self._index[key]
                self.sizes[known], self.found[known] = batch.total_size, batch.at(k)


@dataclass(frozen=True)
class Decision:
    """`guard ? if_true : if_false` over leaves (a Found) and further decisions."""

    guard: Found
    if_true: "Decision | Found"
    if_false: "Decision | Found"


def unify(leaves: LeafSet, guards: GuardSet, depth: int = 2, beam: int = 3) -> Decision | Found | None:
    """A decision list right at every needed position, found greedily (each guard chosen so that
    each side is covered as far as possible by a single leaf), or None."""
    if not len(leaves.found) or not leaves.covered.all():
        return None
    guard_matrix = (
        np.array(guards.values, np.float32) if guards.values else np.zeros((0, leaves.coverage.shape[1]), np.float32)
    )
    return _unify(np.ones(leaves.coverage.shape[1], bool), leaves, guards, guard_matrix, depth, beam)


def _unify(
    points: np.ndarray, leaves: LeafSet, guards: GuardSet, guard_matrix: np.ndarray, depth: int, beam: int
) -> Decision | Found | None:
    whole = np.flatnonzero(~(points & ~leaves.coverage).any(axis=1))
    if len(whole):
        return leaves.found[whole[np.argmin(leaves.sizes[whole])]]
    if depth == 0 or not len(guard_matrix):
        return None
    inside = guard_matrix * points
    outside = (1 - guard_matrix) * points
    coverage = (leaves.coverage & points).astype(np.float32).T
    missed = (inside.sum(1) - (inside @ coverage).max(1)) + (outside.sum(1) - (outside @ coverage).max(1))
    splits = (inside.sum(1) > 0) & (outside.sum(1) > 0)
    order = np.lexsort((np.array(guards.sizes), missed))
    for g in [g for g in order if splits[g]][:beam]:
        chosen = guard_matrix[g].astype(bool)
        if_true = _unify(points & chosen, leaves, guards, guard_matrix, depth - 1, beam)
        if_false = _unify(points & ~chosen, leaves, guards, guard_matrix, depth - 1, beam) if if_true else None
        if if_true and if_false:
            return Decision(guards.found[g], if_true, if_false)
    return None
