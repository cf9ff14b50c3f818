"""Figures for reports: matplotlib without a display, saved atomically."""

from __future__ import annotations

from pathlib import Path

from crasplab.records.files import atomic_write

TITLE_WIDTH_SHARE = 0.96  # of the figure's width, a title's line may take (tight_layout keeps a margin)
LINE_SPACING = 1.2  # matplotlib's, in font sizes
POINTS_PER_INCH = 72


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (imported on first use: it is slow to load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def set_title(figure, title: str, fontsize: float) -> None:
    """Give `figure` its title, broken between words onto as many lines as its width needs, and make
    it taller by the lines added. A figure is as wide as its panels, so a title wider than them (a
    run of one or two tasks) would otherwise be cut off at both sides."""
    from matplotlib.font_manager import FontProperties

    renderer = figure.canvas.get_renderer()
    font = FontProperties(size=fontsize)
    room = figure.get_figwidth() * figure.dpi * TITLE_WIDTH_SHARE

    def fits(text: str) -> bool:
        return renderer.get_text_width_height_descent(text, font, ismath=False)[0] <= room

    words = title.split(" ")
    lines = [words[0]]
    for word in words[1:]:
        if fits(f"{lines[-1]} {word}"):
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    figure.set_figheight(figure.get_figheight() + (len(lines) - 1) * LINE_SPACING * fontsize / POINTS_PER_INCH)
    figure.suptitle("\n".join(lines), fontsize=fontsize)


def save_figure(figure, path: Path, dpi: int = 120, tight: bool = True) -> None:
    """Lay `figure` out tightly (unless `tight` is False: a colorbar shared by several axes is laid
    out by matplotlib itself), save it to `path` (written next to it, then moved into place) and
    close it."""
    path = Path(path)
    if tight:
        figure.tight_layout()
    try:
        atomic_write(path, lambda file: figure.savefig(file, dpi=dpi, format=path.suffix.lstrip(".")))
    finally:
        pyplot().close(figure)
