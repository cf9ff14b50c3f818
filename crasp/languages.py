"""Languages for acceptance programs (`accept: NAME`): `python -m crasp check NAME --program FILE`.

A language is a set of strings over a small fixed alphabet, given by its membership test. An
acceptance program is read at the last position of a string, so it is checked on non-empty
strings: every one up to a length, then random strings at longer lengths (crasp.check). Uniform
random long strings are rarely members of most languages, so the sampled stage also draws
members (`member`) and members with one symbol changed, the strings nearest the boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Language:
    name: str
    description: str
    symbols: tuple[str, ...]
    contains: Callable[[Sequence[str]], bool]
    # A random member of exactly this length, or None where the language has none of it.
    member: Callable[[np.random.Generator, int], list[str] | None]

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The symbols a program over this language reads."""
        return self.symbols


def _uniform(rng: np.random.Generator, symbols: Sequence[str], length: int) -> list[str]:
    return [symbols[k] for k in rng.integers(len(symbols), size=length)]


def _strict_majority_member(rng: np.random.Generator, length: int) -> list[str]:
    ones = int(rng.integers(length // 2 + 1, length + 1))
    string = ["a"] * ones + ["b"] * (length - ones)
    return [string[k] for k in rng.permutation(length)]


def _with_factor(rng: np.random.Generator, length: int, factor: list[str], at_end: bool) -> list[str] | None:
    if length < len(factor):
        return None
    string = _uniform(rng, "abc", length)
    start = length - len(factor) if at_end else int(rng.integers(length - len(factor) + 1))
    string[start : start + len(factor)] = factor
    return string


def _after_first_a_member(rng: np.random.Generator, length: int) -> list[str] | None:
    if length < 2:
        return None
    first = int(rng.integers(length - 1))
    return _uniform(rng, "bc", first) + ["a", "b"] + _uniform(rng, "abc", length - first - 2)


def _after_first_a(string: Sequence[str]) -> bool:
    first = list(string).index("a") if "a" in string else None
    return first is not None and first + 1 < len(string) and string[first + 1] == "b"


def _dyck_member(rng: np.random.Generator, length: int) -> list[str] | None:
    """A balanced string: a random arrangement of n "(" and n ")", rotated to start just after
    its lowest prefix sum, never goes below zero (the cycle lemma)."""
    if length % 2:
        return None
    steps = rng.permutation([1] * (length // 2) + [-1] * (length // 2))
    lowest = int(np.argmin(np.cumsum(steps)))
    return ["(" if step > 0 else ")" for step in np.roll(steps, -(lowest + 1))]


def _is_balanced(string: Sequence[str]) -> bool:
    depth = 0
    for symbol in string:
        depth += 1 if symbol == "(" else -1
        if depth < 0:
            return False
    return depth == 0


def _anbn(string: Sequence[str]) -> bool:
    half = len(string) // 2
    return len(string) % 2 == 0 and list(string) == ["a"] * half + ["b"] * half


def _any_of_even_length(rng: np.random.Generator, length: int) -> list[str] | None:
    return _uniform(rng, "ab", length) if length % 2 == 0 else None


LANGUAGE_LIST = (
    Language(
        "EndsWithAB",
        'strings over a b c that end with "a b"',
        ("a", "b", "c"),
        lambda w: list(w[-2:]) == ["a", "b"],
        lambda rng, n: _with_factor(rng, n, ["a", "b"], at_end=True),
    ),
    Language(
        "ContainsAB",
        'strings over a b c in which "a b" occurs somewhere',
        ("a", "b", "c"),
        lambda w: any(x == "a" and y == "b" for x, y in zip(w, w[1:])),
        lambda rng, n: _with_factor(rng, n, ["a", "b"], at_end=False),
    ),
    Language(
        "StrictMajority",
        "strings over a b with more a than b (a tie is rejected)",
        ("a", "b"),
        lambda w: 2 * list(w).count("a") > len(w),
        _strict_majority_member,
    ),
    Language(
        "EvenLength", "strings over a b of even length", ("a", "b"), lambda w: len(w) % 2 == 0, _any_of_even_length
    ),
    Language(
        "AfterFirstA",
        "strings over a b c that contain a, where the symbol right after the first a is b",
        ("a", "b", "c"),
        _after_first_a,
        _after_first_a_member,
    ),
    Language(
        "AnBn",
        "a^n b^n for n >= 1: some a, then as many b",
        ("a", "b"),
        _anbn,
        lambda rng, n: ["a"] * (n // 2) + ["b"] * (n // 2) if n % 2 == 0 else None,
    ),
    Language(
        "Dyck1",
        "balanced brackets over ( ): no prefix closes more than it opens, and the whole string closes all it opens",
        ("(", ")"),
        _is_balanced,
        _dyck_member,
    ),
)
LANGUAGES: dict[str, Language] = {language.name: language for language in LANGUAGE_LIST}
