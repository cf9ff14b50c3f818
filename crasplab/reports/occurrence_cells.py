"""Accuracy of a retrieval model by occurrence cell: where the retrieved occurrence of the query
lies and how often the query occurs, each read against L, the longest training context.

D is the distance of the retrieved occurrence from its end of the context (slots after the last
occurrence for NLLast/NRLast, before the first for NLFirst/NRFirst; 0 is the end slot itself), k
the number of occurrences of the query. A bounded program that is exact on the training lengths
(look back at most L tokens, else answer at the c-th occurrence for each count c <= L) is right
whenever D < L or k <= L: only strings with D >= L and k > L can show that a model did not learn
"the last occurrence". For the "first" tasks, the control, theory predicts every cell passes.
"""

from __future__ import annotations

import numpy as np

from crasp.intervals import wilson_interval
from crasp.tasks import TASK_CODES

# The four quadrants, in the order tables show them; the last is the one that discriminates.
QUADRANTS = ("D < L, k <= L", "D >= L, k <= L", "D < L, k > L", "D >= L, k > L")
DISCRIMINATING = QUADRANTS[-1]


def quadrant_index(distances_N: np.ndarray, counts_N: np.ndarray, longest: int) -> np.ndarray:
    """Each string's quadrant (an index into QUADRANTS)."""
    return (np.asarray(distances_N) >= longest).astype(int) + 2 * (np.asarray(counts_N) > longest).astype(int)


def _cell(correct: int, total: int) -> dict:
    low, high = wilson_interval(correct, total)
    return dict(correct=correct, total=total, low=round(low, 4), high=round(high, 4))


def quadrant_counts(distances_N, counts_N, exact_N, longest: int) -> dict[str, dict]:
    """quadrant -> {correct, total, low, high} (a Wilson 95% interval; (0, 1) for an empty cell)."""
    quadrant_N = quadrant_index(distances_N, counts_N, longest)
    exact_N = np.asarray(exact_N, bool)
    return {
        name: _cell(int(exact_N[quadrant_N == index].sum()), int((quadrant_N == index).sum()))
        for index, name in enumerate(QUADRANTS)
    }


def grid_edges(longest: int, widest: int) -> tuple[list[int], list[int]]:
    """Edges of the finer (D, k) grid: D in steps of L/2 up to 2L, then one cell to the widest
    context; k from 2 in steps of L/2 up to L, then one cell beyond. Cell i is [edge_i, edge_i+1)."""
    half = max(1, longest // 2)
    distance_edges = sorted({0, half, longest, 2 * longest, widest + 1})
    count_edges = sorted({2, half + 1, longest + 1, widest + 1})
    return [e for e in distance_edges if e <= widest + 1], [e for e in count_edges if e <= widest + 1]


def grid_counts(distances_N, counts_N, exact_N, distance_edges, count_edges) -> list[list[dict]]:
    """rows (D cells) x columns (k cells) of {correct, total, low, high}."""
    distances_N, counts_N, exact_N = np.asarray(distances_N), np.asarray(counts_N), np.asarray(exact_N, bool)
    rows = []
    for d_lo, d_hi in zip(distance_edges, distance_edges[1:]):
        in_row = (distances_N >= d_lo) & (distances_N < d_hi)
        row = []
        for k_lo, k_hi in zip(count_edges, count_edges[1:]):
            in_cell = in_row & (counts_N >= k_lo) & (counts_N < k_hi)
            row.append(_cell(int(exact_N[in_cell].sum()), int(in_cell.sum())))
        rows.append(row)
    return rows


def cell_text(cell: dict) -> str:
    if cell["total"] == 0:
        return "-"
    return f"{cell['correct'] / cell['total']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] (n={cell['total']})"


def range_label(lo: int, hi_exclusive: int) -> str:
    return f"{lo}" if hi_exclusive - lo == 1 else f"{lo}-{hi_exclusive - 1}"


def cells_markdown(summary: dict) -> str:
    """The tables of occurrence_cells.json: per task, each fitted seed's accuracy by quadrant, then
    the (D, k) grid over the fitted seeds' strings together."""
    longest = summary["longest_training_context"]
    lines = [
        f"# Accuracy by occurrence cell, bin {summary['bin']} (L = {longest}, the longest training context)\n",
        "D: distance of the retrieved occurrence from its end of the context; k: occurrences of the "
        f"query. A bounded program exact on the training lengths is right wherever D < {longest} or "
        f"k <= {longest}; only the cell D >= L, k > L can show a failure the theory predicts. Each "
        "cell: accuracy [95% Wilson interval] (strings).\n",
    ]
    # In the task library's order (NLFirst, NRFirst, NLLast, NRLast), not the JSON file's sorted keys.
    for task, entry in sorted(summary["tasks"].items(), key=lambda item: TASK_CODES.index(item[0])):
        lines += [f"## {task} (predicted: {entry['predicted']})\n", "| seed | " + " | ".join(QUADRANTS) + " |"]
        lines.append("|---" * (len(QUADRANTS) + 1) + "|")
        for seed in entry["seeds"]:
            lines.append(f"| {seed['seed']} | " + " | ".join(cell_text(seed["quadrants"][q]) for q in QUADRANTS) + " |")
        if not entry["seeds"]:
            lines.append("| (no fitted seed) |" + " |" * len(QUADRANTS))
        grid = entry["grid"]
        k_labels = [range_label(a, b) for a, b in zip(grid["count_edges"], grid["count_edges"][1:])]
        lines += [
            "\nThe fitted seeds' strings together, by (D, k):\n",
            "| D \\ k | " + " | ".join(k_labels) + " |",
            "|---" * (len(k_labels) + 1) + "|",
        ]
        for (d_lo, d_hi), row in zip(zip(grid["distance_edges"], grid["distance_edges"][1:]), grid["cells"]):
            lines.append(f"| {range_label(d_lo, d_hi)} | " + " | ".join(cell_text(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"
