"""From enumerated behaviours back to crasp.expr nodes, and from a hit or a decision list to a
next-token program over any alphabet."""

from __future__ import annotations

from typing import Callable

from crasp import expr as E
from crasp.program import Definition, Program
from crasp.search.enumerate import ALL, AND, ANY, ARITH, ATOM, COMPARE, CONDITIONAL, COUNT_OF, NOT, OR
from crasp.search.store import Table
from crasp.search.grammar import ARITHMETIC, BOUND_NAMES, COMPARISONS, Atom
from crasp.tasks.base import PROGRAM_SPECIALS
from crasp.search.targets import Decision, Found

OUTPUT = "O"


class Builder:
    """Rebuilds expressions from the enumerator's table (kinds and arguments of kept behaviours)."""

    def __init__(self, table: Table, atoms: tuple[Atom, ...]):
        self.table, self.atoms = table, atoms

    def behaviour(self, behaviour: int, bound: str | None, depth: int) -> E.Expr:
        kind, args, _ = self.table.describe(behaviour)
        return self.node(kind, args, bound, depth)

    def node(self, kind: int, args: tuple[int, int, int], bound: str | None, depth: int) -> E.Expr:
        """`bound` names the innermost bound index (t inside a quantifier); `depth` quantifiers
        enclose the node, so a quantifier in it binds BOUND_NAMES[depth]."""
        first, second, third = args
        child = lambda b: self.behaviour(b, bound, depth)  # noqa: E731
        if kind == ATOM:
            return self.atoms[first].expression(bound or BOUND_NAMES[0])
        if kind == NOT:
            return E.Not(child(first))
        if kind in (AND, OR):
            return (E.And if kind == AND else E.Or)(child(first), child(second))
        if kind == COMPARE:
            return E.Compare(COMPARISONS[first], child(second), child(third))
        if kind in (ANY, ALL):
            name = BOUND_NAMES[depth]
            return E.Quantified("any" if kind == ANY else "all", E.Var(name), self.behaviour(first, name, depth + 1))
        if kind == COUNT_OF:
            return E.CountOf(child(first), None if second < 0 else second)
        if kind == ARITH:
            return E.Arith(ARITHMETIC[first], child(second), child(third))
        if kind == CONDITIONAL:
            return E.Conditional(child(first), child(second), child(third))
        raise ValueError(f"unknown kind {kind}")

    def found(self, found: Found) -> E.Expr:
        """The expression in its context (an s-family for outputs, a closed Boolean for guards)."""
        if found.context in ("itself", "guard"):
            return self.node(found.kind, found.args, None, 0)
        if found.context == "held":
            return _held(self.node(found.kind, found.args, None, 0))
        t = E.Var(BOUND_NAMES[0])
        inner = self.node(found.kind, found.args, t.name, 1)
        if found.context.endswith("held") or found.context.endswith("held guard"):
            inner = _held(inner)
        return E.Quantified("any", t, E.And(E.Q(t), inner))


def _held(node: E.Expr) -> E.Expr:
    return E.Compare(">=", E.CountOf(node, None), E.Number(1))


def tree_size(node: E.Expr) -> int:
    """Nodes of the expression written out in full (every use of a definition counts its body)."""
    return (
        1 + sum(tree_size(child) for child in node.children())
        if not isinstance(node, E.Named)
        else tree_size(node.body)
    )


def program_maker(builder: Builder, tree: Decision | Found, title: str) -> Callable[[tuple[str, ...]], Program]:
    """make(symbols) -> the program over <bos> <sep> <eos> + symbols (the program names no task
    symbol, so one program serves every alphabet). A decision list names its guards `case_k` and
    its leaves `answer_k[s]`."""
    definitions: list[Definition] = []

    def named(found: Found, params: tuple[str, ...], prefix: str) -> E.Expr:
        definition = Definition(
            f"{prefix}_{sum(d.name.startswith(prefix) for d in definitions) + 1}", params, builder.found(found)
        )
        definitions.append(definition)
        return definition.use(*(E.Var(p) for p in params))

    def output(node: Decision | Found) -> E.Expr:
        if isinstance(node, Found):
            return named(node, ("s",), "answer")
        guard = named(node.guard, (), "case")
        return E.Or(E.And(guard, output(node.if_true)), E.And(E.Not(guard), output(node.if_false)))

    body = builder.found(tree) if isinstance(tree, Found) else output(tree)
    definitions.append(Definition(OUTPUT, ("s",), body))

    def make(symbols) -> Program:
        return Program(PROGRAM_SPECIALS + tuple(symbols), tuple(definitions), output=OUTPUT, title=title)

    return make
