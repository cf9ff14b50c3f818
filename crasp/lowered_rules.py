"""The rules by which crasp.lowered turns a program's nodes into JAX array operations.

A `Lowering` walks the program DAG inside a `jax.jit` trace and emits, for each node, the operations
that compute its value on a whole batch: a node's value is an array (B, T, V, ..., V) with one axis
per free index variable (named in `Value.axes`, sorted; an axis may have size 1 and broadcast), as in
crasp.evaluate. The walk runs once per compiled shape; what it leaves is one XLA program.

Dense evaluation is the baseline: a node costs (B, T) times V per free index variable. Three rewrites of
crasp.evaluate carry over, because they follow from the program's structure alone (evaluate's others
read the batch's values, or walk segments between occurrences, which a traced function cannot do):
- `any t: K(t) and rest` with K one-hot in t (`Q(t)`, `t = x`, `prev[t]`-style local counts, their
  conjunctions): rest is evaluated with t bound to K's key, a (B, T) array of symbol ids (-1: none),
  so rest's arrays lose their t axis: `Q(t)` becomes a comparison with the key, not a (B, T, V) table.
- a count whose body is `K(t) and R` with K one-hot in t, t bound at i, is a keyed prefix sum: the
  R(j) of the j whose key is t(i), summed in sorted order (crasp.lowered_arrays), (B, T) times R's size.
  Any other count whose body reads an index bound at i is counted densely over that index, then
  read at the bound symbol by a gather: (B, T, V) per bound index.
- `all u: A >= B[u]` (and the other one-sided comparisons) is `A >= max_u B[u]`.

Counts are in the count type crasp.lowered picks (int16, int32, or int64 under a scoped jax.enable_x64);
in int64, each `+` and `-` records where it wrapped around (`wraps`), so the caller can refuse the
value as crasp.evaluate does. Rules that need other values are generators run by crasp.trampoline,
so programs nested deeper than Python's recursion limit lower too.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from crasp import expr as E

# The rules carry crasp.batch_evaluator's names, so its table of rules by node type serves here too.
from crasp.batch_evaluator import RULES
from crasp.lowered_arrays import keyed_prefix_sum, prefix_sum, reduced, shifted
from crasp.node_patterns import MEANS_ONE, conjuncts
from crasp.trampoline import Computation, trampoline
from crasp.values import Value, align, joint, renamed

INT32_MAX = int(np.iinfo(np.int32).max)
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}  # a op b == b _MIRRORED[op] a


_COMBINE = {
    "and": jnp.logical_and,
    "or": jnp.logical_or,
    "+": jnp.add,
    "-": jnp.subtract,
    "min": jnp.minimum,
    "max": jnp.maximum,
    **E.COMPARISONS,
}


class Lowering:
    """Emits the operations of a program's nodes on one traced batch `tokens_BxT` (int32 symbol ids, -1 padding)."""

    def __init__(self, tokens_BxT, V: int, symbol_ids: dict[str, int], count_dtype, check_wraps: bool):
        self.tokens = tokens_BxT
        self.B, self.T = tokens_BxT.shape
        self.V = V
        self.symbol_ids = symbol_ids
        self.count_dtype = count_dtype
        self.check_wraps = check_wraps
        self.wraps: list[tuple[E.Arith, object]] = []  # (node, (B, T) bool: wrapped there), in lowering order
        self.memo: dict[tuple, Value] = {}
        self.keys_alive: list = []  # bound keys whose id() is part of a memo key
        self.constants: dict[str, object] = {}  # the key of each literal symbol, shared by every use

    def output(self, node: E.Expr, axes: tuple[str, ...]):
        """The node's value as a (B, T, V, ...) array, one axis per name in `axes`."""
        array = align(trampoline(self.value(node, {})), axes)
        return jnp.broadcast_to(array, (self.B, self.T) + (self.V,) * len(axes))

    def value(self, node: E.Expr, env: dict) -> Computation[Value]:
        used = {name: env[name] for name in sorted(node.free) if name in env}
        key = (id(node), tuple((name, id(k)) for name, k in used.items()))
        found = self.memo.get(key)
        if found is None:
            found = getattr(self, RULES[type(node)])(node, used)
            if not isinstance(found, Value):  # the rule needs other values: a generator
                found = yield found
            self.memo[key] = found
        return found

    def bound(self, key_BxT):
        """A key that an index is bound to, kept alive for its id. A key is -1 (no symbol) only where
        nothing reads what it selects: where the one-hot conjunct that bound it is false (the value is
        masked), or past the end of the positions a local count reads."""
        key_BxT = jnp.broadcast_to(key_BxT, (self.B, self.T))
        self.keys_alive.append(key_BxT)
        return key_BxT

    def constant_key(self, symbol: str):
        if symbol not in self.constants:
            self.constants[symbol] = self.bound(jnp.full((self.B, self.T), self.symbol_ids[symbol], jnp.int32))
        return self.constants[symbol]

    # ------------------------------------------------------------ leaves
    def _const(self, node: E.BoolConst | E.Number, env) -> Value:
        """`true`, `false` or a count constant: one value for every position."""
        return Value(jnp.full((1, 1), node.value, bool if node.type == E.BOOL else self.count_dtype), ())

    _number = _const

    def _periodic(self, node: E.Periodic, env) -> Value:
        # A constant of the compiled shape, computed here in int64: m and r reach 2**40, past int32.
        positions = np.arange(1, self.T + 1)  # BOS is position 1
        return Value(jnp.asarray(positions % node.modulus == node.residue)[None, :], ())

    def _token(self, node: E.Token, env) -> Value:
        symbol = node.symbol
        if isinstance(symbol, str):
            return Value(self.tokens == self.symbol_ids[symbol], ())
        if symbol.name in env:
            return Value(self.tokens == env[symbol.name], ())
        return Value(self.tokens[:, :, None] == jnp.arange(self.V), (symbol.name,))

    def _symbol_relation(self, node: E.SymbolRelation, env) -> Value:
        sides = []
        for side in (node.left, node.right):
            if isinstance(side, str):
                sides.append(Value(jnp.full((1, 1), self.symbol_ids[side]), ()))
            elif side.name in env:
                sides.append(Value(env[side.name], ()))
            else:
                sides.append(Value(jnp.arange(self.V).reshape(1, 1, self.V), (side.name,)))
        axes, (left, right) = joint(*sides)
        return Value(left == right if node.op == "=" else left < right, axes)

    # ------------------------------------------------------------ operators
    def _not(self, node: E.Not, env) -> Computation[Value]:
        inner = yield self.value(node.operand, env)
        return Value(~inner.array, inner.axes)

    def _binary(self, node, env) -> Computation[Value]:
        left, right = (yield self.value(node.left, env)), (yield self.value(node.right, env))
        axes, (a, b) = joint(left, right)
        op = getattr(node, "op", None) or node.word
        result = _COMBINE[op](a, b)
        if self.check_wraps and op in ("+", "-"):
            self._record_wraps(node, a, b, result)
        return Value(result, axes)

    def _record_wraps(self, node: E.Arith, a, b, result) -> None:
        """Where an int64 sum left the range: its sign differs from both addends' (a - b: from a's and
        from that of ~b). Only the real positions of strings count."""
        other = b if node.op == "+" else ~b
        wrapped = jnp.broadcast_to(((a ^ result) & (other ^ result)) < 0, (self.B, self.T) + result.shape[2:])
        wrapped = wrapped.reshape(self.B, self.T, -1).any(axis=2) & (self.tokens >= 0)
        self.wraps.append((node, wrapped))

    def _conditional(self, node: E.Conditional, env) -> Computation[Value]:
        parts = []
        for part in (node.condition, node.if_true, node.if_false):
            parts.append((yield self.value(part, env)))
        axes, (c, a, b) = joint(*parts)
        return Value(jnp.where(c, a, b), axes)

    def _named(self, node: E.Named, env) -> Computation[Value]:
        inner_env, renames = self.body_scope(node, env)
        return renamed((yield self.value(node.body, inner_env)), renames)

    def body_scope(self, node: E.Named, env) -> tuple[dict, dict[str, str]]:
        """A definition's parameters given a symbol or a bound index are bound in its body; the others
        stay free, renamed to the caller's index names."""
        given = dict(zip(node.params, node.args))
        free = {param: arg.name for param, arg in given.items() if isinstance(arg, E.Var) and arg.name not in env}
        inner_env = {
            param: self.constant_key(arg) if isinstance(arg, str) else env[arg.name]
            for param, arg in given.items()
            if param not in free
        }
        return inner_env, free

    # ------------------------------------------------------------ quantifiers
    def _quantified(self, node: E.Quantified, env) -> Computation[Value]:
        rewrites = [self._extreme_compared] if node.kind == "all" else [self._bound_by_conjunct, self._extreme_compared]
        for rewrite in rewrites:
            rewritten = yield rewrite(node, env)
            if rewritten is not None:
                return rewritten
        body = yield self.value(node.body, env)
        return reduced(body, node.index.name, jnp.any if node.kind == "any" else jnp.all)

    def _bound_by_conjunct(self, node: E.Quantified, env) -> Computation[Value | None]:
        """`any t: K(t) and rest`, K one-hot in t: rest with t bound to K's key, false where K has none."""
        name, parts = node.index.name, conjuncts(node.body)
        for k, part in enumerate(parts):
            key = yield self.onehot_key(part, name, env)
            if key is not None:
                rest = _conjunction(parts[:k] + parts[k + 1 :] or [E.TRUE])
                inner = yield self.value(rest, {**env, name: self.bound(key)})
                found = (key >= 0).reshape(key.shape + (1,) * len(inner.axes))
                return Value(inner.array & found, inner.axes)
        return None

    def _extreme_compared(self, node: E.Quantified, env) -> Computation[Value | None]:
        """`all u: A >= B[u]` is `A >= max_u B[u]`; likewise the other one-sided comparisons and `any`."""
        name, body = node.index.name, node.body
        if not isinstance(body, E.Compare) or body.op not in _MIRRORED:
            return None
        if (name in body.left.free) == (name in body.right.free):
            return None  # the index on both sides, or on neither: no extreme decides
        on_left = name in body.left.free
        op, left, right = (_MIRRORED[body.op], body.right, body.left) if on_left else (body.op, body.left, body.right)
        wants_large = op in (">", ">=")
        extreme = reduced(
            (yield self.value(right, env)), name, jnp.max if wants_large == (node.kind == "all") else jnp.min
        )
        axes, (a, b) = joint((yield self.value(left, env)), extreme)
        return Value(E.COMPARISONS[op](a, b), axes)

    # ------------------------------------------------------------ counts
    def _count(self, node: E.CountOf, env) -> Computation[Value]:
        if node.offset is not None:
            # The body at j = i - c, with the indices bound at i: the keys move c later, then the value back.
            moved = {n: self.bound(shifted(k, node.offset, -1, later=False)) for n, k in env.items()}
            body = yield self.value(node.body, moved)
            array = jnp.broadcast_to(body.array, body.array.shape[:1] + (self.T,) + body.array.shape[2:])
            return Value(shifted(array.astype(self.count_dtype), node.offset, 0, later=True), body.axes)
        if env:
            keyed = yield self._keyed_count(node.body, env)
            if keyed is not None:
                return keyed
        # Indices bound at i are counted densely over j, then read at i's symbol: (B, T, V) per index.
        body = yield self.value(node.body, {})
        array = jnp.broadcast_to(body.array, (self.B, self.T) + body.array.shape[2:])
        counts, axes = prefix_sum(array, self.count_dtype), body.axes
        for name, key in env.items():
            axis = 2 + axes.index(name)
            index = key.reshape(key.shape + (1,) * (counts.ndim - 2))
            picked = jnp.take_along_axis(
                jnp.broadcast_to(counts, counts.shape[:axis] + (self.V,) + counts.shape[axis + 1 :]), index, axis=axis
            )
            counts = jnp.squeeze(picked, axis)
            axes = tuple(a for a in axes if a != name)
        return Value(counts, axes)

    def _keyed_count(self, body: E.Expr, env) -> Computation[Value | None]:
        """`#[j <= i] (K(t) and R)` with K one-hot in t (t bound at i) and R free of the bound indices:
        the R(j) of the j whose key is t(i), summed in sorted order (crasp.lowered_arrays)."""
        keyed: dict[str, list[E.Expr]] = {name: [] for name in env}
        rest: list[E.Expr] = []
        for part in conjuncts(body):
            uses = [name for name in env if name in part.free]
            if len(uses) > 1:
                return None
            (keyed[uses[0]] if uses else rest).append(part)
        groups = self.V ** len(env)
        if (groups + 1) * self.T > INT32_MAX:  # the sort codes (key, position) are int32
            return None
        code, query = jnp.zeros((self.B, self.T), jnp.int32), jnp.zeros((self.B, self.T), jnp.int32)
        for name, parts in keyed.items():
            key = yield self.onehot_key(_conjunction(parts), name, {})
            if key is None:
                return None
            code = jnp.where((code >= 0) & (key >= 0), code * self.V + key, -1)
            query = query * self.V + env[name]  # a bound key < 0 is read nowhere (see bound())
        weights = (yield self.value(_conjunction(rest), {})) if rest else Value(jnp.ones((1, 1), bool), ())
        array = jnp.broadcast_to(weights.array, (self.B, self.T) + weights.array.shape[2:])
        return Value(keyed_prefix_sum(code, array, query, groups, self.count_dtype), weights.axes)

    # ------------------------------------------------------------ one-hot keys
    def onehot_key(self, node: E.Expr, name: str, env) -> Computation[object | None]:
        """If node, as a family over `name`, is true for t = key(i) alone (for none where key < 0), by its
        structure: key as a (B, T) array; else None. Its other indices must be bound in env."""
        if name not in node.free or not (node.free - {name}) <= set(env):
            return None
        if isinstance(node, E.Token):
            return self.tokens
        if isinstance(node, E.SymbolRelation):
            if node.op != "=" or node.left == node.right:
                return None
            other = node.right if node.left == E.Var(name) else node.left
            return self.constant_key(other) if isinstance(other, str) else env[other.name]
        if isinstance(node, E.Compare):
            return (yield self._seen_key(node, name, env))
        if isinstance(node, E.And):
            return (yield self._conjoined_key(node, name, env))
        if isinstance(node, E.Named):
            inner_env, renames = self.body_scope(node, env)
            if list(renames.values()) == [name]:
                return (yield self.onehot_key(node.body, next(iter(renames)), inner_env))
        return None

    def _seen_key(self, node: E.Compare, name: str, env) -> Computation[object | None]:
        """`#[j <= i, j = i - c] K(t) >= 1` (or = 1, ...): K's key c positions back."""
        count, constant = node.left, node.right
        if not (
            isinstance(count, E.CountOf)
            and count.offset is not None
            and isinstance(constant, E.Number)
            and (node.op, constant.value) in MEANS_ONE
        ):
            return None
        moved = {n: self.bound(shifted(k, count.offset, -1, later=False)) for n, k in env.items()}
        key = yield self.onehot_key(count.body, name, moved)
        return None if key is None else shifted(key, count.offset, -1, later=True)

    def _conjoined_key(self, node: E.And, name: str, env) -> Computation[object | None]:
        """`K(t) and L(t)`: both keys where they agree; `K(t) and R` with R free of t: K's key where R holds."""
        keys = []
        for side in (node.left, node.right):
            keys.append((yield self.onehot_key(side, name, env)) if name in side.free else None)
        left, right = keys
        if left is not None and right is not None:
            return jnp.where(left == right, left, -1)
        key, other = (left, node.right) if left is not None else (right, node.left)
        if key is None or name in other.free or not other.free <= set(env):
            return None
        holds = jnp.broadcast_to((yield self.value(other, env)).array, key.shape)
        return jnp.where(holds, key, -1)


def _conjunction(parts: list[E.Expr]) -> E.Expr:
    """`parts[0] and parts[1] and ...`: an interned node, alive as long as the program, so its id keys the memo."""
    return functools.reduce(E.And, parts)


def value_bytes(lowering: Lowering) -> int:
    """The bytes of every value the lowering made (an upper bound on what its compiled function holds)."""
    return sum(int(np.prod(v.array.shape)) * v.array.dtype.itemsize for v in lowering.memo.values())
