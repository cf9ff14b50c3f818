"""A program as its author wrote it, before it meets a task: fixed over the alphabet it lists, or
alphabet-generic (its alphabet line ends with `...`, crasp.syntax), in which case each task or
language it is checked against supplies the symbols `...` stands for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crasp.program import Program
from crasp.syntax import GENERIC_MARK, AlphabetLine, CraspSyntaxError, parse, parse_with_alphabet_line

SHOWN_SYMBOLS = 8  # a longer list of symbols is shown by its ends


def show_symbols(symbols: Sequence[str]) -> str:
    if len(symbols) <= SHOWN_SYMBOLS:
        return " ".join(symbols)
    return f"{' '.join(symbols[: SHOWN_SYMBOLS - 2])} .. {symbols[-1]} ({len(symbols)} symbols)"


@dataclass(frozen=True)
class ProgramSource:
    text: str
    name: str  # the file or shipped example, as errors and reports name it
    alphabet_line: AlphabetLine

    @classmethod
    def read(cls, text: str, name: str) -> ProgramSource:
        """Read the program once over the symbols it lists, so that its errors show up now."""
        return cls(text, name, parse_with_alphabet_line(text, name)[1])

    @property
    def generic(self) -> bool:
        return self.alphabet_line.generic

    @property
    def listed(self) -> tuple[str, ...]:
        return self.alphabet_line.symbols

    def program(self, symbols: Sequence[str] | None = None) -> Program:
        """The program; a generic one reads `symbols` (default: only the symbols it lists)."""
        return parse(self.text, self.name, symbols)

    def program_for(self, vocabulary: Sequence[str], owner: str) -> Program:
        """The program over `vocabulary`, the symbols of `owner` (a task or language, as messages
        name it): a generic program may list only symbols of it, a fixed one must read all of it."""
        if self.generic:
            foreign = [k for k, s in enumerate(self.listed) if s not in vocabulary]
            if foreign:
                line, column = self.alphabet_line.places[foreign[0]]
                symbol = self.listed[foreign[0]]
                raise CraspSyntaxError(
                    f"the program lists {symbol}, which {owner} does not have; its symbols: {show_symbols(vocabulary)}",
                    self.name,
                    line,
                    column,
                    self.text.split("\n")[line - 1],
                )
            return self.program(vocabulary)
        missing = [s for s in vocabulary if s not in self.listed]
        if missing:
            line, column = self.alphabet_line.places[0]
            raise CraspSyntaxError(
                f"the program reads only {show_symbols(self.listed)}, but {owner} also has "
                f"{show_symbols(missing)}; end the alphabet line with `{GENERIC_MARK}` to read "
                "any task's symbols",
                self.name,
                line,
                column,
                self.text.split("\n")[line - 1],
            )
        return self.program()

    def describe_alphabet(self, vocabulary: Sequence[str]) -> str:
        if not self.generic:
            return f"{show_symbols(self.listed)} (fixed)"
        others = [s for s in vocabulary if s not in self.listed]
        return f"{' '.join(self.listed)} {GENERIC_MARK} (generic; here {GENERIC_MARK} is {show_symbols(others)})"
