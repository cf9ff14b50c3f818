"""Figures for reports: matplotlib without a display, saved atomically."""

from __future__ import annotations

from pathlib import Path

from crasplab.results.files import atomic_write


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (imported on first use: it is slow to load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
