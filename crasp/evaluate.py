"""The fast evaluator: a program on a batch of strings at once, with numpy.

Strings are int arrays `tokens_BxT` of symbol ids in the program's alphabet, right-padded with -1
(every operation is causal, so padding after a string never changes its values).

A node's value is an array of shape (B, T, V, ..., V), one trailing axis of size V (the alphabet
size) per free index variable of the node, named in `Value.axes`; any axis may have size 1 and
broadcast. A bool family over one index that holds for one symbol at most at each position (`Q(s)`,
`s = a`, UF's output) is a `OneHot` value instead: its key, (B, T), with the array built only for a
rule that reads one (crasp.onehot_keys); `and`, `or` and `any` keep keys where the result is one-hot.
Values are memoized per node over the DAG, and the batch is evaluated in chunks whose size is chosen
from the memory the first chunk actually used.

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
Anything else falls back to dense evaluation. Prefix sums along the positions are whole-row
additions (crasp.prefix_sums). With chosen positions, `evaluate` runs everything above the counts at
those positions only (crasp.selected_positions): a teacher-forced check reads few of them.
`crasp.reference` is the independent slow evaluator the tests compare this one against.

Counts are computed in the narrowest of int16, int32 and int64 that holds every count the program
can compute on strings of the batch's length (`count_dtype`: a count is at most the length, and
sums, differences, min, max and `? :` of counts are bounded from their operands). Counts in int64
(commit 3eed295, for constants up to 2**40) made every program pay twice the memory traffic of
int32, Majority's prefix counts 1.3x slower, although almost every program's counts fit in 16
bits. Where even int64 may not hold a sum (definitions each doubling the previous one), `+` and
`-` check it at every real position of every string and raise CraspRangeError instead of
wrapping around.

Rules that need the values of other nodes are generators run by `crasp.trampoline`, so the depth
of a program (nested expressions, chains of definitions) is bounded by memory, not by Python's
recursion limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from crasp import expr as E
from crasp import onehot_keys
from crasp.compared_counts import COMPARISON_OPS, compared_count
from crasp.prefix_sums import last_occurrence, prefix_sum, sorted_occurrences
from crasp.program import Program
from crasp.trampoline import Computation, trampoline

COUNT_DTYPE = np.int64  # of a node evaluated outside a program (BatchEvaluator's default)
COUNT_DTYPES = (np.int16, np.int32, np.int64)
DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of intermediate values per chunk


@dataclass(frozen=True)
class Value:
    array: np.ndarray  # (B or 1, T or 1, *[V or 1] * len(axes))
    axes: tuple[str, ...]  # index variable of each trailing axis, sorted

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    @property
    def rows(self) -> int:
        return self.array.shape[0]


class OneHot(Value):
    """A bool family over one index, true at each position for the symbol `key` names alone (none where
    key < 0): kept as the key (B or 1, T or 1); `array`, the (.., V) mask, is built for a rule that reads it."""

    def __init__(self, key: np.ndarray, name: str, V: int):
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "axes", (name,))
        object.__setattr__(self, "V", V)

    @cached_property
    def array(self) -> np.ndarray:
        return onehot_keys.dense(self.key, self.V)

    @property
    def nbytes(self) -> int:
        return self.key.nbytes + (self.__dict__["array"].nbytes if "array" in self.__dict__ else 0)

    @property
    def rows(self) -> int:
        return self.key.shape[0]


def align(value: Value, axes: tuple[str, ...]):
    """The value's array with trailing axes in the order `axes` (missing ones of size 1). Written
    with the array's own methods, so that it serves NumPy arrays here and JAX's in crasp.lowered."""
    array = value.array
    order = [value.axes.index(a) for a in axes if a in value.axes]
    if order != sorted(order):
        array = array.transpose((0, 1, *(2 + k for k in order)))
    shape = list(array.shape[:2])
    present = iter(array.shape[2:])
    for a in axes:
        shape.append(next(present) if a in value.axes else 1)
    return array.reshape(tuple(shape))


def joint(*values: Value) -> tuple[tuple[str, ...], list]:
    """The union of the values' index axes, sorted, and each value's array aligned to it."""
    axes = tuple(sorted(set().union(*(v.axes for v in values))))
    return axes, [align(v, axes) for v in values]


def _shift_right(array: np.ndarray, offset: int, fill) -> np.ndarray:
    """Along the position axis: out[:, i] = array[:, i - offset], `fill` where i - offset < 0."""
    if offset == 0:
        return array
    out = np.full_like(array, fill)
    if offset < array.shape[1]:
        out[:, offset:] = array[:, :-offset]
    return out


def _shift_left(array: np.ndarray, offset: int, fill) -> np.ndarray:
    """out[:, j] = array[:, j + offset]: the key of the position `offset` later."""
    if offset == 0:
        return array
    out = np.full_like(array, fill)
    if offset < array.shape[1]:
        out[:, :-offset] = array[:, offset:]
    return out


def keyed_prefix_sum(
    keys_BxT: np.ndarray, values: np.ndarray, queries_BxT: np.ndarray, dtype=COUNT_DTYPE
) -> np.ndarray:
    """out[b, i] = sum of values[b, j] over j <= i with keys[b, j] == queries[b, i] (keys < 0 never match).

    values has shape (B, T, ...); the result has the same shape, in `dtype`, which must hold every such
    sum. The positions are sorted by (string, key, position) and summed in one running sum over all
    of them; a position reads its (string, key) group's part of it, a difference of two running sums.
    The running sum may wrap around in a narrow dtype; the difference is exact in modular arithmetic
    and lies in the dtype's range, so it is the exact sum."""
    B, T = keys_BxT.shape
    rest = values.shape[2:]
    n_keys = int(max(keys_BxT.max(initial=-1), queries_BxT.max(initial=-1))) + 1
    codes, batch, position, rank = sorted_occurrences(keys_BxT, n_keys)
    running = np.take(values.reshape(B * T, -1), batch * T + position, axis=0)
    # A zero row last: index -1 reads zero, for a position without an occurrence of its query and
    # for the running sum before a group that starts the order.
    running = np.concatenate([prefix_sum(running[None], dtype)[0], np.zeros((1, running.shape[1]), dtype)])
    found, hit = last_occurrence(codes, queries_BxT, n_keys)
    last = np.where(hit, found, -1)
    before_group = np.where(hit, found - rank[found] if len(codes) else -1, -1)
    within = np.take(running, last, axis=0) - np.take(running, before_group, axis=0)
    return within.reshape((B, T) + rest)


def conjuncts(node: E.Expr) -> list[E.Expr]:
    """The operands of a chain of `and`, left to right (a loop: chains may be thousands long)."""
    found, stack = [], [node]
    while stack:
        part = stack.pop()
        if isinstance(part, E.And):
            stack += [part.right, part.left]
        else:
            found.append(part)
    return found


_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}  # a op b == b _MIRRORED[op] a
_MEANS_ONE = {(">=", 1), (">", 0), ("!=", 0), ("=", 1)}  # for a 0/1-valued local count


class BatchEvaluator:
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

    @cached_property
    def token_keys(self) -> np.ndarray:
        return self.tokens.astype(self.key_dtype)

    def onehot(self, key_BxT: np.ndarray, name: str) -> Value:
        """The family over `name` true for the symbol key(i) alone at each position, kept as its key."""
        return OneHot(key_BxT.astype(self.key_dtype, copy=False), name, self.V)

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
        return _rename((yield self.value(node.body, inner_env)), renames)

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

    # ------------------------------------------------------------ one-hot families (crasp.onehot_keys)
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

    def _onehot_count_compared(self, node: E.Compare, env) -> Computation[Value | None]:
        """`#[j <= i] (R(s) and K[t]) op n` with `0 op n` false, R one-hot in the free index s and K in the
        index t bound at i (or no K). Where every (string, t) group's j hold one symbol, the count of any
        other s is 0, so `op n` fails for it: the family is one-hot, true for the group's symbol where the
        group's count op n holds. That count is one per position, (B, T), not one per symbol."""
        compared = _count_against_number(node)
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

    def _monotone_reduction(self, node: E.Quantified, env) -> Computation[Value | None]:
        """`all u: A >= B[u]` = `A >= max_u B[u]`, and the other one-sided order comparisons."""
        body, name = node.body, node.index.name
        if not isinstance(body, E.Compare) or body.op not in ("<", "<=", ">", ">="):
            return None
        op, left, right = body.op, body.left, body.right
        if name in left.free and name not in right.free:
            op, left, right = _MIRRORED[op], right, left
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

    def _count(self, node: E.CountOf, env) -> Computation[Value]:
        depends = sorted(name for name in node.body.free if name in env)
        if node.offset is not None:
            # The body is read at j = i - c with the indices bound at i: shift the keys, then the value.
            shifted_env = {n: self.bind(_shift_left(env[n], node.offset, -1)) for n in depends}
            body = yield self.value(node.body, shifted_env)
            array = np.broadcast_to(body.array, (body.array.shape[0], self.T) + body.array.shape[2:])
            return Value(_shift_right(array.astype(self.count_dtype), node.offset, 0), body.axes)
        if not depends:
            body = yield self.value(node.body, env)
            array = np.broadcast_to(body.array, (body.array.shape[0], self.T) + body.array.shape[2:])
            return Value(prefix_sum(array, self.count_dtype), body.axes)
        keyed = yield self._keyed_count(node.body, depends, env)
        if keyed is None:
            keyed = yield self._compared_count(node.body, depends, env)
        return keyed if keyed is not None else (yield self._dense_count_then_select(node.body, depends, env))

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
            (free, free_key), (bound, bound_key), op = (bound, bound_key), (free, free_key), _MIRRORED[op]
        if bound not in env or free == bound:
            return None
        counts = compared_count(free_key, bound_key, env[bound], op, self.V, self.count_dtype)
        if free in env:
            return Value(_select(counts, 0, env[free], self.V), ())
        return Value(counts, (free,))

    def _dense_count_then_select(self, body: E.Expr, depends: list[str], env) -> Computation[Value]:
        free_env = {n: k for n, k in env.items() if n not in depends}
        dense = yield self.value(body, free_env)
        array = np.broadcast_to(dense.array, (self.B, self.T) + dense.array.shape[2:])
        counts = prefix_sum(array, self.count_dtype)
        axes = dense.axes
        for name in depends:
            if name not in axes:
                continue
            counts = _select(counts, axes.index(name), env[name], self.V)
            axes = tuple(a for a in axes if a != name)
        return Value(counts, axes)

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
        local = _count_against_number(node)
        if local is not None and local[0].offset is not None and (local[2], local[1].value) in _MEANS_ONE:
            offset = local[0].offset
            shifted_env = {n: self.bind(_shift_left(k, offset, -1)) for n, k in env.items()}
            inner = yield self.onehot_key(local[0].body, name, shifted_env)
            return None if inner is None else _shift_right(inner, offset, -1)
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


def _count_against_number(node: E.Expr) -> tuple[E.CountOf, E.Number, str] | None:
    """`count op n` or `n op count` as (count, n, op) with the count on the left; None for other nodes."""
    if not isinstance(node, E.Compare):
        return None
    count, number, op = node.left, node.right, node.op
    if isinstance(count, E.Number):
        count, number, op = number, count, _MIRRORED[op]
    return (count, number, op) if isinstance(count, E.CountOf) and isinstance(number, E.Number) else None


def _select(array: np.ndarray, k: int, key_BxT: np.ndarray, V: int) -> np.ndarray:
    """The k-th trailing (symbol, size V or 1) axis of `array` taken at key (B, T) per position; 0 where key < 0."""
    axis = 2 + k
    array = np.broadcast_to(array, array.shape[:axis] + (V,) + array.shape[axis + 1 :])
    index = np.maximum(key_BxT, 0).reshape(key_BxT.shape + (1,) * (array.ndim - 2))
    picked = np.squeeze(np.take_along_axis(array, index, axis=axis), axis=axis)
    valid = (key_BxT >= 0).reshape(key_BxT.shape + (1,) * (picked.ndim - 2))
    return np.where(valid, picked, 0)


def _rename(value: Value, renames: dict[str, str]) -> Value:
    """Rename parameter axes to the caller's index names (merging two onto one takes the diagonal)."""
    if not renames:
        return value
    if isinstance(value, OneHot):
        return OneHot(value.key, renames.get(value.axes[0], value.axes[0]), value.V)
    array, axes = value.array, [renames.get(a, a) for a in value.axes]
    while len(set(axes)) < len(axes):
        name = next(a for a in axes if axes.count(a) > 1)
        first, second = [k for k, a in enumerate(axes) if a == name][:2]
        array = np.diagonal(array, axis1=2 + first, axis2=2 + second)
        array = np.moveaxis(array, -1, 2 + first)
        del axes[second]
    order = sorted(range(len(axes)), key=lambda k: axes[k])
    array = np.transpose(array, (0, 1, *(2 + k for k in order)))
    return Value(array, tuple(axes[k] for k in order))


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


def count_bound(program: Program, length: int) -> int:
    """The largest magnitude any count of the program can take on a string of `length` positions."""
    bounds: dict[int, int] = {}
    for definition in program.definitions:  # dependency order: a use's body is bounded before it
        for node in E.walk(definition.body, into_definitions=False):
            if isinstance(node, E.CountOf):
                bounds[id(node)] = length if node.offset is None else 1
            elif isinstance(node, E.Number):
                bounds[id(node)] = abs(node.value)
            elif isinstance(node, E.Arith):
                left, right = bounds[id(node.left)], bounds[id(node.right)]
                bounds[id(node)] = left + right if node.op in "+-" else max(left, right)
            elif isinstance(node, E.Conditional):
                bounds[id(node)] = max(bounds[id(node.if_true)], bounds[id(node.if_false)])
            elif isinstance(node, E.NamedCount):
                bounds[id(node)] = bounds[id(node.body)]
    return max(bounds.values(), default=0)


def count_dtype(program: Program, length: int) -> type[np.signedinteger]:
    """The narrowest integer type that holds every count of the program on strings of `length`
    positions; int64 where none provably does (then `+` and `-` check for overflow)."""
    bound = count_bound(program, length)
    return next((t for t in COUNT_DTYPES if bound <= np.iinfo(t).max), np.int64)


def _at_positions(whole: BatchEvaluator, positions_BxT: np.ndarray) -> BatchEvaluator:
    from crasp.selected_positions import SelectedEvaluator  # which imports this module

    return SelectedEvaluator(whole, *np.nonzero(positions_BxT))


def _memo_bytes(evaluator: BatchEvaluator) -> int:
    return sum(v.nbytes for v in evaluator.memo.values() if v.rows == evaluator.B)


def evaluate(
    program: Program,
    tokens_BxT: np.ndarray,
    names: list[str] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    positions_BxT: np.ndarray | None = None,
) -> dict[str, Value]:
    """Values of the named definitions (all, or `names`) on every string, with free parameters as axes.

    A family `f[p]` is returned with its parameter axes named by the parameters. With positions (a bool
    mask like tokens), only the values at those positions: arrays (positions, ...) in the order of
    np.nonzero(positions), evaluated there alone where the program allows (crasp.selected_positions)."""
    tokens_BxT = np.asarray(tokens_BxT)
    if tokens_BxT.ndim != 2:
        raise ValueError(f"tokens must be a (batch, positions) array of symbol ids, got shape {tokens_BxT.shape}")
    V = len(program.alphabet)
    if tokens_BxT.size and (tokens_BxT.max() >= V or tokens_BxT.min() < -1):
        raise ValueError(f"token ids must lie in 0..{V - 1} (the alphabet) or be -1 (padding)")
    if positions_BxT is not None and np.shape(positions_BxT) != tokens_BxT.shape:
        raise ValueError(
            f"positions must be a bool mask of the tokens' shape {tokens_BxT.shape}, got {np.shape(positions_BxT)}"
        )
    chosen = [program.definition(n) for n in (names or program.names)]
    # Values are memoized by node id: each definition's use is built once and kept alive throughout.
    uses = [(d, d.use(*(E.Var(p) for p in d.params)), tuple(sorted(d.params))) for d in chosen]
    # Each chunk's values are written into arrays for the whole batch (a concatenation of UF's output at
    # the positions a check reads, 231 MB for 10,000 strings, took a fifth of the check).
    results: dict[str, np.ndarray] = {}
    axes: dict[str, tuple[str, ...]] = {}
    rows = len(tokens_BxT) if positions_BxT is None else int(np.count_nonzero(positions_BxT))
    start, chunk, done = 0, min(8, max(1, len(tokens_BxT))), 0
    ids = program.symbol_ids()
    dtype = count_dtype(program, tokens_BxT.shape[1])
    while start < len(tokens_BxT):
        whole = BatchEvaluator(tokens_BxT[start : start + chunk], ids, first_string=start, count_dtype=dtype)
        evaluator = whole if positions_BxT is None else _at_positions(whole, positions_BxT[start : start + chunk])
        for d, use, params in uses:
            value = trampoline(evaluator.value(use, {}))
            key = None
            if isinstance(value, OneHot) and value.axes == params:  # written from its key, never as a mask
                key = np.broadcast_to(value.key, (evaluator.B, evaluator.T))
                key = key if positions_BxT is None else key[:, 0]
                shape, kind = key.shape + (V,), np.dtype(bool)
            else:
                value = evaluator.full(use, params)
                array = value.array if positions_BxT is None else value.array[:, 0]
                # Counts leave as int64 whatever type computed them: callers do arithmetic on them.
                shape, kind = array.shape, np.dtype(np.int64) if d.body.type == E.COUNT else array.dtype
            if d.name not in results:
                results[d.name] = np.empty((rows,) + shape[1:], kind)
            out = results[d.name][done : done + shape[0]]
            if key is None:
                out[...] = array
            else:
                out[...] = False
                hit = np.nonzero(key >= 0)
                out[hit + (key[hit],)] = True
            axes[d.name] = value.axes
        done += evaluator.B
        start += chunk
        # Size the next chunks from what this one really held: several times the memoized values.
        held = _memo_bytes(whole) + (_memo_bytes(evaluator) if evaluator is not whole else 0)
        per_string = 4 * held / max(whole.B, 1) + 1
        chunk = int(max(1, min(memory_budget // per_string, 4096)))
    return {d.name: Value(results.get(d.name, np.zeros((0,))), axes.get(d.name, ())) for d in chosen}
