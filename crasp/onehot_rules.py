"""The rules of the fast evaluator that keep one-hot families as keys (crasp.onehot_keys).

A bool family over one index that holds for one symbol at most at each position is a `OneHot` value:
`and` and `or` keep keys where the result is one-hot (`OneHotRules._onehot_logic`), and `onehot_key`
finds the key of a node as a family over an index, which the bind and count rules of
crasp.batch_evaluator and crasp.count_rules read instead of (B, T, V) masks. A mixin of
`BatchEvaluator`: it reads the evaluator's batch, alphabet and `value`.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from crasp import expr as E
from crasp import onehot_keys
from crasp.node_patterns import MEANS_ONE, count_against_number
from crasp.trampoline import Computation
from crasp.values import OneHot, Value, shift_left, shift_right


class OneHotRules:
    """One-hot values and keys of `BatchEvaluator`."""

    # ------------------------------------------------------------ one-hot families (crasp.onehot_keys)
    @cached_property
    def token_keys(self) -> np.ndarray:
        return self.tokens.astype(self.key_dtype)

    def onehot(self, key_BxT: np.ndarray, name: str) -> Value:
        """The family over `name` true for the symbol key(i) alone at each position, kept as its key."""
        return OneHot(key_BxT.astype(self.key_dtype, copy=False), name, self.V)

    def _onehot_logic(self, op: str, left: Value, right: Value) -> Value | None:
        """`and` / `or` with a one-hot family, kept as a key where the result is one-hot; None: use masks."""
        if not isinstance(left, OneHot):
            left, right = right, left
        if not isinstance(left, OneHot):
            return None
        if isinstance(right, OneHot) and right.axes == left.axes:
            combine = onehot_keys.and_keys if op == "and" else onehot_keys.or_keys
            key = combine(left.key, right.key)
        elif op == "or":
            return None  # true for every symbol where the other side holds: not one-hot
        elif right.axes == ():
            key = onehot_keys.masked_key(left.key, right.array)
        elif right.axes == left.axes:
            key = onehot_keys.key_where_family_holds(left.key, right.array)
        else:
            return None
        return None if key is None else self.onehot(key, left.axes[0])

    # ------------------------------------------------------------ one-hot keys
    def onehot_key(self, node: E.Expr, name: str, env) -> Computation[np.ndarray | None]:
        """If node, as a family over `name`, is [key(i) == name] (key -1: false for every symbol),
        return key as a (B, T) array; else None. Other indices of node must be bound in env.
        Memoized, in the key type: a count's rules each ask for the keys of its parts, and finding one may
        evaluate it."""
        found_key = (id(node), name, tuple(sorted((n, id(k)) for n, k in env.items())))
        if found_key not in self.found_keys:
            key = yield self._onehot_key(node, name, env)
            self.found_keys[found_key] = None if key is None else key.astype(self.key_dtype, copy=False)
        return self.found_keys[found_key]

    def _onehot_key(self, node: E.Expr, name: str, env) -> Computation[np.ndarray | None]:
        if not (node.free - {name}) <= set(env) or name not in node.free:
            return None
        if isinstance(node, E.Token) and node.symbol == E.Var(name):
            return self.token_keys
        if isinstance(node, E.SymbolRelation) and node.op == "=":
            other = node.right if node.left == E.Var(name) else node.left
            if isinstance(other, str):
                return np.full((self.B, self.T), self.symbol_id(other))
            return env.get(other.name)
        local = count_against_number(node)
        if local is not None and local[0].offset is not None and (local[2], local[1].value) in MEANS_ONE:
            offset = local[0].offset
            shifted_env = {n: self.bind(shift_left(k, offset, -1)) for n, k in env.items()}
            inner = yield self.onehot_key(local[0].body, name, shifted_env)
            return None if inner is None else shift_right(inner, offset, -1)
        if isinstance(node, E.And):
            left = (yield self.onehot_key(node.left, name, env)) if name in node.left.free else None
            right = (yield self.onehot_key(node.right, name, env)) if name in node.right.free else None
            if left is not None and right is not None:
                return np.where(left == right, left, -1)
            key, other = (left, node.right) if left is not None else (right, node.left)
            if key is None or (other.free - {name} - set(env)):
                return None
            value = yield self.value(other, env)
            if name in other.free:  # a family over name, `"<eos>" < s`: the key where it holds for the key's symbol
                return None if value.axes != (name,) else onehot_keys.key_where_family_holds(key, value.array)
            return np.where(np.broadcast_to(value.array, key.shape), key, -1)
        if isinstance(node, E.Named):
            inner_env, renames = self._body_scope(node, env)
            if list(renames.values()) == [name]:
                key = yield self.onehot_key(node.body, next(iter(renames)), inner_env)
                if key is not None:
                    return key
        return (yield self._observed_onehot_key(node, name, env))

    def _observed_onehot_key(self, node: E.Expr, name: str, env) -> Computation[np.ndarray | None]:
        """The family over `name` evaluated (cost V per position) and found one-hot on these very
        strings (e.g. `#[j <= i] (#[k <= j] Q(t) >= 1) = 2`, true only for t = w_{i-1} at its first
        occurrence): exact for this batch, which is all the evaluator needs."""
        if node.type != E.BOOL:
            return None
        value = yield self.value(node, env)
        if value.axes != (name,):
            return None
        if isinstance(value, OneHot):
            return np.broadcast_to(value.key, (self.B, self.T))
        array = np.broadcast_to(value.array, value.array.shape[:2] + (self.V,))  # (1, 1, V) for `"<eos>" < s`
        if (array.sum(axis=2) > 1).any():
            return None
        return np.broadcast_to(np.where(array.any(axis=2), array.argmax(axis=2), -1), (self.B, self.T))
