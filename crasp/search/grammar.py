"""The grammar the search enumerates: typed C-RASP expressions over the output index s and one
bound index t, restricted to a fragment.

An expression is a Boolean or a Count, and depends on a subset of the indices {s, t} (its
"variables"): s is the parameter of the output family O[s], t is bound by `any t:` / `all t:`.
A quantifier's body may itself contain quantified sub-expressions; they bind their own index
(printed u, v, ...), so inside a body `t` always means the innermost quantifier.

Productions (the size of an expression is its number of nodes; every atom and constant is 1):
  Boolean atoms   Q("<bos>") Q("<sep>") Q("<eos>") true false; Q(s) Q(t); s = c and t = c for each
                  special symbol c; "<eos>" < s and "<eos>" < t ("is a task symbol"); s = t;
                  MOD(m, r) for the moduli of [periodic]
  Count atoms     the integer constants (default 0 1 2)
  Boolean         not P | P and P | P or P | C op C (op in < <= = != >= >) | any t: P | all t: P
  Count           #[j <= i] P | #[j <= i, j = i - c] P (offsets of [local]) | C + C | C - C |
                  min(C, C) | max(C, C) | P ? C : C

No literal task symbol and no order between task symbols appears, so every expression treats
the task's symbols alike: a program found over a few symbols is a program for any alphabet.
"""

from __future__ import annotations

from dataclasses import dataclass

from crasp import expr as E
from crasp.search.options import SearchError

from crasp.tasks.base import EOS_SYMBOL, PROGRAM_SPECIALS

BOOL, COUNT = E.BOOL, E.COUNT
# Variables of an expression as a bit set.
CLOSED, S, T, ST = 0, 1, 2, 3

FRAGMENTS = ("none", "local", "periodic", "all")
FRAGMENT_TITLES = {
    "none": "C-RASP[]",
    "local": "C-RASP[local]",
    "periodic": "C-RASP[periodic]",
    "all": "C-RASP[periodic, local]",
}
COMPARISONS = ("<", "<=", "=", "!=", ">=", ">")
ARITHMETIC = ("+", "-", "min", "max")
# Names of nested bound indices, outermost first: `t` inside the first quantifier, `u` inside a second...
BOUND_NAMES = ("t", "u", "v", "w", "x", "y", "z")


class GrammarError(SearchError):
    """Options that describe no grammar (unknown fragment, bad offset or modulus)."""


@dataclass(frozen=True)
class Atom:
    """A leaf: its type, its variables and the text it prints as (with `t` the innermost bound index)."""

    type: str
    variables: int
    kind: str  # token, is, letter, same, constant, mod, number
    symbol: str = ""
    variable: str = ""  # "s" or "t" for token / is / letter
    numbers: tuple[int, ...] = ()  # (m, r) for MOD, (value,) for a constant

    def expression(self, bound: str) -> E.Expr:
        """The atom as a crasp.expr node; `bound` names the innermost bound index."""
        var = E.Var("s") if self.variable == "s" else E.Var(bound)
        if self.kind == "token":
            return E.Q(self.symbol or var)
        if self.kind == "is":
            return E.SymbolRelation("=", var, self.symbol)
        if self.kind == "letter":
            return E.SymbolRelation("<", EOS_SYMBOL, var)
        if self.kind == "same":
            return E.SymbolRelation("=", E.Var("s"), E.Var(bound))
        if self.kind == "constant":
            return E.BoolConst(self.numbers == (1,))
        if self.kind == "mod":
            return E.Periodic(*self.numbers)
        return E.Number(self.numbers[0])


@dataclass(frozen=True)
class Grammar:
    fragment: str = "none"
    offsets: tuple[int, ...] = (1,)  # the distances c of `j = i - c` in [local]
    moduli: tuple[int, ...] = (2, 3)  # the m of MOD(m, r) in [periodic]
    constants: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self):
        if self.fragment not in FRAGMENTS:
            raise GrammarError(
                f"unknown fragment {self.fragment!r}; accepted: {', '.join(FRAGMENTS)} "
                "(none = C-RASP[], all = C-RASP[periodic, local])"
            )
        for option, values, low, high in (
            ("--offsets (local distances c)", self.offsets, 1, 64),
            ("--moduli (m of MOD(m, r))", self.moduli, 2, 64),
            ("--constants", self.constants, -64, 64),
        ):
            if not values or any(not isinstance(v, int) or not low <= v <= high for v in values):
                raise GrammarError(f"{option} must be integers from {low} to {high}, got {list(values)}")

    @property
    def local(self) -> bool:
        return self.fragment in ("local", "all")

    @property
    def periodic(self) -> bool:
        return self.fragment in ("periodic", "all")

    @property
    def title(self) -> str:
        return FRAGMENT_TITLES[self.fragment]

    @property
    def count_offsets(self) -> tuple[int | None, ...]:
        """None is the plain count #[j <= i]; the others are local relations j = i - c."""
        return (None,) + (tuple(sorted(set(self.offsets))) if self.local else ())

    def atoms(self) -> tuple[Atom, ...]:
        atoms = [Atom(BOOL, CLOSED, "token", symbol=c) for c in PROGRAM_SPECIALS]
        atoms += [Atom(BOOL, CLOSED, "constant", numbers=(value,)) for value in (1, 0)]
        for name, bit in (("s", S), ("t", T)):
            atoms.append(Atom(BOOL, bit, "token", variable=name))
            atoms += [Atom(BOOL, bit, "is", symbol=c, variable=name) for c in PROGRAM_SPECIALS]
            atoms.append(Atom(BOOL, bit, "letter", variable=name))
        atoms.append(Atom(BOOL, ST, "same"))
        if self.periodic:
            atoms += [Atom(BOOL, CLOSED, "mod", numbers=(m, r)) for m in sorted(set(self.moduli)) for r in range(m)]
        atoms += [Atom(COUNT, CLOSED, "number", numbers=(k,)) for k in sorted(set(self.constants))]
        return tuple(atoms)

    def describe(self) -> str:
        """One paragraph naming every production, for outputs and verdict reasons."""
        positional = []
        if self.local:
            positional.append(
                "local counts #[j <= i, j = i - c] for c in {" + ", ".join(map(str, sorted(set(self.offsets)))) + "}"
            )
        if self.periodic:
            positional.append("MOD(m, r) for m in {" + ", ".join(map(str, sorted(set(self.moduli)))) + "}")
        return (
            f"{self.title} expressions over the output index s and bound indices under any/all; atoms Q(s), "
            'Q(t), Q of <bos> <sep> <eos>, true, false, s or t = a special symbol, "<eos>" < s or t (a task '
            "symbol), s = t; constants {" + ", ".join(map(str, sorted(set(self.constants)))) + "}; "
            "operations not and or, comparisons < <= = != >= >, #[j <= i], + - min max, P ? C : C"
            + ("; " + "; ".join(positional) if positional else "")
            + "; size = number of nodes"
        )
