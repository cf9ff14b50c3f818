"""The fast evaluator of one chunk of strings: `BatchEvaluator`, its rules by node type, and the rewrites.

Five rewrites keep families over large alphabets cheap, each exact:
- `any t: Q(t) and X[t]` binds t to the symbol at position i (only it can satisfy Q(t)) instead
  of materializing X for every t. Any conjunct that is "one-hot" in t (a Q(t), possibly seen c
  positions ago through a local count) binds t this way.
- a count whose body uses a bound index, `#[j <= i] (prev[t](j) and R(j))` with t bound to the
  symbol at i, is a keyed prefix sum: sum R(j) over the j <= i whose key (here w_{j-1}) equals
  t(i). It is computed by sorting (batch, key, position) once, never as a (T, V, V) tensor.
- `all u: A >= B[u]` is `A >= max_u B[u]` (and the other monotone cases), so a majority over V
  symbols costs V, not V * V.
- a count of a comparison of two one-hot prefix counts, `#[j <= i] (#[k <= j] Q(s) < #[k <= j] Q(t))`
  with t bound, is summed segment by segment between the occurrences of t (crasp.compared_counts),
  never as a (T, V, V) tensor.
- `#[j <= i] (R(s) and K[t]) op n` with R and K one-hot, t bound and `0 op n` false is one-hot in s
  where each (string, t) group of j holds one symbol: a count of positions per group, not of symbols.
Anything else falls back to dense evaluation. The first and third are rules here; the others are
counts (crasp.count_rules), which read the keys that one-hot families are kept as (crasp.onehot_rules).

Rules are methods named in RULES by node type. Rules that need the values of other nodes are
generators run by `crasp.trampoline`, so the depth of a program (nested expressions, chains of
definitions) is bounded by memory, not by Python's recursion limit.
"""

from __future__ import annotations

import numpy as np

from crasp import expr as E
from crasp.count_rules import CountRules
from crasp.node_patterns import MIRRORED, conjuncts
from crasp.onehot_rules import OneHotRules
from crasp.trampoline import Computation, trampoline
from crasp.values import OneHot, Value, align, joint, renamed

COUNT_DTYPE = np.int64  # of a node evaluated outside a program (BatchEvaluator's default)


class BatchEvaluator(CountRules, OneHotRules):
    """Evaluates nodes on one chunk of strings; `env` binds index variables to per-position symbols."""

    def __init__(
        self, tokens_BxT: np.ndarray, symbol_ids: dict[str, int], first_string: int = 0, count_dtype=COUNT_DTYPE
    ):
        self.tokens = tokens_BxT
        self.count_dtype = count_dtype  # holds every count of the program (count_dtype()); int64 may overflow
        self.first_string = first_string  # the index of tokens_BxT[0] in the whole batch, for messages
        self.B, self.T = tokens_BxT.shape
        self.symbol_ids = symbol_ids
        self.V = len(symbol_ids)
        # One-hot keys in the narrowest type that holds -1 and every symbol id (int8 up to 128 symbols): an
        # int64 key took more memory than the bool mask it replaces over a small alphabet.
        self.key_dtype = np.min_scalar_type(-max(self.V, 1))
        self.memo: dict[tuple, Value] = {}
        self.keep_alive: list[np.ndarray] = []  # key arrays whose id() is part of a memo key
        self.conjunctions: dict[tuple[int, ...], E.Expr] = {}  # built by conjunction(), by their parts' ids
        self.found_keys: dict[tuple, np.ndarray | None] = {}  # onehot_key's answers by node, index and keys' ids

    # ------------------------------------------------------------ entry
    def value(self, node: E.Expr, env: dict[str, np.ndarray]) -> Computation[Value]:
        used = tuple(sorted((name, id(env[name])) for name in node.free if name in env))
        key = (id(node), used)
        found = self.memo.get(key)
        if found is None:
            found = getattr(self, RULES[type(node)])(node, {name: env[name] for name in node.free if name in env})
            if not isinstance(found, Value):  # the rule needs other values: a generator
                found = yield found
            self.memo[key] = found
        return found

    def full(self, node: E.Expr, axes: tuple[str, ...]) -> Value:
        """The node's value broadcast to (B, T, V, ...) with one axis per name in `axes`
        (a family parameter its body ignores still gets its axis)."""
        array = align(trampoline(self.value(node, {})), axes)
        return Value(np.broadcast_to(array, (self.B, self.T) + (self.V,) * len(axes)), axes)

    def bind(self, key_BxT: np.ndarray) -> np.ndarray:
        self.keep_alive.append(key_BxT)
        return key_BxT

    def conjunction(self, parts: list[E.Expr]) -> E.Expr:
        """`parts[0] and parts[1] and ...`, one node per list of parts: values are memoized by the id of
        their node, so a node built here must stay alive (a freed one's id may name another node)."""
        key = tuple(id(part) for part in parts)
        if key not in self.conjunctions:
            result = parts[0]
            for part in parts[1:]:
                result = E.And(result, part)
            self.conjunctions[key] = result
        return self.conjunctions[key]

    # ------------------------------------------------------------ rules
    def _token(self, node: E.Token, env) -> Value:
        symbol = node.symbol
        if isinstance(symbol, str):
            return Value(self.tokens == self.symbol_id(symbol), ())
        if symbol.name in env:
            key = env[symbol.name]
            return Value((self.tokens == key) & (key >= 0), ())
        return self.onehot(self.token_keys, symbol.name)

    def symbol_id(self, symbol: str) -> int:
        return self.symbol_ids[symbol]

    def _symbol_relation(self, node: E.SymbolRelation, env) -> Value:
        free = [side.name for side in (node.left, node.right) if isinstance(side, E.Var) and side.name not in env]
        if node.op == "=" and len(free) == 1:  # `s = a` or `s = t` with t bound: one-hot in s
            other = node.right if node.left == E.Var(free[0]) else node.left
            key = np.full((1, 1), self.symbol_id(other)) if isinstance(other, str) else env[other.name]
            return self.onehot(key, free[0])
        sides, known = [], np.ones((1, 1), bool)
        for side in (node.left, node.right):
            if isinstance(side, str):
                sides.append(Value(np.full((1, 1), self.symbol_id(side)), ()))
            elif side.name in env:
                sides.append(Value(env[side.name], ()))
                known = known & (env[side.name] >= 0)  # key -1: no symbol, so no relation holds
            else:
                sides.append(Value(np.arange(self.V).reshape(1, 1, self.V), (side.name,)))
        axes, (left, right) = joint(*sides)
        holds = left == right if node.op == "=" else left < right
        return Value(holds & known.reshape(known.shape + (1,) * len(axes)), axes)

    def _const(self, node: E.BoolConst, env) -> Value:
        return Value(np.full((1, 1), node.value), ())

    def _number(self, node: E.Number, env) -> Value:
        return Value(np.full((1, 1), node.value, self.count_dtype), ())

    def _periodic(self, node: E.Periodic, env) -> Value:
        positions = np.arange(1, self.T + 1)  # BOS is position 1
        return Value((positions % node.modulus == node.residue)[None, :], ())

    def _not(self, node: E.Not, env) -> Computation[Value]:
        inner = yield self.value(node.operand, env)
        return Value(~inner.array, inner.axes)

    def _binary(self, node, env) -> Computation[Value]:
        if isinstance(node, E.Compare):
            counted = yield self._onehot_count_compared(node, env)
            if counted is not None:
                return counted
        left, right = (yield self.value(node.left, env)), (yield self.value(node.right, env))
        op = node.op if hasattr(node, "op") else node.word
        if op in ("and", "or"):
            combined = self._onehot_logic(op, left, right)
            if combined is not None:
                return combined
        axes, (left, right) = joint(left, right)
        result = _BINARY_OPS[op](left, right)
        if op in ("+", "-") and self.count_dtype == np.int64:
            self._check_range(node, left, right, result)
        return Value(result, axes)

    def _check_range(self, node: E.Arith, left: np.ndarray, right: np.ndarray, result: np.ndarray) -> None:
        """int64 wraps around silently: a sum overflowed where its sign differs from both addends'
        (a - b: from a's, where a and b differ in sign). Positions after a string do not count."""
        other = right if node.op == "+" else ~right
        wrapped = ((left ^ result) & (other ^ result)) < 0
        wrapped = wrapped & (self.tokens >= 0).reshape(self.tokens.shape + (1,) * (wrapped.ndim - 2))
        if wrapped.any():
            b, i = np.argwhere(wrapped)[0][:2]
            raise E.CraspRangeError(
                f"`{E.show(node)}` leaves the exact range of counts, -2**63 .. 2**63 - 1, at position {i + 1} "
                f"of string {self.first_string + b} (the fast evaluator computes counts as int64); "
                "keep sums of counts smaller"
            )

    def _conditional(self, node: E.Conditional, env) -> Computation[Value]:
        parts = []
        for part in (node.condition, node.if_true, node.if_false):
            parts.append((yield self.value(part, env)))
        axes, (c, a, b) = joint(*parts)
        return Value(np.where(c, a, b), axes)

    def _body_scope(self, node: E.Named, env) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """The environment of a definition's body: parameters given a literal symbol or a bound
        index are bound; the others stay free and are renamed to the caller's index names."""
        inner_env: dict[str, np.ndarray] = {}
        renames: dict[str, str] = {}
        for param, arg in zip(node.params, node.args):
            if isinstance(arg, str):
                inner_env[param] = self.bind(np.full((self.B, self.T), self.symbol_id(arg)))
            elif arg.name in env:
                inner_env[param] = env[arg.name]
            else:
                renames[param] = arg.name
        return inner_env, renames

    def _named(self, node: E.Named, env) -> Computation[Value]:
        inner_env, renames = self._body_scope(node, env)
        return renamed((yield self.value(node.body, inner_env)), renames)

    def _quantified(self, node: E.Quantified, env) -> Computation[Value]:
        name = node.index.name
        if node.kind == "any":
            bound = yield self._bind_by_conjunct(node.body, name, env)
            if bound is not None:
                return bound
        reduced = yield self._monotone_reduction(node, env)
        if reduced is not None:
            return reduced
        body = yield self.value(node.body, env)
        if name not in body.axes:
            return body
        if isinstance(body, OneHot) and node.kind == "any":
            return Value(body.key >= 0, ())
        axis = 2 + body.axes.index(name)
        reduce = np.any if node.kind == "any" else np.all
        array = body.array
        if array.shape[axis] == 1:
            array = np.broadcast_to(array, array.shape[:axis] + (self.V,) + array.shape[axis + 1 :])
        return Value(reduce(array, axis=axis), tuple(a for a in body.axes if a != name))

    def _bind_by_conjunct(self, body: E.Expr, name: str, env) -> Computation[Value | None]:
        """`any t: K[t] and rest` where K is one-hot in t: evaluate rest with t bound to K's key."""
        parts = conjuncts(body)
        for k, part in enumerate(parts):
            key = yield self.onehot_key(part, name, env)
            if key is None:
                continue
            found = key >= 0
            rest = parts[:k] + parts[k + 1 :]
            if not rest:
                return Value(found, ())
            inner = yield self.value(self.conjunction(rest), {**env, name: self.bind(key)})
            combined = self._onehot_logic("and", inner, Value(found, ()))
            if combined is not None:
                return combined
            axes, (r,) = joint(inner)
            return Value(r & found.reshape(found.shape + (1,) * len(axes)), axes)
        return None

    def _monotone_reduction(self, node: E.Quantified, env) -> Computation[Value | None]:
        """`all u: A >= B[u]` = `A >= max_u B[u]`, and the other one-sided order comparisons."""
        body, name = node.body, node.index.name
        if not isinstance(body, E.Compare) or body.op not in ("<", "<=", ">", ">="):
            return None
        op, left, right = body.op, body.left, body.right
        if name in left.free and name not in right.free:
            op, left, right = MIRRORED[op], right, left
        if name in left.free or name not in right.free:
            return None
        # `left op right[u]` for all u holds iff it holds for the extreme right[u] in op's direction.
        wants_large = op in (">", ">=")
        use_max = wants_large if node.kind == "all" else not wants_large
        reduced = values = yield self.value(right, env)
        if name in values.axes:  # else a family that ignores its argument (`d[p] := 0`): the same for every u
            axis = 2 + values.axes.index(name)
            array = values.array
            if array.shape[axis] == 1:
                extreme = np.squeeze(array, axis=axis)
            else:
                extreme = array.max(axis=axis) if use_max else array.min(axis=axis)
            reduced = Value(extreme, tuple(a for a in values.axes if a != name))
        axes, (a, b) = joint((yield self.value(left, env)), reduced)
        return Value(E.COMPARISONS[op](a, b), axes)


_BINARY_OPS = {
    "and": np.logical_and,
    "or": np.logical_or,
    "+": np.add,
    "-": np.subtract,
    "min": np.minimum,
    "max": np.maximum,
    **{op: fn for op, fn in E.COMPARISONS.items()},
}

# Rules by method name, so that an evaluator of chosen positions (crasp.selected_positions) overrides some
# and crasp.lowered_rules gives each node kind the same rule name.
RULES = {
    E.BoolConst: "_const",
    E.Token: "_token",
    E.SymbolRelation: "_symbol_relation",
    E.Not: "_not",
    E.And: "_binary",
    E.Or: "_binary",
    E.Compare: "_binary",
    E.Periodic: "_periodic",
    E.Quantified: "_quantified",
    E.CountOf: "_count",
    E.Number: "_number",
    E.Arith: "_binary",
    E.Conditional: "_conditional",
    E.NamedBool: "_named",
    E.NamedCount: "_named",
}
