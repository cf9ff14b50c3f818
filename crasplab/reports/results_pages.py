"""Documents whose numbers are written from the kept runs: a page is prose written by hand with
blocks between markers that a command writes, so that no table in it is typed or pasted.

    <!-- BEGIN generated headline: written by python experiments/calibration/results_pages.py -->

    ...the block, as the command renders it...

    <!-- END generated headline -->

The markers are HTML comments, which Markdown does not show. `fill` rewrites every block of a page
from a renderer (name -> the block's text) and leaves the prose between blocks as it is; a page
whose committed blocks differ from what `fill` gives is stale, which the tests check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

BEGIN = re.compile(r"^<!-- BEGIN generated (?P<name>[^:]+): written by (?P<command>.+) -->$")
END = "<!-- END generated {name} -->"


class PageError(ValueError):
    """A page's generated blocks cannot be read: a marker without its pair, or an unknown block."""


def begin_marker(name: str, command: str) -> str:
    return f"<!-- BEGIN generated {name}: written by {command} -->"


def block_names(text: str, where: str) -> list[str]:
    """The names of a page's generated blocks, in order; `where` names the page in errors."""
    return [name for name, _, _ in _blocks(text.splitlines(), where)]


def _blocks(lines: list[str], where: str) -> list[tuple[str, int, int]]:
    """(name, line of its BEGIN marker, line of its END marker) for each block, 0-based."""
    found, open_block = [], None
    for number, line in enumerate(lines):
        begin = BEGIN.match(line)
        if begin and open_block:
            raise PageError(f"{where}:{number + 1}: a block begins inside block {open_block[0]!r}; close it first")
        if begin:
            open_block = (begin["name"], number)
        elif line.startswith("<!-- END generated"):
            if not open_block or line != END.format(name=open_block[0]):
                raise PageError(
                    f"{where}:{number + 1}: {line!r} closes no open block"
                    + (f" (open: {END.format(name=open_block[0])!r})" if open_block else "")
                )
            found.append((*open_block, number))
            open_block = None
    if open_block:
        raise PageError(f"{where}:{open_block[1] + 1}: block {open_block[0]!r} has no {END.format(name=open_block[0])}")
    return found


def fill(text: str, render: Callable[[str], str], command: str, where: str) -> str:
    """The page with every generated block rewritten: its BEGIN marker naming `command`, a blank
    line, render(name), a blank line, its END marker. render raises KeyError for a name it does
    not know, reported here with the page and line."""
    lines = text.splitlines()
    out, start = [], 0
    for name, begin, end in _blocks(lines, where):
        try:
            body = render(name).strip("\n")
        except KeyError as error:
            raise PageError(f"{where}:{begin + 1}: no generated block is named {name!r} ({error})") from None
        out += lines[start:begin] + [begin_marker(name, command), "", body, "", END.format(name=name)]
        start = end + 1
    out += lines[start:]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def stale_pages(root: Path, pages: tuple[str, ...], render: Callable[[str], str], command: str) -> list[str]:
    """The pages (relative to root) whose committed text differs from what fill writes."""
    return [page for page in pages if fill(text := (root / page).read_text(), render, command, page) != text]
