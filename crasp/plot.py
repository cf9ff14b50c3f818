"""The trace of crasp.trace as a picture, for slides: one row per definition, one column per
position; a Boolean is a filled cell where it is true, a count or a family's value is written in
its cell. matplotlib is imported here only, when a picture is asked for.
"""

from __future__ import annotations

from pathlib import Path

from crasp.output_files import OutputFileError, check_output_file, write_output_file
from crasp.program import Program
from crasp.trace import trace_rows, verdict_line

SUFFIXES = (".png", ".pdf", ".svg")
# A column is at least a quarter inch: 300 positions already make a figure about 80 inches wide
# (16,000 pixels at 200 dpi); 10,000 positions made a PNG 900,000 pixels wide in 110 s and 2.7 GB.
MAX_POSITIONS = 300

TRUE_COLOUR = "#3b6fb6"
FAMILY_COLOUR = "#c9d8ee"  # a Boolean family where some member is true: lighter, its members written on it
CHAR_WIDTH = 0.09  # inches per character of a cell's text
ROW_HEIGHT = 0.32  # inches


def trace_figure(program: Program, symbols: list[str]):
    """A matplotlib Figure of the trace of `program` on `symbols`."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    rows = trace_rows(program, symbols)
    header, body = rows[:2], rows[2:]
    # Each column as wide as its longest text, so a family's members fit in their cell.
    widths = [max(max(len(row.cells[i]) for row in rows), 2) * CHAR_WIDTH + 0.1 for i in range(len(symbols))]
    lefts = [sum(widths[:i]) for i in range(len(symbols))]
    name_width = max(len(row.name) for row in body) * CHAR_WIDTH + 0.2
    figure = Figure(figsize=(name_width + sum(widths) + 0.2, ROW_HEIGHT * (len(body) + 2.5) + 0.3))
    axes = figure.add_axes(
        (
            name_width / figure.get_figwidth(),
            0.3 / figure.get_figheight(),
            sum(widths) / figure.get_figwidth(),
            ROW_HEIGHT * len(body) / figure.get_figheight(),
        )
    )
    axes.set_xlim(0, sum(widths))
    axes.set_ylim(len(body), 0)
    for y, row in enumerate(body):
        for x, cell in enumerate(row.cells):
            is_family = row.true_at is not None and cell not in ("1", ".")
            filled = row.true_at is not None and row.true_at[x]
            colour = (FAMILY_COLOUR if is_family else TRUE_COLOUR) if filled else "white"
            axes.add_patch(
                Rectangle(
                    (lefts[x], y), widths[x], 1, facecolor=colour, edgecolor="#999999", linewidth=0.5, gid=f"{y},{x}"
                )
            )
            if row.true_at is None or (is_family and filled):  # an empty family's cell stays blank
                axes.text(
                    lefts[x] + widths[x] / 2, y + 0.5, cell, ha="center", va="center", fontsize=8, family="monospace"
                )
    centres = [left + width / 2 for left, width in zip(lefts, widths)]
    axes.set_xticks(
        centres,
        [f"{position}\n{symbol}" for position, symbol in zip(*(r.cells for r in header))],
        fontsize=8,
        family="monospace",
    )
    axes.xaxis.tick_top()
    axes.set_yticks([y + 0.5 for y in range(len(body))], [row.name for row in body], fontsize=8, family="monospace")
    axes.tick_params(length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    verdict = verdict_line(program, rows)
    if verdict:
        axes.set_xlabel(verdict, fontsize=8, family="monospace")
    return figure


def check_plot_request(path: str | Path, positions: int, overwrite: bool = False) -> Path:
    """Refuse, before anything is computed, a picture that cannot be written or would be too wide."""
    if positions > MAX_POSITIONS:
        raise OutputFileError(
            f"--plot {path}: the input has {positions} positions, and a picture shows at most "
            f"{MAX_POSITIONS} (one column each); plot a shorter input, or drop --plot for the text "
            "trace"
        )
    return check_output_file(path, "--plot", SUFFIXES, overwrite)


def save_trace_plot(program: Program, symbols: list[str], path: str | Path, overwrite: bool = False) -> None:
    """Write the picture; the file's extension (.png, .pdf, .svg) chooses the format."""
    figure = trace_figure(program, symbols)
    kind = Path(path).suffix.lower().lstrip(".")
    write_output_file(
        Path(path), "--plot", lambda file: figure.savefig(file, format=kind, dpi=200, bbox_inches="tight"), overwrite
    )
