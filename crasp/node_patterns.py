"""The shapes of nodes that the fast rules of the evaluators look for: a chain of `and`s, a count
compared with a number, and the comparison with its sides swapped.
"""

from __future__ import annotations

from crasp import expr as E


MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}  # a op b == b MIRRORED[op] a
MEANS_ONE = {(">=", 1), (">", 0), ("!=", 0), ("=", 1)}  # for a 0/1-valued local count


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


def count_against_number(node: E.Expr) -> tuple[E.CountOf, E.Number, str] | None:
    """`count op n` or `n op count` as (count, n, op) with the count on the left; None for other nodes."""
    if not isinstance(node, E.Compare):
        return None
    count, number, op = node.left, node.right, node.op
    if isinstance(count, E.Number):
        count, number, op = number, count, MIRRORED[op]
    return (count, number, op) if isinstance(count, E.CountOf) and isinstance(number, E.Number) else None
