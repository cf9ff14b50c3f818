"""The slow reference evaluator, written as the definitions read: loops over positions.

It exists to test `crasp.evaluate` (fast, vectorized, with rewrites) against an independent
reading of the semantics of C-RASP. It shares no evaluation code with it. Counts are Python
integers, exact at any size. Sub-expressions are evaluated through `crasp.trampoline` (each
`yield` is a recursive call), so programs nested deeper than Python's recursion limit work too.
"""

from __future__ import annotations

from crasp import expr as E
from crasp.program import Program
from crasp.trampoline import Computation, trampoline

Env = tuple[tuple[str, str], ...]  # the bound index variables a node uses, sorted


def reference_value(
    program: Program, symbols: list[str], node: E.Expr, position: int, bindings: dict[str, str]
) -> bool | int:
    """The value of `node` at 1-based `position` of the string `symbols`, with every free index
    bound to a symbol in `bindings`."""
    string = tuple(symbols)
    alphabet = program.alphabet
    memo: dict[tuple[int, int, Env], bool | int] = {}

    def restrict(child: E.Expr, scope: dict[str, str]) -> Env:
        return tuple(sorted((k, v) for k, v in scope.items() if k in child.free))

    def at(node: E.Expr, i: int, env: Env) -> Computation[bool | int]:
        key = (id(node), i, env)
        if key not in memo:
            memo[key] = yield compute(node, i, env)
        return memo[key]

    def compute(node: E.Expr, i: int, env: Env) -> Computation[bool | int]:
        scope = dict(env)

        def symbol_of(arg):
            return scope[arg.name] if isinstance(arg, E.Var) else arg

        def sub(child, where=i, extra=None):
            return at(child, where, restrict(child, dict(scope, **(extra or {}))))

        if isinstance(node, E.BoolConst):
            return node.value
        if isinstance(node, E.Token):
            return string[i - 1] == symbol_of(node.symbol)
        if isinstance(node, E.SymbolRelation):
            left, right = alphabet.index(symbol_of(node.left)), alphabet.index(symbol_of(node.right))
            return left == right if node.op == "=" else left < right
        if isinstance(node, E.Not):
            return not (yield sub(node.operand))
        if isinstance(node, E.And):
            return (yield sub(node.left)) and (yield sub(node.right))
        if isinstance(node, E.Or):
            return (yield sub(node.left)) or (yield sub(node.right))
        if isinstance(node, E.Compare):
            return E.COMPARISONS[node.op]((yield sub(node.left)), (yield sub(node.right)))
        if isinstance(node, E.Periodic):
            return i % node.modulus == node.residue
        if isinstance(node, E.Quantified):
            decisive = node.kind == "any"  # `any` stops at the first true body, `all` at the first false
            for a in alphabet:
                if (yield sub(node.body, extra={node.index.name: a})) == decisive:
                    return decisive
            return not decisive
        if isinstance(node, E.CountOf):
            if node.offset is None:
                total = 0
                for j in range(1, i + 1):
                    total += bool((yield sub(node.body, where=j)))
                return total
            j = i - node.offset
            return 1 if j >= 1 and (yield sub(node.body, where=j)) else 0
        if isinstance(node, E.Number):
            return node.value
        if isinstance(node, E.Arith):
            a, b = (yield sub(node.left)), (yield sub(node.right))
            return {"+": a + b, "-": a - b, "min": min(a, b), "max": max(a, b)}[node.op]
        if isinstance(node, E.Conditional):
            return (yield sub(node.if_true)) if (yield sub(node.condition)) else (yield sub(node.if_false))
        if isinstance(node, E.Named):
            inner = {p: symbol_of(a) for p, a in zip(node.params, node.args)}
            return (yield at(node.body, i, restrict(node.body, inner)))
        raise TypeError(f"not a C-RASP node: {node!r}")

    return trampoline(at(node, position, restrict(node, bindings)))
