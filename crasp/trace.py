"""A program shown on one input: one row per named definition, one column per position.

A family over symbols shows, at each position, the symbols for which it is true (a Boolean family)
or its non-zero counts (a count family), so a student sees what every definition computes.
"""

from __future__ import annotations

import numpy as np

from crasp.evaluate import evaluate
from crasp.expr import BOOL, CraspError
from crasp.nexttoken import AMBIGUOUS, NO_PREDICTION, encode, predictions
from crasp.program import Program

MAX_SYMBOLS_SHOWN = 4


def _cell(array: np.ndarray, is_bool: bool, alphabet: tuple[str, ...]) -> str:
    if array.ndim == 0:
        return ("1" if array else ".") if is_bool else str(int(array))
    if array.ndim > 1:
        return f"{int(np.count_nonzero(array))} true" if is_bool else f"{int(np.count_nonzero(array))} nonzero"
    hits = np.flatnonzero(array)
    shown = [alphabet[k] if is_bool else f"{alphabet[k]}:{int(array[k])}" for k in hits[:MAX_SYMBOLS_SHOWN]]
    if len(hits) > MAX_SYMBOLS_SHOWN:
        shown.append(f"+{len(hits) - MAX_SYMBOLS_SHOWN}")
    return "{" + ",".join(shown) + "}" if shown else "{}"


def trace_rows(program: Program, symbols: list[str]) -> list[tuple[str, list[str]]]:
    tokens = encode(program, [symbols])
    values = evaluate(program, tokens)
    rows = []
    for definition in program.definitions:
        value = values[definition.name]
        head = f"{definition.name}[{', '.join(definition.params)}]" if definition.params else definition.name
        cells = [_cell(value.array[0, i], definition.body.type == BOOL, program.alphabet) for i in range(len(symbols))]
        rows.append((head, cells))
    if program.output:
        predicted = predictions(program, tokens)[0]
        names = {NO_PREDICTION: "none", AMBIGUOUS: "several"}
        rows.append(("=> next token", [names[int(k)] if k < 0 else program.alphabet[int(k)] for k in predicted]))
    return rows


def format_trace(program: Program, symbols: list[str]) -> str:
    if not symbols:  # no column to show, and no last position for a language program to read
        raise CraspError("the input is empty: a trace needs at least one symbol, separated by spaces, of the "
                         f"program's alphabet ({' '.join(program.alphabet)})")
    rows = [("position", [str(i + 1) for i in range(len(symbols))]), ("input", list(symbols))]
    rows += trace_rows(program, symbols)
    name_width = max(len(name) for name, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(symbols))]
    lines = []
    for k, (name, cells) in enumerate(rows):
        lines.append(f"{name:<{name_width}} | " + " ".join(c.rjust(w) for c, w in zip(cells, widths)))
        if k == 1:
            lines.append("-" * len(lines[-1]))
    if program.accept:
        accepted = bool(evaluate(program, encode(program, [symbols]), [program.accept])[program.accept].array[0, -1])
        lines.append(f"accepted ({program.accept} at the last position): {'yes' if accepted else 'no'}")
    return "\n".join(lines)
