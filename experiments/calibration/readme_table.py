"""The table of the three quick runs (docs/one-seed.md), from their committed summaries
(quick-run-ape/, quick-run-rope/, quick-run-nope/ in evidence/), so that no number in it is typed by hand:
experiments/calibration/results_pages.py writes it into the page.

Each cell is the mean exact match per bin (training lengths first), then what its one seed shows at
the last bin (passes, fails or inconclusive: crasplab.verdicts.rules.observe_seed, an observation,
not a verdict); the mark says whether that is in line with the prediction (APE and NoPE against
their theorems, RoPE against the APE prediction, without a theorem). A model below the fit
threshold on its training lengths is shown as "did not fit" and gets no mark.
"""

from __future__ import annotations

import json
from pathlib import Path

from crasp.position_encodings import IN_THE_PAPERS, PE_NAMES

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"  # the kept runs
ENCODINGS = {pe: PE_NAMES[pe] for pe in IN_THE_PAPERS}  # folder suffix -> name shown


def cell(row: dict) -> str:
    accuracies = " / ".join(f"{b['mean']:.2f}" for b in row["bins"])
    if not row["seeds_fit"]:
        return f"{accuracies} (**did not fit**)"
    observed = row["observed"]
    mark = {True: " ✓", False: " ✗", None: ""}[row["agrees"]]
    return f"{accuracies} ({observed}{mark})"


def table(summaries: dict[str, dict]) -> str:
    bins = " / ".join(f"{lo}-{hi}" for lo, hi in summaries["ape"]["bins"])
    lines = [
        f"| task | APE predicted | APE {bins} | RoPE {bins} | NoPE predicted | NoPE {bins} |",
        "|---|---|---|---|---|---|",
    ]
    rows = {pe: {row["task"]: row for row in summary["rows"]} for pe, summary in summaries.items()}
    for task, ape in rows["ape"].items():
        rope, nope = rows["rope"][task], rows["nope"][task]
        lines.append(
            f"| {task} | {ape['predicted']['label']} | {cell(ape)} | {cell(rope)} | "
            f"{nope['predicted']['label']} | {cell(nope)} |"
        )
    return "\n".join(lines)


def agreement_line(summaries: dict[str, dict]) -> str:
    parts = []
    for pe, summary in summaries.items():
        not_fit = len(summary["did_not_fit"])
        parts.append(
            f"{ENCODINGS[pe]} {summary['agreements']} of {summary['judged']}"
            + (f" ({not_fit} did not fit)" if not_fit else "")
        )
    over = "over the tasks that fit, have a prediction and are conclusive"
    return f"In line with the prediction, {over}: " + ", ".join(parts) + "."


def committed_summaries() -> dict[str, dict]:
    """encoding -> summary.json of its quick run copied here."""
    return {pe: json.loads((EVIDENCE / f"quick-run-{pe}" / "summary.json").read_text()) for pe in ENCODINGS}
