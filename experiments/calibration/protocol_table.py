"""Print the protocol runs' tables for the README and docs/protocol-history.md from the kept runs
(the folders named in CURRENT_RUNS and EARLIER_RUNS, here), so that no number in them is typed by
hand.

    python experiments/calibration/protocol_table.py   # paste its output over the documents' tables

Each test-bin cell: the task's verdict, how many fitted seeds passed, the range of their
accuracies, and a mark for agreement with the prediction; a bin that cannot discriminate (a
bounded program exact on the training lengths passes it), or where the task's control (its
"first" twin) does not generalize, is shown as "not counted". The headline table sets the current
recipe's runs side by side, one row per task and sampler, one column per position encoding.
"""

from __future__ import annotations

import json
from pathlib import Path

from crasplab.results.protocol import recipe_text
from crasplab.results.verdicts import TOO_FEW

HERE = Path(__file__).resolve().parent
# The current recipe's runs (the README's tables and its headline table), and the runs of the
# recipes before it (docs/protocol-history.md).
CURRENT_RUNS = (
    "protocol-clip-ape-unique",
    "protocol-clip-ape-spread",
    "protocol-clip-ape",
    "protocol-clip-ape-copying",
    "protocol-clip-ape-nb",
    "protocol-clip-rope-unique",
    "protocol-clip-rope-copying",
    "protocol-clip-rope-nb",
    "protocol-clip-rope",
    "protocol-clip-rope-spread",
    "protocol-clip-nope",
    "protocol-clip-nope-last",
    "protocol-clip-nope-spread",
)
EARLIER_RUNS = (
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
RUNS = CURRENT_RUNS + EARLIER_RUNS
# The headline's rows: the paper's sampler first, each in the task library's order.
TASK_ORDER = ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast", "UF", "UB", "NF", "NB")
ENCODINGS = {"ape": "APE", "rope": "RoPE", "nope": "NoPE"}


MARKS = {True: " ✓", False: " ✗", None: ""}


def not_counted_reason(b: dict) -> str | None:
    """Why a bin's verdict does not count for or against the prediction, or None where it does."""
    control = b.get("control")
    if b["discriminates"] is False:
        return "a bounded program passes"
    if control and control["verdict"] != "generalizes":
        return f"its control {control['task']} {control['verdict']}"
    return None


def bin_cell(b: dict, row: dict) -> str:
    seeds = b["seeds"]
    passing = sum(s["outcome"] == "pass" for s in seeds)
    accuracies = [s["correct"] / s["total"] for s in seeds]
    spread = f"{min(accuracies):.2f}-{max(accuracies):.2f}" if len(seeds) > 1 else f"{accuracies[0]:.2f}"
    if b["verdict"] == TOO_FEW:
        # no verdict, so nothing to count: what matters is why the seeds did not fit
        return f"{TOO_FEW} ({passing} of {len(seeds)} pass, {spread}{improving_note(row, '; ')})"
    reason = not_counted_reason(b)
    counted = f"; not counted: {reason}" if reason else ""
    return f"{b['verdict']}{MARKS[b['agrees']]} ({passing} of {len(seeds)} pass, {spread}{counted})"


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


def test_bins(summary: dict) -> list[str]:
    """The run's test bins ("21-30"), from its summary: the first of its bins is the training range."""
    return [f"{lo}-{hi}" for lo, hi in summary["bins"][1:]]


def improving_note(row: dict, separator: str) -> str:
    """How many of the row's unfitted seeds were still improving when the rate reached 0 (a
    defect of the recipe, not of the task), after `separator`; empty where none was."""
    improving = len(row["still_improving"])
    return f"{separator}{improving} still improving at the cap" if improving else ""


def too_few(row: dict) -> str:
    """The verdict of a task with too few fitted seeds, with its unfitted seeds still improving."""
    note = improving_note(row, "")
    return TOO_FEW + (f" ({note})" if note else "")


def table(summary: dict, config: dict) -> str:
    rows = summary["protocol"]["rows"]
    bins = test_bins(summary)
    lines = [
        recipe_line(config),
        "",
        "| task | predicted | fitted of seeds run | " + " | ".join(bins) + " |",
        "|---|---|---|" + "---|" * len(bins),
    ]
    for row in rows:
        cells = [bin_cell(b, row) for b in row["bins"]] or [too_few(row)] * len(bins)
        lines.append(
            f"| {row['task']} | {row['predicted']} | {len(row['fitted'])} of {len(row['seeds_run'])} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def committed_runs(runs=RUNS) -> dict[str, tuple[dict, dict]]:
    """run -> (its summary.json, its config.json)."""
    return {
        run: tuple(json.loads((HERE / run / name).read_text()) for name in ("summary.json", "config.json"))
        for run in runs
    }


def sampler_of(config: dict, task: str) -> str:
    return "spread" if config["task_overrides"].get(task, {}).get("occurrences") == "spread" else "paper's"


def verdict_word(b: dict) -> str:
    """A bin's verdict in a few words: its agreement mark, or that it is not counted."""
    return f"{b['verdict']} (not counted)" if not_counted_reason(b) else b["verdict"] + MARKS[b["agrees"]]


def headline(runs: dict[str, tuple[dict, dict]]) -> str:
    """One table of the given runs, which must share one recipe: per task and sampler, each
    encoding's fitted seeds and verdict at each test bin, and per encoding the counted verdicts
    that agree with the prediction."""
    recipes = {recipe_line(config) for _, config in runs.values()}
    if len(recipes) != 1:
        raise ValueError(f"the headline sets side by side runs of one recipe; these have {len(recipes)}")
    cells, predicted, bins, counts = {}, {}, {}, {pe: [0, 0] for pe in ENCODINGS}
    for summary, config in runs.values():
        pe = summary["pe"]
        for row in summary["protocol"]["rows"]:
            key = (row["task"], sampler_of(config, row["task"]))
            if (key, pe) in cells:
                raise ValueError(f"{key[0]} on the {key[1]} sampler under {pe} is in two runs")
            predicted[key, pe] = row["predicted"]
            # a row without a verdict reads alike whether none or too few of its seeds fit
            has_verdict = row["bins"] and row["bins"][0]["verdict"] != TOO_FEW
            verdicts = [verdict_word(b) for b in row["bins"]] if has_verdict else [too_few(row)]
            cells[key, pe] = f"{len(row['fitted'])} of {len(row['seeds_run'])} fit; " + " / ".join(verdicts)
            bins.setdefault(key, " / ".join(test_bins(summary)))
            for b in row["bins"]:
                if b["agrees"] is not None and not_counted_reason(b) is None:
                    counts[pe][0] += b["agrees"]
                    counts[pe][1] += 1
    keys = sorted(bins, key=lambda key: (key[1] != "paper's", TASK_ORDER.index(key[0])))
    lines = [
        next(iter(recipes)),
        "",
        "| task | sampler | test bins | APE predicted | APE | RoPE | NoPE predicted | NoPE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        ape_predicted = predicted.get((key, "ape")) or predicted.get((key, "rope"), "").replace(" (no theorem)", "")
        lines.append(
            f"| {key[0]} | {key[1]} | {bins[key]} | {ape_predicted} | "
            + " | ".join(
                [cells.get((key, "ape"), "not run"), cells.get((key, "rope"), "not run")]
                + [predicted.get((key, "nope"), "·"), cells.get((key, "nope"), "not run")]
            )
            + " |"
        )
    agreeing = "; ".join(f"{ENCODINGS[pe]} {agree} of {judged}" for pe, (agree, judged) in counts.items())
    lines += ["", f"Counted verdicts that agree with the prediction: {agreeing}."]
    return "\n".join(lines)


def main() -> None:
    print(f"headline:\n\n{headline(committed_runs(CURRENT_RUNS))}\n")
    for run, (summary, config) in committed_runs().items():
        print(f"{run}:\n\n{table(summary, config)}\n")


if __name__ == "__main__":
    main()
