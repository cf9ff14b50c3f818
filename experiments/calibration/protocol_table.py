"""The top-level README's protocol tables, printed from the committed protocol runs' summaries
(the folders named in RUNS, here), so that no number in them is typed by hand.

    python experiments/calibration/protocol_table.py   # paste its output over the README's tables

Each test-bin cell: the task's verdict, how many fitted seeds passed, the range of their
accuracies, and a mark for agreement with the prediction; a bin that cannot discriminate (a
bounded program exact on the training lengths passes it), or where the task's control (its
"first" twin) does not generalize, is shown as "not counted".
"""

from __future__ import annotations

import json
from pathlib import Path

from crasplab.results.protocol import recipe_text

HERE = Path(__file__).resolve().parent
RUNS = (
    "protocol-clip-ape-unique",
    "protocol-clip-ape-spread",
    "protocol-clip-ape",
    "protocol-clip-ape-copying",
    "protocol-clip-ape-nb",
    "protocol-clip-rope-unique",
    "protocol-clip-rope-copying",
    "protocol-clip-rope-nb",
    "protocol-clip-nope",
    "protocol16k-ape-unique",
    "protocol16k-ape-copying",
    "protocol16k-ape",
    "protocol-ape",
    "protocol-ape-unique",
    "protocol-ape-spread",
    "protocol-ape-copying",
    "protocol-rope",
    "protocol-rope-unique",
    "protocol-rope-copying",
    "protocol-nope",
)


def bin_cell(b: dict) -> str:
    seeds = b["seeds"]
    passing = sum(s["outcome"] == "pass" for s in seeds)
    accuracies = [s["correct"] / s["total"] for s in seeds]
    spread = f"{min(accuracies):.2f}-{max(accuracies):.2f}" if len(seeds) > 1 else f"{accuracies[0]:.2f}"
    mark = {True: " ✓", False: " ✗", None: ""}[b["agrees"]]
    control = b.get("control")
    counted = (
        "; not counted: a bounded program passes"
        if b["discriminates"] is False
        else f"; not counted: its control {control['task']} {control['verdict']}"
        if control and control["verdict"] != "generalizes"
        else ""
    )
    return f"{b['verdict']}{mark} ({passing} of {len(seeds)} pass, {spread}{counted})"


def recipe_line(config: dict) -> str:
    """The recipe the run trained under, from its config.json: the part that differs between the
    protocol's recipes (a table is only comparable with tables of the same recipe)."""
    # max_positions follows each task's longest test string; every other setting is the recipe's
    trains = [{k: v for k, v in t.items() if k != "max_positions"} for t in config["train"].values()]
    if any(t != trains[0] for t in trains):
        raise ValueError("the tasks of a protocol run trained under different settings: not one recipe")
    seeds = config["seeds"]
    train = trains[0]
    return f"Recipe: {recipe_text(train)}; seeds {seeds[0]}-{seeds[-1]}."


def table(summary: dict, config: dict) -> str:
    rows = summary["protocol"]["rows"]
    bins = [f"{b['lo']}-{b['hi']}" for b in next(row for row in rows if row["bins"])["bins"]]
    lines = [
        recipe_line(config),
        "",
        "| task | predicted | fitted of seeds run | " + " | ".join(bins) + " |",
        "|---|---|---|" + "---|" * len(bins),
    ]
    for row in rows:
        cells = [bin_cell(b) for b in row["bins"]] or ["too few fitted seeds"] * len(bins)
        lines.append(
            f"| {row['task']} | {row['predicted']} | {len(row['fitted'])} of {len(row['seeds_run'])} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def committed_runs() -> dict[str, tuple[dict, dict]]:
    """run -> (its summary.json, its config.json)."""
    return {
        run: tuple(json.loads((HERE / run / name).read_text()) for name in ("summary.json", "config.json"))
        for run in RUNS
    }


def main() -> None:
    for run, (summary, config) in committed_runs().items():
        print(f"{run}:\n\n{table(summary, config)}\n")


if __name__ == "__main__":
    main()
