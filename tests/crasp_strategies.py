"""Hypothesis strategies: random well-typed C-RASP programs and strings over a small alphabet.

The generator favours the shapes the fast evaluator rewrites (`any t: Q(t) and ...`, counts
whose body is keyed by a bound index, `all u: A >= B[u]`, families used with literal and index
arguments), so that every rewrite is compared against the reference evaluator."""

from __future__ import annotations

from hypothesis import strategies as st

from crasp import expr as E
from crasp.program import Definition, Program

ALPHABET = ("a", "b", "c")


def _symbol_arg(draw, scope):
    choices = list(ALPHABET) + [E.Var(v) for v in scope]
    return draw(st.sampled_from(choices))


def _fresh(scope, depth):
    # Unique along every path: nested quantifiers are drawn at smaller depths.
    return f"v{len(scope)}d{depth}"


@st.composite
def bool_expr(draw, scope: tuple[str, ...], depth: int, families: tuple[Definition, ...]):
    leaves = ["token", "const", "periodic", "symbol_relation"] if scope else ["token", "const", "periodic"]
    kinds = (
        leaves
        if depth <= 0
        else leaves
        + ["not", "and", "or", "compare", "compare", "quantified", "bind_any", "keyed", "family", "monotone"]
    )
    kind = draw(st.sampled_from(kinds))
    sub = depth - 1
    if kind == "token":
        return E.Token(_symbol_arg(draw, scope))
    if kind == "const":
        return E.BoolConst(draw(st.booleans()))
    if kind == "periodic":
        m = draw(st.integers(1, 3))
        return E.Periodic(m, draw(st.integers(0, m - 1)))
    if kind == "symbol_relation":
        sides = [E.Var(draw(st.sampled_from(scope))), _symbol_arg(draw, scope)]
        if draw(st.booleans()):
            sides.reverse()
        return E.SymbolRelation(draw(st.sampled_from(["=", "<"])), *sides)
    if kind == "not":
        return E.Not(draw(bool_expr(scope, sub, families)))
    if kind in ("and", "or"):
        left, right = draw(bool_expr(scope, sub, families)), draw(bool_expr(scope, sub, families))
        return E.And(left, right) if kind == "and" else E.Or(left, right)
    if kind == "compare":
        op = draw(st.sampled_from(sorted(E.COMPARISONS)))
        return E.Compare(op, draw(count_expr(scope, sub, families)), draw(count_expr(scope, sub, families)))
    if kind == "quantified":
        var = _fresh(scope, depth)
        body = draw(bool_expr(scope + (var,), sub, families))
        return E.Quantified(draw(st.sampled_from(["any", "all"])), E.Var(var), body)
    if kind == "bind_any":
        var = _fresh(scope, depth)
        key = draw(onehot_factor(scope + (var,), var))
        rest = draw(bool_expr(scope + (var,), sub, families))
        return E.Quantified("any", E.Var(var), E.And(key, rest))
    if kind == "keyed":
        # any v: Q(v) and #[j <= i] (key[v] and R) op k : a count keyed by a bound index
        var = _fresh(scope, depth)
        inner = E.And(draw(onehot_factor(scope + (var,), var)), draw(bool_expr(scope, sub, families)))
        counted = E.CountOf(inner, None)
        test = E.Compare(draw(st.sampled_from([">=", "=", ">"])), counted, E.Number(draw(st.integers(0, 2))))
        return E.Quantified("any", E.Var(var), E.And(E.Token(E.Var(var)), test))
    if kind == "monotone":
        var = _fresh(scope, depth)
        op = draw(st.sampled_from(["<", "<=", ">", ">="]))
        left = draw(count_expr(scope, sub, families))
        right = E.CountOf(E.Token(E.Var(var)), draw(st.sampled_from([None, None, 1])))
        if draw(st.booleans()):
            left, right = right, left
        return E.Quantified(draw(st.sampled_from(["any", "all"])), E.Var(var), E.Compare(op, left, right))
    usable = [f for f in families if f.body.type == E.BOOL]
    if not usable:
        return E.Token(_symbol_arg(draw, scope))
    family = draw(st.sampled_from(usable))
    return family.use(*(_symbol_arg(draw, scope) for _ in family.params))


@st.composite
def onehot_factor(draw, scope, var):
    """A Boolean that is true for exactly the symbol seen at some position (or for none)."""
    offset = draw(st.sampled_from([None, 0, 1, 2, "first"]))
    base = E.Token(E.Var(var))
    if offset is None:
        return base
    if offset == "first":  # one-hot only on the strings where it is observed to be
        seen = E.Compare(">=", E.CountOf(base, None), E.Number(1))
        return E.Compare("=", E.CountOf(seen, None), E.Number(draw(st.integers(1, 3))))
    return E.Compare(draw(st.sampled_from([">=", "="])), E.CountOf(base, offset), E.Number(1))


@st.composite
def count_expr(draw, scope: tuple[str, ...], depth: int, families: tuple[Definition, ...]):
    kinds = ["number", "count"] if depth <= 0 else ["number", "count", "count", "local", "arith", "cond", "family"]
    kind = draw(st.sampled_from(kinds))
    sub = depth - 1
    if kind == "number":
        return E.Number(draw(st.integers(-2, 3)))
    if kind == "count":
        return E.CountOf(draw(bool_expr(scope, max(sub, 0), families)), None)
    if kind == "local":
        return E.CountOf(draw(bool_expr(scope, sub, families)), draw(st.integers(0, 3)))
    if kind == "arith":
        op = draw(st.sampled_from(["+", "-", "min", "max"]))
        return E.Arith(op, draw(count_expr(scope, sub, families)), draw(count_expr(scope, sub, families)))
    if kind == "cond":
        return E.Conditional(
            draw(bool_expr(scope, sub, families)),
            draw(count_expr(scope, sub, families)),
            draw(count_expr(scope, sub, families)),
        )
    usable = [f for f in families if f.body.type == E.COUNT]
    if not usable:
        return E.Number(draw(st.integers(0, 2)))
    family = draw(st.sampled_from(usable))
    return family.use(*(_symbol_arg(draw, scope) for _ in family.params))


@st.composite
def programs(draw, max_definitions: int = 4, depth: int = 3):
    definitions: list[Definition] = []
    for k in range(draw(st.integers(1, max_definitions))):
        params = tuple(f"p{n}" for n in range(draw(st.integers(0, 2))))
        make = bool_expr if draw(st.booleans()) else count_expr
        body = draw(make(params, depth, tuple(definitions)))
        definitions.append(Definition(f"d{k}", params, body))
    definitions.append(Definition("top", (), E.BoolConst(True)))
    return Program(ALPHABET, tuple(definitions), accept="top")


def strings(min_size: int = 1, max_size: int = 7):
    return st.lists(st.sampled_from(ALPHABET), min_size=min_size, max_size=max_size)
