"""Figures for reports: matplotlib without a display, saved atomically."""

from __future__ import annotations

from pathlib import Path


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
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        figure.savefig(tmp, dpi=dpi)
        tmp.replace(path)
    finally:
        pyplot().close(figure)
        tmp.unlink(missing_ok=True)
