"""The slow reference evaluator, written as the definitions read: loops over positions.

It exists to test `crasp.evaluate` (fast, vectorized, with rewrites) against an independent
reading of the semantics in shared/spec/crasp.md. It shares no evaluation code with it.
"""

from __future__ import annotations

from functools import lru_cache

from crasp import expr as E
from crasp.program import Program


def reference_value(program: Program, symbols: list[str], node: E.Expr, position: int,
                    bindings: dict[str, str]) -> bool | int:
    """The value of `node` at 1-based `position` of the string `symbols`, with every free index
    bound to a symbol in `bindings`."""
    string = tuple(symbols)
    alphabet = program.alphabet

    @lru_cache(maxsize=None)
    def at(node: E.Expr, i: int, env: tuple[tuple[str, str], ...]):
        scope = dict(env)

        def symbol_of(arg):
            return scope[arg.name] if isinstance(arg, E.Var) else arg

        def sub(child, where=i, extra=None):
            merged = dict(scope, **(extra or {}))
            return at(child, where, tuple(sorted((k, v) for k, v in merged.items() if k in child.free)))

        if isinstance(node, E.BoolConst):
            return node.value
        if isinstance(node, E.Token):
            return string[i - 1] == symbol_of(node.symbol)
        if isinstance(node, E.SymbolRelation):
            left, right = alphabet.index(symbol_of(node.left)), alphabet.index(symbol_of(node.right))
            return left == right if node.op == "=" else left < right
        if isinstance(node, E.Not):
            return not sub(node.operand)
        if isinstance(node, E.And):
            return sub(node.left) and sub(node.right)
        if isinstance(node, E.Or):
            return sub(node.left) or sub(node.right)
        if isinstance(node, E.Compare):
            return E.COMPARISONS[node.op](sub(node.left), sub(node.right))
        if isinstance(node, E.Periodic):
            return i % node.modulus == node.residue
        if isinstance(node, E.Quantified):
            results = (sub(node.body, extra={node.index.name: a}) for a in alphabet)
            return any(results) if node.kind == "any" else all(results)
        if isinstance(node, E.CountOf):
            if node.offset is None:
                return sum(1 for j in range(1, i + 1) if sub(node.body, where=j))
            j = i - node.offset
            return 1 if j >= 1 and sub(node.body, where=j) else 0
        if isinstance(node, E.Number):
            return node.value
        if isinstance(node, E.Arith):
            a, b = sub(node.left), sub(node.right)
            return {"+": a + b, "-": a - b, "min": min(a, b), "max": max(a, b)}[node.op]
        if isinstance(node, E.Conditional):
            return sub(node.if_true) if sub(node.condition) else sub(node.if_false)
        if isinstance(node, E.Named):
            inner = {p: symbol_of(a) for p, a in zip(node.params, node.args)}
            return at(node.body, i, tuple(sorted((k, v) for k, v in inner.items() if k in node.body.free)))
        raise TypeError(f"not a C-RASP node: {node!r}")

    return at(node, position, tuple(sorted((k, v) for k, v in bindings.items() if k in node.free)))
