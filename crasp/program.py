"""Programs: an alphabet, named definitions (a DAG) and what the program outputs.

A next-token program names an output family `O[s]`: at position i it predicts the unique symbol
s with O[s](i) true. A language (acceptance) program names one Boolean read at the last
position. Programs are built from the Python DSL (`Program.build`) or parsed from text
(`crasp.syntax.parse`); `print_program` writes the text form back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from crasp.expr import (
    _OR,
    BOOL,
    CraspError,
    CraspScopeError,
    CraspTypeError,
    Expr,
    Named,
    Or,
    Var,
    _precedence,
    show,
    symbols_used,
    walk,
)


class CraspProgramError(CraspError, ValueError):
    """A program that is well typed but not a valid program (alphabet, outputs, definitions)."""


@dataclass(frozen=True, eq=False)
class Definition:
    name: str
    params: tuple[str, ...]
    body: Expr

    @property
    def is_family(self) -> bool:
        return bool(self.params)

    def use(self, *args) -> Named:
        return Named(self.name, self.params, tuple(args), self.body)

    def same_as(self, other: "Definition") -> bool:
        return self.name == other.name and self.params == other.params and self.body is other.body


@dataclass(frozen=True, eq=False)
class Program:
    alphabet: tuple[str, ...]
    definitions: tuple[Definition, ...]  # dependency order: a definition uses only earlier ones
    output: str | None = None  # name of the next-token output family O[s]
    accept: str | None = None  # name of the Boolean of a language program
    title: str = ""

    def __post_init__(self):
        _check_alphabet(self.alphabet)
        names = [d.name for d in self.definitions]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise CraspProgramError(f"defined more than once: {', '.join(twice)}")
        by_name = {d.name: d for d in self.definitions}
        # Kept for definition(): a lookup per name must not scan the list (a chain of n definitions
        # would cost n^2).
        object.__setattr__(self, "_by_name", by_name)
        if (self.output is None) == (self.accept is None):
            raise CraspProgramError(
                "a program names exactly one of `output: NAME` (a next-token family "
                "O[s]) and `accept: NAME` (a Boolean read at the last position)"
            )
        target = self.output or self.accept
        if target not in by_name:
            raise CraspProgramError(
                f"`{target}` is named as the program's {'output' if self.output else 'accept'} but never defined"
            )
        chosen = by_name[target]
        if chosen.body.type != BOOL:
            raise CraspTypeError(f"`{target}` must be a Boolean, but it is a {chosen.body.type}")
        if self.output and len(chosen.params) != 1:
            raise CraspProgramError(
                f"the output `{target}` must be a family over one symbol, "
                f"like `{target}[s] := ...`; it has parameters {list(chosen.params)}"
            )
        if self.accept and chosen.params:
            raise CraspProgramError(f"the accepted Boolean `{target}` must have no parameters")
        earlier: dict[str, Definition] = {}
        for definition in self.definitions:
            _check_uses(definition, earlier)
            unknown = symbols_used(definition.body) - set(self.alphabet)
            if unknown:
                raise CraspProgramError(
                    f"`{definition.name}` uses symbol(s) {', '.join(sorted(unknown))} outside the "
                    f"alphabet ({' '.join(self.alphabet)})"
                )
            earlier[definition.name] = definition

    @classmethod
    def build(
        cls,
        alphabet,
        *,
        output: Callable[..., Named] | Named | None = None,
        accept: Named | None = None,
        title: str = "",
    ) -> "Program":
        """Collect every named definition reachable from the output (or accepted Boolean).

        `output` is a family made by `crasp.expr.family` (or one use of it); `accept` a Boolean
        made with `.named(...)`."""
        root = output(Var("s")) if callable(output) and not isinstance(output, Named) else (output or accept)
        if not isinstance(root, Named):
            raise CraspProgramError(
                "the output or accepted Boolean must be a named definition (made with family(...) or .named(...))"
            )
        definitions: dict[str, Definition] = {}
        for node in walk(root):
            if isinstance(node, Named):
                found = Definition(node.name, node.params, node.body)
                known = definitions.setdefault(node.name, found)
                if not known.same_as(found):
                    raise CraspScopeError(
                        f"two different definitions are both named `{node.name}`:\n"
                        f"  {show(known.body)}\n  {show(found.body)}"
                    )
        return cls(
            tuple(alphabet),
            tuple(definitions.values()),
            output=root.name if output is not None else None,
            accept=root.name if accept is not None else None,
            title=title,
        )

    def definition(self, name: str) -> Definition:
        found = self._by_name.get(name)
        if found is not None:
            return found
        raise KeyError(f"no definition named `{name}`; defined: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.definitions]

    @property
    def target(self) -> Definition:
        return self.definition(self.output or self.accept)

    def symbol_ids(self) -> dict[str, int]:
        return {s: k for k, s in enumerate(self.alphabet)}

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Program)
            and self.alphabet == other.alphabet
            and self.output == other.output
            and self.accept == other.accept
            and len(self.definitions) == len(other.definitions)
            and all(a.same_as(b) for a, b in zip(self.definitions, other.definitions))
        )

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return print_program(self)


def _check_uses(definition: Definition, earlier: dict[str, Definition]) -> None:
    """Every definition used is an earlier one of the program: so checking each definition's own
    body (not the bodies it uses) checks the whole program once."""
    for node in walk(definition.body, into_definitions=False):
        if isinstance(node, Named):
            used = earlier.get(node.name)
            if used is None or used.body is not node.body or used.params != node.params:
                raise CraspProgramError(
                    f"`{definition.name}` uses `{node.name}`, which is not one of the "
                    "program's earlier definitions (they are listed in dependency order)"
                )


def _check_alphabet(alphabet: tuple[str, ...]) -> None:
    if not alphabet:
        raise CraspProgramError("the alphabet is empty: declare it with `alphabet: a b c`")
    bad = [s for s in alphabet if not isinstance(s, str) or not s or any(c.isspace() for c in s) or '"' in s]
    if bad:
        raise CraspProgramError(f"alphabet symbols must be non-empty strings without spaces or quotes: {bad}")
    if len(set(alphabet)) != len(alphabet):
        twice = sorted({s for s in alphabet if alphabet.count(s) > 1})
        raise CraspProgramError(f"the alphabet lists {', '.join(twice)} more than once")


def _show_definition_body(body: Expr, indent: int) -> str:
    """A top-level `or` chain prints one alternative per continuation line, as the papers do."""
    alternatives = []
    while isinstance(body, Or):
        alternatives.append(body.right)
        body = body.left
    if not alternatives:
        return show(body)
    alternatives.append(body)
    pieces = [show(a) if _precedence(a) > _OR else f"({show(a)})" for a in reversed(alternatives)]
    return f"\n{' ' * (indent + 1)}or ".join(pieces)


def print_program(program: Program) -> str:
    """The text form: `crasp.syntax.parse(print_program(p)) == p`."""
    lines = [f"// {line}" for line in program.title.splitlines()]
    lines.append("alphabet: " + " ".join(program.alphabet))
    lines.append(f"output: {program.output}" if program.output else f"accept: {program.accept}")
    for d in program.definitions:
        head = f"{d.name}[{', '.join(d.params)}]" if d.params else d.name
        lines.append(f"{head} := {_show_definition_body(d.body, len(head))}")
    return "\n".join(lines) + "\n"
