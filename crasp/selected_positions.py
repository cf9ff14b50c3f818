"""A program evaluated at chosen positions only: the positions a check reads.

A teacher-forced check reads the output family where an answer is predicted: two positions of
Majority's 154, about half of UF's. Everything above the counts of a program is evaluated at those
positions alone; a count needs its body at every position before the one it is read at, so a count
is evaluated over whole strings by a full `BatchEvaluator` (sharing its memo) and then read at the
chosen positions. A prefix count of a body one-hot in its free index (`#[j <= i] Q(s)`) is not even
a prefix sum there: each chosen position's count of every symbol is a histogram of the keys before
it, built with one bincount (`counts_at`), so Majority never makes a (B, T, V) array.

The chosen positions are rows of a `SelectedEvaluator`: a `BatchEvaluator` whose "strings" are the
chosen positions, each one position long. Its rules are the full evaluator's, except where a value
depends on other positions: counts, one-hot keys that look back (local counts), MOD(m, r).
"""

from __future__ import annotations

import numpy as np

from crasp import expr as E
from crasp.batch_evaluator import BatchEvaluator
from crasp.prefix_sums import prefix_sum
from crasp.trampoline import Computation
from crasp.values import Value

RANKS_ADDED_IN_TURN = 32  # rows per (string, group) up to which counts_at adds rows in turns
SINGLE_OCCURRENCE_TABLE = 4  # a table of (string, group) cells up to this many times the positions: no sort


def counts_at(
    keys_BxT: np.ndarray,
    rows_b: np.ndarray,
    rows_i: np.ndarray,
    V: int,
    dtype,
    groups_BxT: np.ndarray | None = None,
    row_groups: np.ndarray | None = None,
) -> np.ndarray:
    """out[r, s] = #{j <= rows_i[r] : keys[b, j] = s and groups[b, j] = row_groups[r]} with b = rows_b[r]:
    without groups every j of the string counts (rows in (string, position) order, as np.nonzero lists them);
    a row of group < 0 counts none (keys < 0 never count)."""
    B, T = keys_BxT.shape
    # Each occurrence is counted at the first row of its (string, group) at or after it, if any; then the
    # rows of a group add up: the row before is added to each row of rank 1, 2, ... in its group.
    if groups_BxT is None:  # one group per string, rows in (string, position) order: each row takes the
        # positions since its string's row before it; the strings' positions up to their last rows are
        # those rows' positions in order. (A running count of rows over every position took twice the time.)
        row_codes, order = rows_b.astype(np.int64) * T + rows_i, None
        new_string = np.r_[True, rows_b[1:] != rows_b[:-1]] if len(rows_b) else np.zeros(0, bool)
        last_of_string = np.r_[new_string[1:], True] if len(rows_b) else new_string
        last = np.full(B, -1)
        last[rows_b[last_of_string]] = rows_i[last_of_string]
        keys = keys_BxT[np.arange(T) <= last[:, None]]
        lengths = rows_i + 1 - np.where(new_string, 0, np.r_[0, rows_i[:-1] + 1])
        index = np.int32 if len(rows_b) * V < 2**31 else np.int64
        cells = np.repeat(np.arange(len(rows_b), dtype=index) * V, lengths) + keys
        if keys.min(initial=0) < 0:
            cells = cells[keys >= 0]
    else:
        n_groups = int(max(groups_BxT.max(initial=0), row_groups.max(initial=0))) + 1
        keys = keys_BxT.ravel()
        flat = np.flatnonzero((keys >= 0) & (groups_BxT.ravel() >= 0))
        batch, position = np.divmod(flat, T)
        group_cells = batch * n_groups + groups_BxT.ravel()[flat]
        if B * n_groups <= SINGLE_OCCURRENCE_TABLE * keys.size:
            single = _counts_of_single_occurrences(
                B * n_groups, group_cells, position, keys[flat], rows_b * n_groups, rows_i, row_groups, V, dtype
            )
            if single is not None:
                return single
        row_codes = np.where(row_groups >= 0, (rows_b.astype(np.int64) * n_groups + row_groups) * T + rows_i, -1)
        order = np.argsort(row_codes, kind="stable")
        row_codes = row_codes[order]
        codes = group_cells * T + position
        row = np.searchsorted(row_codes, codes, side="left")
        counted = row < len(row_codes)
        counted[counted] = row_codes[row[counted]] // T == codes[counted] // T
        cells = row[counted] * V + keys[flat[counted]]
    size = len(row_codes) * V
    if size <= 4 * len(cells):  # few rows (Majority): one bincount pass
        histogram = np.bincount(cells, minlength=size).astype(dtype)
    else:  # a sparse histogram (UF: 150 x 153 cells per string for 300 keys): bincount's int64 zeros cost 4x
        histogram = np.zeros(size, dtype)
        cells, number = np.unique(cells, return_counts=True)
        histogram[cells] = number
    histogram = histogram.reshape(len(row_codes), V)
    group = row_codes // T
    first_of_group = np.r_[True, group[1:] != group[:-1]] if len(group) else np.zeros(0, bool)
    rank = np.arange(len(group)) - np.maximum.accumulate(np.where(first_of_group, np.arange(len(group)), 0))
    if rank.max(initial=0) < RANKS_ADDED_IN_TURN:
        # Few rows per group (2 per string for Majority, 1-2 per symbol for UF): add the row before to
        # each row of rank 1, then 2, ...; otherwise one running sum over all rows, less each group's start.
        for k in range(1, rank.max(initial=0) + 1):
            at = np.flatnonzero(rank == k)
            histogram[at] += histogram[at - 1]
    else:
        running = prefix_sum(histogram[None], dtype)[0]
        before = np.arange(len(group)) - rank - 1
        histogram = running - np.where((before >= 0)[:, None], running[np.maximum(before, 0)], 0)
    if order is None:
        return histogram
    out = np.empty_like(histogram)
    out[order] = histogram
    return out


def _counts_of_single_occurrences(
    cells: int, group_cells, position, keys, row_strings, rows_i, row_groups, V: int, dtype
) -> np.ndarray | None:
    """counts_at with groups where no (string, group) occurs twice (UF's input tokens are distinct, so the
    positions right after a symbol form a group of one): a row counts its group's one key if that position
    is at or before the row, found in a table of the `cells` (string, group) pairs, not by sorting. None
    if some (string, group) occurs twice. An occurrence's cell is group_cells, a row's row_strings + group
    (string * groups + group)."""
    first = np.full(cells, -1)
    first[group_cells] = position
    if not np.array_equal(first[group_cells], position):  # two occurrences of a group: one overwrote the other
        return None
    symbol = np.zeros(cells, keys.dtype)
    symbol[group_cells] = keys
    row_cells = row_strings + np.maximum(row_groups, 0)
    seen = np.flatnonzero((row_groups >= 0) & (first[row_cells] >= 0) & (first[row_cells] <= rows_i))
    histogram = np.zeros((len(rows_i), V), dtype)
    histogram[seen, symbol[row_cells[seen]]] = 1
    return histogram


class SelectedEvaluator(BatchEvaluator):
    """Evaluates nodes at the chosen positions (rows_b[r], rows_i[r]) of `whole`'s strings, one row each."""

    def __init__(self, whole: BatchEvaluator, rows_b: np.ndarray, rows_i: np.ndarray):
        super().__init__(whole.tokens[rows_b, rows_i][:, None], whole.symbol_ids, whole.first_string, whole.count_dtype)
        self.whole = whole
        self.rows_b, self.rows_i = rows_b, rows_i
        self.spread: dict[int, np.ndarray] = {}  # id of a chosen-rows key -> the same key over whole strings
        self.looks_back: dict[int, bool] = {}
        self.counted: dict[tuple[int, ...], np.ndarray] = {}  # counts_at by the ids of its keys

    def at_rows(self, array: np.ndarray) -> np.ndarray:
        """A whole-strings array (B or 1, T or 1, ...) read at the chosen rows: (rows, 1, ...)."""
        array = np.broadcast_to(array, (self.whole.B, self.whole.T) + array.shape[2:])
        return array[self.rows_b, self.rows_i][:, None]

    def whole_env(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Keys bound at the chosen rows as keys over whole strings, -1 (no symbol) elsewhere: a value at
        a position reads the keys bound at that position only, so the chosen rows' values are exact."""
        spread = {}
        for name, key in env.items():
            if id(key) not in self.spread:
                whole_key = np.full((self.whole.B, self.whole.T), -1, np.int64)
                whole_key[self.rows_b, self.rows_i] = np.broadcast_to(key, (self.B, 1))[:, 0]
                self.spread[id(key)] = self.whole.bind(whole_key)
                self.bind(key)
            spread[name] = self.spread[id(key)]
        return spread

    def _from_whole(self, node: E.Expr, env) -> Computation[Value]:
        value = yield self.whole.value(node, self.whole_env(env))
        return Value(self.at_rows(value.array), value.axes)

    def _count(self, node: E.CountOf, env) -> Computation[Value]:
        counted = None
        if node.offset is None:
            counted = yield self._onehot_count(node.body, env)
            if counted is None and node.body.free and node.body.free <= set(env):
                counted = yield self._keyed_count(node.body, sorted(node.body.free), env)
        return counted if counted is not None else (yield self._from_whole(node, env))

    def keyed_counts(self, code_BxT: np.ndarray, weights: Value, query_BxT: np.ndarray) -> Value | None:
        """BatchEvaluator.keyed_counts at the chosen rows (code over whole strings, queries at the rows), for
        bool weights without index axes (else None: counted over whole strings)."""
        if weights.axes:
            return None
        occurs = np.where(np.broadcast_to(weights.array, code_BxT.shape), 0, -1)
        row_codes = np.broadcast_to(query_BxT, (self.B, 1))[:, 0]
        counts = counts_at(occurs, self.rows_b, self.rows_i, 1, self.count_dtype, code_BxT, row_codes)
        return Value(counts, ())

    def _onehot_count(self, body: E.Expr, env) -> Computation[Value | None]:
        """`#[j <= i] (K[t] and R[s])` with R one-hot in the free index s and K one-hot in the index t
        bound at i (or no K): for every s, the j <= i where R's key is s and K's key is t(i)."""
        parts = self.onehot_count_parts(body, env)
        if parts is None:
            return None
        name, keyed, rest = parts
        key = yield self.whole.onehot_key(self.whole.conjunction(rest), name, {})
        group_key, row_groups = None, None
        if keyed:
            (bound,) = body.free & set(env)
            group_key = yield self.whole.onehot_key(self.whole.conjunction(keyed), bound, {})
            row_groups = np.broadcast_to(env[bound], (self.B, 1))[:, 0]
        if key is None or (keyed and group_key is None):
            return None
        memo_key = (id(key), id(group_key), id(row_groups))  # `n[s]` and `n[u]` count the same keys
        if memo_key not in self.counted:
            self.whole.bind(key), self.whole.bind(group_key), self.bind(row_groups)
            self.counted[memo_key] = counts_at(
                key, self.rows_b, self.rows_i, self.V, self.count_dtype, group_key, row_groups
            )
        return Value(self.counted[memo_key][:, None], (name,))

    def over_strings(self) -> BatchEvaluator:
        return self.whole

    def group_counts(
        self, occurs_BxT: np.ndarray, groups_BxT: np.ndarray | None, queries: np.ndarray | None, symbols: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """BatchEvaluator.group_counts at the chosen rows, from the whole strings' occurrences and groups."""
        ones = np.where(occurs_BxT, 0, -1)  # every occurrence counts as the one symbol 0
        if groups_BxT is None:
            counts = counts_at(ones, self.rows_b, self.rows_i, 1, self.count_dtype)
            return counts, symbols[self.rows_b, :1]
        row_groups = np.broadcast_to(queries, (self.B, 1))[:, 0]
        counts = counts_at(ones, self.rows_b, self.rows_i, 1, self.count_dtype, groups_BxT, row_groups)
        symbol = symbols[self.rows_b, np.maximum(row_groups, 0)]
        return counts, np.where(row_groups >= 0, symbol, -1)[:, None]

    def _periodic(self, node: E.Periodic, env) -> Value:
        return Value(((self.rows_i + 1) % node.modulus == node.residue)[:, None], ())

    def onehot_key(self, node: E.Expr, name: str, env) -> Computation[np.ndarray | None]:
        if not self._looks_back(node):
            return (yield super().onehot_key(node, name, env))
        if not (node.free - {name}) <= set(env) or name not in node.free:
            return None
        key = yield self.whole.onehot_key(node, name, self.whole_env(env))
        return None if key is None else self.at_rows(key)

    def _looks_back(self, node: E.Expr) -> bool:
        """Whether the node reads other positions than its own (a count), so its key is found over whole strings."""
        if id(node) not in self.looks_back:
            self.looks_back[id(node)] = any(isinstance(n, E.CountOf) for n in E.walk(node))
        return self.looks_back[id(node)]
