"""Learning curves of the calibration study: one panel per (candidate, task), accuracy per bin
against training steps, from evidence/curves/*.json; and a table of the step at
which the training bin first reached 100% and the accuracies then and at the end.

    python experiments/calibration/plot_calibration.py   # writes curves.png and curves.md beside them
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CURVES = Path(__file__).resolve().parents[2] / "evidence" / "curves"


def main() -> None:
    panels = []
    for path in sorted(CURVES.glob("*.json")):
        for task, curve in json.loads(path.read_text()).items():
            panels.append((path.stem, task, curve))
    columns = 4
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.6 * rows), squeeze=False, sharey=True)
    for ax, (candidate, task, curve) in zip(axes.flat, panels):
        steps = [step for step, _ in curve["eval"]]
        for k, (lo, hi) in enumerate(curve["bins"]):
            ax.plot(
                steps,
                [accuracies[k] for _, accuracies in curve["eval"]],
                marker=".",
                label=f"{lo}-{hi}" + (" (train)" if k == 0 else ""),
            )
        ax.set_title(f"{candidate}: {task} ({curve['train_seconds']:.0f} s)", fontsize=9)
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=6, loc="center right")
        ax.set_xlabel("step", fontsize=8)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    figure.tight_layout()
    figure.savefig(CURVES / "curves.png", dpi=110)
    (CURVES / "curves.md").write_text(table(panels))
    print(f"wrote {CURVES / 'curves.png'} ({len(panels)} panels) and {CURVES / 'curves.md'}")


def table(panels) -> str:
    lines = [
        "| candidate | task | bins | first 100% in distribution: step, accuracy per bin | "
        "end: step, accuracy per bin | best on last bin: step, accuracy per bin | train s |",
        "|---|---|---|---|---|---|---|",
    ]
    for candidate, task, curve in panels:
        evals = curve["eval"]
        first = next(((step, acc) for step, acc in evals if acc[0] == 1.0), None)
        best = max(evals, key=lambda e: (e[1][-1], e[1][1]))
        show = lambda e: "-" if e is None else f"{e[0]}: " + " / ".join(f"{a:.2f}" for a in e[1])  # noqa: E731
        bins = " ".join(f"{lo}-{hi}" for lo, hi in curve["bins"])
        lines.append(
            f"| {candidate} | {task} | {bins} | {show(first)} | {show(evals[-1])} | {show(best)} "
            f"| {curve['train_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
