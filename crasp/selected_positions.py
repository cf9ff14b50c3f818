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
from crasp.evaluate import BatchEvaluator, Value
from crasp.prefix_sums import prefix_sum
from crasp.trampoline import Computation


def counts_at(keys_BxT: np.ndarray, rows_b: np.ndarray, rows_i: np.ndarray, V: int, dtype) -> np.ndarray:
    """out[r, s] = #{j <= rows_i[r] : keys[rows_b[r], j] = s}, for rows sorted by (string, position)."""
    B, T = keys_BxT.shape
    row_codes = rows_b.astype(np.int64) * T + rows_i
    batch, position = np.nonzero(keys_BxT >= 0)
    # Each occurrence is counted at the first chosen row of its string at or after it (if any), then
    # the rows of a string add up: a running sum over all rows, less the one before the string's first.
    row = np.searchsorted(row_codes, batch * T + position, side="left")
    counted = row < len(row_codes)
    counted[counted] = rows_b[row[counted]] == batch[counted]
    cells = row[counted] * V + keys_BxT[batch[counted], position[counted]]
    histogram = np.bincount(cells, minlength=len(row_codes) * V).reshape(len(row_codes), V)
    running = prefix_sum(histogram[None], dtype)[0]
    first_of_string = np.r_[True, rows_b[1:] != rows_b[:-1]] if len(rows_b) else np.zeros(0, bool)
    before = np.maximum.accumulate(np.where(first_of_string, np.arange(len(rows_b)), 0)) - 1
    return running - np.where((before >= 0)[:, None], running[np.maximum(before, 0)], 0)


class SelectedEvaluator(BatchEvaluator):
    """Evaluates nodes at the chosen positions (rows_b[r], rows_i[r]) of `whole`'s strings, one row each."""

    def __init__(self, whole: BatchEvaluator, rows_b: np.ndarray, rows_i: np.ndarray):
        super().__init__(whole.tokens[rows_b, rows_i][:, None], whole.symbol_ids, whole.first_string, whole.count_dtype)
        self.whole = whole
        self.rows_b, self.rows_i = rows_b, rows_i
        self.spread: dict[int, np.ndarray] = {}  # id of a chosen-rows key -> the same key over whole strings
        self.looks_back: dict[int, bool] = {}
        self.counted: dict[int, np.ndarray] = {}  # id of a whole-strings key -> counts_at of it

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
        free = node.body.free
        if node.offset is None and len(free) == 1 and not (free & set(env)):
            (name,) = free
            key = yield self.whole.onehot_key(node.body, name, {})
            if key is not None:
                if id(key) not in self.counted:  # `n[s]` and `n[u]` count the same keys
                    self.whole.bind(key)
                    self.counted[id(key)] = counts_at(key, self.rows_b, self.rows_i, self.V, self.count_dtype)
                return Value(self.counted[id(key)][:, None], (name,))
        return (yield self._from_whole(node, env))

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
