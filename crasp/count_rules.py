"""The rules of the fast evaluator for counts `#[j <= i] body`, and for a count compared with a number.

A count whose body reads no index bound at i is a prefix sum along the positions (crasp.prefix_sums).
One that reads a bound index is, where it can be, a keyed prefix sum (`_keyed_count`), a count of
compared one-hot counts (`_compared_count`, crasp.compared_counts), and otherwise counted densely over
the bound index and read at its symbol; `#[j <= i] (R(s) and K[t]) op n` is one-hot in s where each
(string, t) group holds one symbol (`_onehot_count_compared`). A mixin of `BatchEvaluator`: an
evaluator of chosen positions (crasp.selected_positions) overrides `over_strings`, `group_counts`
and `keyed_counts` to count over whole strings and read the counts at its positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from crasp import expr as E
from crasp import onehot_keys
from crasp.compared_counts import COMPARISON_OPS, compared_count
from crasp.node_patterns import MIRRORED, conjuncts, count_against_number
from crasp.prefix_sums import keyed_prefix_sum, prefix_sum
from crasp.trampoline import Computation
from crasp.values import Value, joint, select, shift_left, shift_right

if TYPE_CHECKING:
    from crasp.batch_evaluator import BatchEvaluator


class CountRules:
    """Counts of `BatchEvaluator`."""

    def _onehot_count_compared(self, node: E.Compare, env) -> Computation[Value | None]:
        """`#[j <= i] (R(s) and K[t]) op n` with `0 op n` false, R one-hot in the free index s and K in the
        index t bound at i (or no K). Where every (string, t) group's j hold one symbol, the count of any
        other s is 0, so `op n` fails for it: the family is one-hot, true for the group's symbol where the
        group's count op n holds. That count is one per position, (B, T), not one per symbol."""
        compared = count_against_number(node)
        if compared is None or compared[0].offset is not None:
            return None
        count, number, op = compared
        parts = self.onehot_count_parts(count.body, env)
        if parts is None or E.COMPARISONS[op](0, number.value):
            return None
        name, keyed, rest = parts
        strings = self.over_strings()
        # Without K the body itself: a key found by evaluating it is then the dense count's memoized body.
        key = yield strings.onehot_key(strings.conjunction(rest) if keyed else count.body, name, {})
        groups, queries = None, None
        if keyed:
            (bound,) = count.body.free & set(env)
            groups = yield strings.onehot_key(strings.conjunction(keyed), bound, {})
            queries = env[bound]
        if key is None or (keyed and groups is None):
            return None
        n_groups = 1 if groups is None else int(max(groups.max(initial=-1), np.max(queries, initial=-1))) + 1
        symbols = onehot_keys.symbol_per_group(key, groups, max(n_groups, 1))
        if symbols is None:
            return None
        counts, symbol = self.group_counts(key >= 0, groups, queries, symbols)
        return self.onehot(np.where(E.COMPARISONS[op](counts, number.value), symbol, -1), name)

    def onehot_count_parts(self, body: E.Expr, env) -> tuple[str, list[E.Expr], list[E.Expr]] | None:
        """A count's body `R(s) and K[t]`: its one free index s, the conjuncts that read the one index bound
        here (K, without s), and the others (R, which must read s); None for a body of another shape."""
        free = body.free - set(env)
        if len(free) != 1 or len(body.free & set(env)) > 1:
            return None
        (name,) = free
        keyed, rest = [], []
        for part in conjuncts(body):
            if part.free & set(env):
                if name in part.free:
                    return None
                keyed.append(part)
            else:
                rest.append(part)
        if not any(name in part.free for part in rest):
            return None
        return name, keyed, rest

    def over_strings(self) -> BatchEvaluator:
        """The evaluator of whole strings, where keys that j ranges over are found."""
        return self

    def group_counts(
        self, occurs_BxT: np.ndarray, groups_BxT: np.ndarray | None, queries: np.ndarray | None, symbols: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """At each position i of string b: #{j <= i : occurs(j), groups(j) = queries(i)} and the group's
        symbol, symbols[b, queries(i)] (no groups: every j counts, symbols[b, 0]); 0 and -1 where queries < 0."""
        if groups_BxT is None:
            return prefix_sum(occurs_BxT, self.count_dtype), symbols[:, :1]
        queries = np.broadcast_to(queries, (self.B, self.T))
        counts = keyed_prefix_sum(np.where(occurs_BxT, groups_BxT, -1), occurs_BxT, queries, self.count_dtype)
        symbol = symbols[np.arange(self.B)[:, None], np.maximum(queries, 0)]
        return counts, np.where(queries >= 0, symbol, -1)

    def _count(self, node: E.CountOf, env) -> Computation[Value]:
        depends = sorted(name for name in node.body.free if name in env)
        if node.offset is not None:
            # The body is read at j = i - c with the indices bound at i: shift the keys, then the value.
            shifted_env = {n: self.bind(shift_left(env[n], node.offset, -1)) for n in depends}
            body = yield self.value(node.body, shifted_env)
            array = np.broadcast_to(body.array, (body.array.shape[0], self.T) + body.array.shape[2:])
            return Value(shift_right(array.astype(self.count_dtype), node.offset, 0), body.axes)
        if not depends:
            body = yield self.value(node.body, env)
            array = np.broadcast_to(body.array, (body.array.shape[0], self.T) + body.array.shape[2:])
            return Value(prefix_sum(array, self.count_dtype), body.axes)
        keyed = yield self._keyed_count(node.body, depends, env)
        if keyed is None:
            keyed = yield self._compared_count(node.body, depends, env)
        return keyed if keyed is not None else (yield self._dense_count_thenselect(node.body, depends, env))

    def _keyed_count(self, body: E.Expr, depends: list[str], env) -> Computation[Value | None]:
        parts = conjuncts(body)
        by_index: dict[str, list[E.Expr]] = {name: [] for name in depends}
        rest: list[E.Expr] = []
        for part in parts:
            uses = [name for name in depends if name in part.free]
            if len(uses) > 1:
                return None
            (by_index[uses[0]] if uses else rest).append(part)
        strings = self.over_strings()
        keys, queries = [], []
        for name in depends:
            key = yield strings.onehot_key(strings.conjunction(by_index[name]), name, {})
            if key is None:
                return None
            keys.append(key)
            queries.append(env[name])
        code = np.zeros((strings.B, strings.T), np.int64)
        query = np.zeros((self.B, self.T), np.int64)
        for key, q in zip(keys, queries):
            code = np.where((code >= 0) & (key >= 0), code * self.V + key, -1)
            query = np.where((query >= 0) & (q >= 0), query * self.V + q, -1)
        weights = (yield strings.value(strings.conjunction(rest), {})) if rest else Value(np.ones((1, 1), bool), ())
        return self.keyed_counts(code, weights, query)

    def keyed_counts(self, code_BxT: np.ndarray, weights: Value, query_BxT: np.ndarray) -> Value | None:
        """At each position i: the sum of weights(j) over the j <= i with code(j) = query(i) (code < 0: none)."""
        axes, (w,) = joint(weights)
        w = np.broadcast_to(w, (self.B, self.T) + w.shape[2:])
        return Value(keyed_prefix_sum(code_BxT, w, query_BxT, self.count_dtype), axes)

    def _compared_count(self, body: E.Expr, depends: list[str], env) -> Computation[Value | None]:
        """`#[j <= i] (#[k <= j] X(s) op #[k <= j] Y(t))` with X, Y one-hot and t bound: counted from the
        sorted occurrences of s and t (crasp.compared_counts), never as a (T, V, V) tensor."""
        if not isinstance(body, E.Compare) or body.op not in COMPARISON_OPS:
            return None
        sides = []
        for side in (body.left, body.right):
            if not isinstance(side, E.CountOf) or side.offset is not None or len(side.body.free) != 1:
                return None
            (name,) = side.body.free
            key = yield self.onehot_key(side.body, name, {})
            if key is None:
                return None
            sides.append((name, key))
        (free, free_key), (bound, bound_key) = sides
        op = body.op
        if bound not in env:
            (free, free_key), (bound, bound_key), op = (bound, bound_key), (free, free_key), MIRRORED[op]
        if bound not in env or free == bound:
            return None
        counts = compared_count(free_key, bound_key, env[bound], op, self.V, self.count_dtype)
        if free in env:
            return Value(select(counts, 0, env[free], self.V), ())
        return Value(counts, (free,))

    def _dense_count_thenselect(self, body: E.Expr, depends: list[str], env) -> Computation[Value]:
        free_env = {n: k for n, k in env.items() if n not in depends}
        dense = yield self.value(body, free_env)
        array = np.broadcast_to(dense.array, (self.B, self.T) + dense.array.shape[2:])
        counts = prefix_sum(array, self.count_dtype)
        axes = dense.axes
        for name in depends:
            if name not in axes:
                continue
            counts = select(counts, axes.index(name), env[name], self.V)
            axes = tuple(a for a in axes if a != name)
        return Value(counts, axes)
