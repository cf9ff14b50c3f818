"""Bottom-up enumeration of expressions by increasing size, with observational equivalence.

Every expression is evaluated once, on the whole sample at once: its value is an array over the
sample's positions (and over the alphabet for each of s and t it depends on). Expressions are
kept per category (type and variables), one per distinct value, the first found (so a smallest
one); larger expressions are built only from kept ones. Two expressions equal on the sample give
equal values in every context on the sample, because a count at a position only reads earlier
positions of the same string, so nothing that distinguishes them is lost for the sample.

Cuts, each exact on the sample:
- an expression whose value does not depend on one of its variables is dropped: substituting
  "<bos>" for that variable (Q(t) -> Q("<bos>"), t = c -> true or false, "<eos>" < t -> false,
  s = t -> s = "<bos>") gives an expression of the same size, with the same values, in a category
  without the variable, which the enumeration reaches anyway;
- `not` is not applied to a negation or a comparison (the comparison with the opposite operator
  is smaller);
- an expression is built only if it can still become part of an output O[s] within the size
  limit (`extra_size`: the least size any context adds to its category).

Values are combined a tile of operand rows at a time with numpy broadcasting, and kept in
crasp.search.store. Up to size
max - 2, values are kept and deduplicated exactly (a 64-bit fingerprint, confirmed by comparing
the arrays). The two last sizes are not kept: only unary productions can use a size max - 1
expression within the limit, so they are applied at once; those two sizes are deduplicated by a
128-bit fingerprint (two different values share one with probability about 2**-128 per pair).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from crasp.search.grammar import ARITHMETIC, BOOL, CLOSED, COMPARISONS, COUNT, S, ST, T, Grammar
from crasp.search.sample import Sample
from crasp.search.store import CATEGORIES, Category, Store, Table, fingerprints

ATOM, NOT, AND, OR, COMPARE, ANY, ALL, COUNT_OF, ARITH, CONDITIONAL = range(10)
TILE_BYTES = 4 << 20  # values computed per numpy operation


class BudgetExhausted(Exception):
    """The enumeration stopped at a limit; the message names it."""


@dataclass
class Budget:
    deadline: float = float("inf")  # a time.process_time() value: CPU seconds of this process
    max_behaviours: int = 10**8
    memory_bytes: int = 4 << 30


# ------------------------------------------------------------------ sizes of contexts


def _operand_rules():
    """(result category, operand categories) of every production, operand by operand."""
    for variables in (CLOSED, S, T, ST):
        yield Category(BOOL, variables), [Category(BOOL, variables)]  # not
        yield Category(COUNT, variables), [Category(BOOL, variables)]  # count
        if variables & T:
            yield Category(BOOL, variables & ~T), [Category(BOOL, variables)]  # any / all
    for left, right in itertools.product((CLOSED, S, T, ST), repeat=2):
        union = left | right
        yield Category(BOOL, union), [Category(BOOL, left), Category(BOOL, right)]
        yield Category(BOOL, union), [Category(COUNT, left), Category(COUNT, right)]
        yield Category(COUNT, union), [Category(COUNT, left), Category(COUNT, right)]
        for third in (CLOSED, S, T, ST):
            yield Category(COUNT, union | third), [Category(BOOL, left), Category(COUNT, right), Category(COUNT, third)]


def smallest_sizes(grammar: Grammar) -> dict[Category, int]:
    """The size of the smallest expression of each category (atoms, or one count over an atom)."""
    sizes = {c: 10**6 for c in CATEGORIES}
    for atom in grammar.atoms():
        category = Category(atom.type, atom.variables)
        sizes[category] = 1
    for variables in (CLOSED, S, T, ST):
        sizes[Category(COUNT, variables)] = min(sizes[Category(COUNT, variables)], sizes[Category(BOOL, variables)] + 1)
    return sizes


def extra_size(grammar: Grammar) -> dict[Category, int]:
    """The least size that contexts add to an expression of each category on the way to a
    Boolean over s (an output candidate): a shortest-path fixpoint over the productions."""
    smallest = smallest_sizes(grammar)
    extra = {c: 10**6 for c in CATEGORIES}
    extra[Category(BOOL, S)] = 0
    rules = list(_operand_rules())
    changed = True
    while changed:
        changed = False
        for result, operands in rules:
            for k, operand in enumerate(operands):
                others = sum(smallest[o] for j, o in enumerate(operands) if j != k)
                cost = 1 + others + extra[result]
                if cost < extra[operand]:
                    extra[operand] = cost
                    changed = True
    return extra


# ------------------------------------------------------------------ the enumerator


@dataclass
class LevelStats:
    size: int
    evaluated: int = 0  # candidate expressions computed
    kept: dict[str, int] = field(default_factory=dict)  # distinct new values per category
    seconds: float = 0.0
    complete: bool = False
    planned: int = 0  # candidates the level computes when complete

    @property
    def behaviours(self) -> int:
        return sum(self.kept.values())


@dataclass(frozen=True)
class Plan:
    """One production at one size over operands of given sizes: `candidates` expressions, computed by run()."""

    candidates: int
    run: Callable[[], None]


Inspector = Callable[[Category, int, np.ndarray, np.ndarray, np.ndarray], None]
SEEN_ENTRY_BYTES = 100  # a 128-bit Python int in a set


def count_dtype(sample: Sample, grammar: Grammar, max_size: int):
    """int8 when no count of size <= max_size can leave its range on this sample, else int16.

    A count of size k has |value| <= (k + 1) * max(L / 3, c / 2) with L the longest string and c
    the largest constant: #P (size >= 2) is at most L, a constant (size 1) at most c, and a sum or
    difference adds the bounds of operands whose sizes add up to k - 1."""
    longest = int(np.max(np.bincount(sample.string_start))) if sample.positions else 0
    bound = (max_size + 1) * max(longest / 3, max(abs(c) for c in grammar.constants) / 2)
    return np.int8 if bound <= np.iinfo(np.int8).max else np.int16


class Enumerator:
    """Builds, size after size, one expression per distinct value on the sample.

    `inspect(category, size, kinds, args, packed_values)` sees every new Boolean as soon as it
    is found (kinds and args describe each one; children are behaviours of the table)."""

    def __init__(
        self,
        grammar: Grammar,
        sample: Sample,
        max_size: int,
        budget: Budget,
        inspect: Inspector | None = None,
        progress: Callable[[int], None] | None = None,
    ):
        self.grammar, self.sample, self.max_size, self.budget = grammar, sample, max_size, budget
        self.inspect = inspect or (lambda *args: None)
        self.progress = progress or (lambda candidates: None)
        self.positions = sample.positions
        self.alphabet_size = len(sample.alphabet)
        self.packed_positions = -(-self.positions // 8)
        self.valid_bits = np.packbits(np.ones(self.positions, bool)).reshape(1, 1, -1)
        dtype = count_dtype(sample, grammar, max_size)
        self.stores = {c: Store(c, self._row_shape(c), np.uint8 if c.type == BOOL else dtype) for c in CATEGORIES}
        self.table = Table()
        self.atoms = grammar.atoms()
        self.extra = extra_size(grammar)
        self.levels: dict[int, LevelStats] = {}
        self._seen: dict[int, set[int]] = {}  # size -> 128-bit fingerprints met, for sizes not kept

    def _row_shape(self, category: Category) -> tuple[int, int, int]:
        V = self.alphabet_size
        last = self.packed_positions if category.type == BOOL else self.positions
        return V if category.variables & S else 1, V if category.variables & T else 1, last

    def kept(self, size: int) -> bool:
        """Whether expressions of this size are kept (operands of larger ones) or only inspected."""
        return size <= self.max_size - 2

    # -- budget
    @property
    def memory_bytes(self) -> int:
        seen = sum(len(keys) for keys in self._seen.values())
        return sum(s.kept_bytes for s in self.stores.values()) + SEEN_ENTRY_BYTES * seen

    def _check_budget(self) -> None:
        if time.process_time() > self.budget.deadline:
            raise BudgetExhausted("time limit")
        if len(self.table) > self.budget.max_behaviours:
            raise BudgetExhausted(f"behaviour limit ({self.budget.max_behaviours:,})")
        if self.memory_bytes > self.budget.memory_bytes:
            raise BudgetExhausted(f"memory limit ({self.budget.memory_bytes / 2**30:.1f} GiB of kept values)")

    def useful(self, category: Category, size: int) -> bool:
        return size + self.extra[category] <= self.max_size

    # -- packing
    def unpack(self, packed: np.ndarray) -> np.ndarray:
        return np.unpackbits(packed, axis=-1, count=self.positions).view(bool)

    @staticmethod
    def pack(values: np.ndarray) -> np.ndarray:
        return np.packbits(values, axis=-1)

    # -- atoms
    def atom_value(self, atom) -> np.ndarray:
        """The atom's value in its category's row shape (Booleans unpacked)."""
        tokens, symbols = self.sample.tokens, np.arange(self.alphabet_size)
        ids = {s: k for k, s in enumerate(self.sample.alphabet)}
        on_axis = (lambda a: a[:, None, None]) if atom.variable == "s" else (lambda a: a[None, :, None])
        if atom.kind == "token" and atom.symbol:
            value = (tokens == ids[atom.symbol])[None, None, :]
        elif atom.kind == "token":
            value = on_axis(symbols) == tokens[None, None, :]
        elif atom.kind == "is":
            value = on_axis(symbols == ids[atom.symbol])
        elif atom.kind == "letter":
            value = on_axis(symbols > ids["<eos>"])
        elif atom.kind == "same":
            value = np.eye(self.alphabet_size, dtype=bool)[:, :, None]
        elif atom.kind == "constant":
            value = np.full((1, 1, 1), atom.numbers == (1,))
        elif atom.kind == "mod":
            m, r = atom.numbers
            value = ((self.sample.offset + 1) % m == r)[None, None, :]  # BOS is position 1
        else:
            value = np.full((1, 1, 1), atom.numbers[0])
        category = Category(atom.type, atom.variables)
        return np.broadcast_to(value, self._row_shape(category)[:2] + (self.positions,))

    # -- keeping candidates
    def _keep(self, category: Category, kind: int, size: int, values: np.ndarray, args: np.ndarray) -> None:
        """Deduplicate a batch of candidates of one category (values in row shape), keep or pass on
        the new ones, and show the new Booleans to the inspector."""
        level = self.level_stats(size)
        level.evaluated += len(values)
        self.progress(len(values))
        if len(values) and category.variables:
            values, args = _depending(values, args, category.variables)
        if not len(values):
            return
        if self.kept(size):
            store = self.stores[category]
            chosen, prints = store.new_rows(values)
            values, args = values[chosen], args[chosen]
            ids = np.arange(len(self.table), len(self.table) + len(chosen))
            self.table.add(kind, args, size, category, store.add(values, prints[chosen], ids))
        else:
            fresh = self._unseen(size, values)
            values, args = values[fresh], args[fresh]
            ids = np.arange(len(self.table), len(self.table) + len(values))
            if size < self.max_size:  # operands of the unary productions below
                self.table.add(kind, args, size, category, np.full(len(values), -1))
        if len(values):
            level.kept[str(category)] = level.kept.get(str(category), 0) + len(values)
            if category.type == BOOL:
                self.inspect(category, size, np.full(len(values), kind), args, values)
            if size == self.max_size - 1 and category.type == BOOL:
                results = self._unary_results(category, size + 1)
                self.level_stats(size + 1).planned += len(values) * (results[0] + 2 * results[2])
                self._unary_tile(category, size + 1, values, _operand_args(ids), results)
        self._check_budget()

    def _unseen(self, size: int, values: np.ndarray) -> np.ndarray:
        """Indices of the values whose 128-bit fingerprint is new at this size."""
        seen = self._seen.setdefault(size, set())
        keys = [(a << 64) | b for a, b in zip(fingerprints(values, 0).tolist(), fingerprints(values, 1).tolist())]
        fresh = []
        for k, key in enumerate(keys):
            if key not in seen:
                seen.add(key)
                fresh.append(k)
        return np.array(fresh, np.int64)

    def level_stats(self, size: int) -> LevelStats:
        return self.levels.setdefault(size, LevelStats(size))

    # -- one size
    def plans(self, size: int) -> list[Plan]:
        if size == 1:
            return [Plan(len(self.atoms), self._atoms)]
        plans = [self._unary_plan(c, size) for c in CATEGORIES if c.type == BOOL]
        for left_size in range(1, (size - 1) // 2 + 1):
            plans += self._binary_plans(left_size, size - 1 - left_size, size)
        for a, b in itertools.product(range(1, size - 2), repeat=2):
            if size - 1 - a - b >= 1:
                plans += self._conditional_plans(a, b, size - 1 - a - b, size)
        return [p for p in plans if p is not None and p.candidates]

    def run_level(self, size: int, plans: list[Plan] | None = None) -> LevelStats:
        """Enumerate every expression of this size (plans: those of self.plans(size))."""
        plans = self.plans(size) if plans is None else plans
        level = self.level_stats(size)
        level.planned += sum(p.candidates for p in plans)
        started = time.monotonic()
        try:
            for plan in plans:
                plan.run()
        finally:
            for store in self.stores.values():
                store.finish_level(size)
            if size == self.max_size:
                self._seen.clear()
            level.seconds += time.monotonic() - started
        level.complete = True
        return level

    def _atoms(self) -> None:
        for index, atom in enumerate(self.atoms):
            category = Category(atom.type, atom.variables)
            if self.useful(category, 1):
                value = self.atom_value(atom)[None]
                value = self.pack(value) if category.type == BOOL else value.astype(self.stores[category].dtype)
                self._keep(category, ATOM, 1, np.ascontiguousarray(value), np.array([[index, 0, 0]]))

    def _operand(self, category: Category, size: int) -> tuple[np.ndarray, np.ndarray]:
        return self.stores[category].level(size)

    # -- not, count, any, all
    def _unary_results(self, category: Category, size: int) -> tuple[bool, bool, bool]:
        """Which of not, the counts, and any/all give a useful expression of this size."""
        return (
            self.useful(category, size),
            self.useful(Category(COUNT, category.variables), size),
            bool(category.variables & T) and self.useful(Category(BOOL, category.variables & ~T), size),
        )

    def _unary_plan(self, category: Category, size: int) -> Plan | None:
        values, ids = self._operand(category, size - 1)
        results = self._unary_results(category, size)
        per_operand = results[0] + results[1] * len(self.grammar.count_offsets) + 2 * results[2]
        if not len(ids) or not per_operand:
            return None

        def run():
            tile = max(1, TILE_BYTES // self.stores[Category(COUNT, category.variables)].row_bytes)
            for start in range(0, len(ids), tile):
                chunk = slice(start, start + tile)
                self._unary_tile(category, size, values[chunk], _operand_args(ids[chunk]), results)

        return Plan(len(ids) * per_operand, run)

    def _unary_tile(
        self, category: Category, size: int, packed: np.ndarray, args: np.ndarray, results: tuple[bool, bool, bool]
    ) -> None:
        negate, count, bind = results
        if negate:
            negatable = ~np.isin(self.table.kind[args[:, 0]], (NOT, COMPARE))
            self._keep(category, NOT, size, ~packed[negatable] & self.valid_bits, args[negatable])
        if count:
            unpacked = self.unpack(packed)
            for offset in self.grammar.count_offsets:
                offset_args = args.copy()
                offset_args[:, 1] = -1 if offset is None else offset
                self._keep(
                    Category(COUNT, category.variables), COUNT_OF, size, self._count(unpacked, offset), offset_args
                )
        if bind:
            bound = Category(BOOL, category.variables & ~T)
            self._keep(bound, ANY, size, np.bitwise_or.reduce(packed, axis=2, keepdims=True), args)
            self._keep(bound, ALL, size, np.bitwise_and.reduce(packed, axis=2, keepdims=True), args)

    def _count(self, values: np.ndarray, offset: int | None) -> np.ndarray:
        """#[j <= i] P, or P held `offset` positions earlier in the same string (0 before its start)."""
        sample, dtype = self.sample, self.stores[Category(COUNT, CLOSED)].dtype
        if offset is not None:
            source = np.maximum(np.arange(sample.positions) - offset, 0)
            return (np.take(values, source, axis=-1) & (sample.offset >= offset)).astype(dtype)
        return running_count(values, sample.string_start, dtype)

    # -- and, or, comparisons, arithmetic
    def _binary_plans(self, left_size: int, right_size: int, size: int) -> list[Plan]:
        """Commutative pairs are met once (left size <= right size); `-` takes both orders."""
        plans = []
        for left_vars, right_vars in itertools.product((CLOSED, S, T, ST), repeat=2):
            if left_size == right_size and left_vars > right_vars:
                continue
            union = left_vars | right_vars
            for operand_type, result_types in ((BOOL, (BOOL,)), (COUNT, (BOOL, COUNT))):
                results = [Category(t, union) for t in result_types if self.useful(Category(t, union), size)]
                if results:
                    plans.append(
                        self._pair_plan(
                            Category(operand_type, left_vars),
                            left_size,
                            Category(operand_type, right_vars),
                            right_size,
                            size,
                            results,
                        )
                    )
        return plans

    def _pair_plan(
        self, left: Category, left_size: int, right: Category, right_size: int, size: int, results: list[Category]
    ) -> Plan:
        left_values, left_ids = self._operand(left, left_size)
        right_values, right_ids = self._operand(right, right_size)
        same_block = left == right and left_size == right_size
        pairs = len(left_ids) * (len(left_ids) + 1) // 2 if same_block else len(left_ids) * len(right_ids)
        per_pair = sum(
            2 if left.type == BOOL else len(COMPARISONS) if r.type == BOOL else len(ARITHMETIC) + 1 for r in results
        )

        def run():
            row_bytes = max(self.stores[r].row_bytes for r in results) * (8 if left.type == BOOL else 1)
            tile = max(1, int((TILE_BYTES // row_bytes) ** 0.5))
            for i0 in range(0, len(left_ids), tile):
                for j0 in range(i0 if same_block else 0, len(right_ids), tile):
                    lhs, rhs = left_values[i0 : i0 + tile][:, None], right_values[j0 : j0 + tile][None, :]
                    li, rj = np.meshgrid(left_ids[i0 : i0 + tile], right_ids[j0 : j0 + tile], indexing="ij")
                    keep = None
                    if same_block:
                        keep = np.arange(i0, i0 + len(li))[:, None] <= np.arange(j0, j0 + li.shape[1])[None, :]
                    for category in results:
                        self._pair_results(category, size, lhs, rhs, keep, li, rj)

        return Plan(pairs * per_pair, run)

    def _pair_results(
        self,
        category: Category,
        size: int,
        lhs: np.ndarray,
        rhs: np.ndarray,
        keep: np.ndarray | None,
        li: np.ndarray,
        rj: np.ndarray,
    ) -> None:
        def emit(kind: int, values: np.ndarray, first: np.ndarray, second: np.ndarray, third: np.ndarray) -> None:
            values = np.broadcast_to(values, li.shape + values.shape[2:])
            args = np.stack(np.broadcast_arrays(first, second, third), axis=-1)
            if keep is None:
                values, args = values.reshape((-1,) + values.shape[2:]), args.reshape(-1, 3)
            else:
                values, args = values[keep], args[keep]
            self._keep(category, kind, size, values, args)

        zero = np.zeros_like(li)
        if lhs.dtype == np.uint8:
            emit(AND, lhs & rhs, li, rj, zero)
            emit(OR, lhs | rhs, li, rj, zero)
        elif category.type == BOOL:
            for index, op in enumerate(COMPARISONS):
                emit(COMPARE, self.pack(_COMPARE[op](lhs, rhs)), zero + index, li, rj)
        else:
            for index, op in enumerate(ARITHMETIC):
                emit(ARITH, _ARITH[op](lhs, rhs), zero + index, li, rj)
            emit(ARITH, rhs - lhs, zero + ARITHMETIC.index("-"), rj, li)

    # -- P ? C1 : C2
    def _conditional_plans(self, condition_size: int, true_size: int, false_size: int, size: int) -> list[Plan]:
        plans = []
        for cv, tv, fv in itertools.product((CLOSED, S, T, ST), repeat=3):
            category = Category(COUNT, cv | tv | fv)
            if not self.useful(category, size):
                continue
            operands = (
                self._operand(Category(BOOL, cv), condition_size),
                self._operand(Category(COUNT, tv), true_size),
                self._operand(Category(COUNT, fv), false_size),
            )
            total = int(np.prod([len(ids) for _, ids in operands]))
            if total:
                plans.append(Plan(total, lambda c=category, o=operands: self._conditional(c, size, *o)))
        return plans

    def _conditional(self, category: Category, size: int, conditions, if_true, if_false) -> None:
        tile = max(1, int((TILE_BYTES // self.stores[category].row_bytes) ** (1 / 3)))
        (c_values, c_ids), (t_values, t_ids), (f_values, f_ids) = conditions, if_true, if_false
        for c0, t0, f0 in itertools.product(
            range(0, len(c_ids), tile), range(0, len(t_ids), tile), range(0, len(f_ids), tile)
        ):
            condition = self.unpack(c_values[c0 : c0 + tile])
            values = np.where(
                condition[:, None, None],
                t_values[t0 : t0 + tile][None, :, None],
                f_values[f0 : f0 + tile][None, None, :],
            )
            grid = np.meshgrid(c_ids[c0 : c0 + tile], t_ids[t0 : t0 + tile], f_ids[f0 : f0 + tile], indexing="ij")
            args = np.stack([g.ravel() for g in grid], axis=1)
            self._keep(category, CONDITIONAL, size, values.reshape((-1,) + values.shape[3:]), args)


def running_count(values: np.ndarray, string_start: np.ndarray, dtype) -> np.ndarray:
    """#[j <= i] along the last axis (positions), restarting at every string. The running sum over
    the whole sample may wrap around in a small dtype; the difference is still exact, because it
    is right modulo 2**bits and a count lies in the dtype's range (count_dtype)."""
    running = np.cumsum(values, axis=-1, dtype=dtype)
    return running - (np.take(running, string_start, axis=-1) - np.take(values, string_start, axis=-1))


def _operand_args(ids: np.ndarray) -> np.ndarray:
    args = np.zeros((len(ids), 3), np.int64)
    args[:, 0] = ids
    return args


_COMPARE = {
    "<": np.less,
    "<=": np.less_equal,
    "=": np.equal,
    "!=": np.not_equal,
    ">=": np.greater_equal,
    ">": np.greater,
}
_ARITH = {"+": np.add, "-": np.subtract, "min": np.minimum, "max": np.maximum}


def _depending(values: np.ndarray, args: np.ndarray, variables: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates whose value depends on each of their variables (axis 1 = s, 2 = t)."""
    depends = np.ones(len(values), bool)
    for bit, first in ((S, values[:, :1]), (T, values[:, :, :1])):
        if variables & bit:
            depends &= (values != first).reshape(len(values), -1).any(axis=1)
    if depends.all():
        return values, args
    return values[depends], args[depends]
