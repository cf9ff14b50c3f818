"""A program shown on one input: one row per named definition, one column per position.

A family over symbols shows, at each position, the symbols for which it is true (a Boolean family)
or its non-zero counts (a count family), so a student sees what every definition computes. The
same rows are drawn as a picture by crasp.plot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.evaluate import evaluate
from crasp.expr import BOOL, CraspError
from crasp.nexttoken import AMBIGUOUS, NO_PREDICTION, encode, predictions
from crasp.program import Program

MAX_SYMBOLS_SHOWN = 4
PREDICTION_ROW = "=> next token"


@dataclass(frozen=True)
class TraceRow:
    name: str  # the definition's head, `prev[t]`
    cells: list[str]  # one per position
    true_at: list[bool] | None = None  # a Boolean row: where it (or, for a family, any member) is true


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


def trace_rows(program: Program, symbols: list[str]) -> list[TraceRow]:
    """The input's rows (position, input), one row per definition, and the predictions of a
    next-token program."""
    if not symbols:  # no column to show, and no last position for a language program to read
        raise CraspError(
            "the input is empty: a trace needs at least one symbol, separated by spaces, of the "
            f"program's alphabet ({' '.join(program.alphabet)})"
        )
    tokens = encode(program, [symbols])
    values = evaluate(program, tokens)
    rows = [TraceRow("position", [str(i + 1) for i in range(len(symbols))]), TraceRow("input", list(symbols))]
    for definition in program.definitions:
        value = values[definition.name].array[0, : len(symbols)]
        is_bool = definition.body.type == BOOL
        head = f"{definition.name}[{', '.join(definition.params)}]" if definition.params else definition.name
        true_at = [bool(np.any(value[i])) for i in range(len(symbols))] if is_bool else None
        rows.append(TraceRow(head, [_cell(value[i], is_bool, program.alphabet) for i in range(len(symbols))], true_at))
    if program.output:
        names = {NO_PREDICTION: "none", AMBIGUOUS: "several"}
        rows.append(
            TraceRow(
                PREDICTION_ROW,
                [names[int(k)] if k < 0 else program.alphabet[int(k)] for k in predictions(program, tokens)[0]],
            )
        )
    return rows


def verdict_line(program: Program, rows: list[TraceRow]) -> str | None:
    """A language program's verdict: its accepted Boolean at the last position."""
    if not program.accept:
        return None
    accepted = next(row for row in rows if row.name == program.accept).true_at[-1]
    return f"accepted ({program.accept} at the last position): {'yes' if accepted else 'no'}"


def format_trace(program: Program, symbols: list[str]) -> str:
    rows = trace_rows(program, symbols)
    name_width = max(len(row.name) for row in rows)
    widths = [max(len(row.cells[i]) for row in rows) for i in range(len(symbols))]
    lines = []
    for k, row in enumerate(rows):
        lines.append(f"{row.name:<{name_width}} | " + " ".join(c.rjust(w) for c, w in zip(row.cells, widths)))
        if k == 1:
            lines.append("-" * len(lines[-1]))
    verdict = verdict_line(program, rows)
    return "\n".join(lines + ([verdict] if verdict else []))
