"""The protocol runs' tables, from the kept runs (the folders named in CURRENT_RUNS, EARLIER_RUNS and
PAPER_SCALE_RUNS, in evidence/), so that no number in them is typed by hand:
experiments/calibration/results_pages.py writes them into the README and the result pages of docs/.

Each test-bin cell: the task's verdict, how many fitted seeds passed, the range of their
accuracies, and a mark for agreement with the prediction; a bin that cannot discriminate (a
bounded program exact on the training lengths passes it), or where the task's control
(Task.control in crasp.tasks, at the same depth) does not generalize or did not run, is
shown as "not counted". The headline table sets the current recipe's runs side by side, one row
per task, sampler and depth, one column per position encoding, with the controls applied across
runs; below it, what the count holds, the scale, and the paper's numbers beside the lab's.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from crasp.position_encodings import IN_THE_PAPERS, PE_NAMES
from crasplab.reports.length_gen import read_settings
from crasplab.reports.protocol import control_text, recipe_text
from crasplab.verdicts.counting import apply_controls
from crasplab.verdicts.rules import Verdict, counted_agreement
from crasplab.reports.what_learned import NONE_OF_THEM, behaviour
from crasplab.train.config import PRESETS, RunSettings

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"  # the kept runs
# The current recipe's runs (the README's findings, the headline of docs/results.md and the tables of
# docs/protocol-runs.md), and the runs of the recipes before it (docs/protocol-history.md).
CURRENT_RUNS = (
    "protocol-clip-ape-unique",
    "protocol-clip-ape-spread",
    "protocol-clip-ape-last-55-64",
    "protocol-clip-ape",
    "protocol-clip-ape-copying",
    "protocol-clip-ape-nf-repeat-break",
    "protocol-clip-ape-nb",
    "protocol-clip-ape-ub4",
    "protocol-clip-ape-uf4",
    "protocol-clip-rope-unique",
    "protocol-clip-rope-copying",
    "protocol-clip-rope-nb",
    "protocol-clip-rope-ub4",
    "protocol-clip-rope-uf4",
    "protocol-clip-rope",
    "protocol-clip-rope-spread",
    "protocol-clip-nope",
    "protocol-clip-nope-last",
    "protocol-clip-nope-spread",
    "protocol-clip-nope-copying",
    "protocol-clip-nope-nb",
    "protocol-clip-nope-ub4",
    "protocol-clip-nope-uf4",
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
# The paper's scale (preset protocol-paper), trained on a lent GPU by benchmarks/gpu_run.py:
# docs/paper-scale.md.
PAPER_SCALE_RUNS = ("protocol-paper-ape",)
RUNS = CURRENT_RUNS + EARLIER_RUNS + PAPER_SCALE_RUNS
# The headline's rows: the paper's sampler first, each in the task library's order.
TASK_ORDER = ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast", "UF", "UB", "NF", "NB")
# The encodings the protocol trains (the papers'), by the names the page shows.
ENCODINGS = {pe: PE_NAMES[pe] for pe in IN_THE_PAPERS}
PROTOCOL_PRESET = PRESETS["protocol"]

# The retrieval/copying paper's from-scratch numbers as the lab's spec records them (read from the
# figure-data files of lacoco-lab/always_a_transformer), set beside the lab's by paper_table. None
# is measured here, and none is added that the spec does not give (it has no NoPE numbers for these tasks).
# Trained on inputs of 1-50 with 4 layers x 4 heads x d_model 256, lr 1e-4, up to 30k steps, seeds 0-2.
PAPER_SCALE = (
    "inputs of 1-50, 4 layers x 4 heads x d_model 256, test bins 51-100 and 101-150 (to 3x), 2000 strings a bin"
)
PAPER_BINS = ("51-100", "101-150")
# task -> encoding -> accuracy at 51-100 and 101-150, from the figure data (mean of the seeds the
# figure shows; for NLLast and NRLast under APE one seed of three, see THREE_SEED_MEANS).
PAPER_FIGURE = {
    "UF": {"ape": (0.99, 0.97), "rope": (0.99, 0.99)},
    "UB": {"ape": (0.99, 0.97), "rope": (0.99, 0.99)},
    "NF": {"ape": (0.47, 0.13), "rope": (0.13, 0.0)},
    "NB": {"ape": (0.27, 0.05), "rope": (0.05, 0.0)},
    "UR": {"ape": (0.99, 0.99), "rope": (1.0, 1.0)},
    "UL": {"ape": (0.99, 0.99), "rope": (1.0, 1.0)},
    "NRFirst": {"ape": (1.0, 1.0), "rope": (1.0, 1.0)},
    "NLFirst": {"ape": (1.0, 0.99), "rope": (1.0, 0.99)},
    "NRLast": {"ape": (0.86, 0.47), "rope": (0.45, 0.34)},
    "NLLast": {"ape": (0.77, 0.47), "rope": (0.32, 0.34)},
}
# Where the figure shows one seed: the three seeds' means (APE).
PAPER_THREE_SEED_MEANS = {"NLLast": {"ape": (0.71, 0.41)}, "NRLast": {"ape": (0.85, 0.48)}}


MARKS = {True: " ✓", False: " ✗", None: ""}


def not_counted_reason(b: dict) -> str | None:
    """Why a bin's verdict does not count for or against the prediction, or None where it does."""
    control = b.get("control")
    reasons = ["a bounded program passes"] if b["discriminates"] is False else []
    if control and control["verdict"] != Verdict.GENERALIZES:
        reasons.append(control_text(control))
    return "; ".join(reasons) or None


def bin_cell(b: dict, row: dict) -> str:
    seeds = b["seeds"]
    passing = sum(s["outcome"] == "pass" for s in seeds)
    accuracies = [s["correct"] / s["total"] for s in seeds]
    spread = f"{min(accuracies):.2f}-{max(accuracies):.2f}" if len(seeds) > 1 else f"{accuracies[0]:.2f}"
    if b["verdict"] == Verdict.TOO_FEW:
        # no verdict, so nothing to count: what matters is why the seeds did not fit
        return f"{Verdict.TOO_FEW} ({passing} of {len(seeds)} pass, {spread}{improving_note(row, '; ')})"
    reason = not_counted_reason(b)
    counted = f"; not counted: {reason}" if reason else ""
    return f"{b['verdict']}{MARKS[b['agrees']]} ({passing} of {len(seeds)} pass, {spread}{counted})"


def task_layers(settings: RunSettings, task: str) -> int:
    """The depth a task of the run trained at: the run's model with the task's changes."""
    return settings.model_for(task).n_layers


def model_width(settings: RunSettings) -> str:
    """The model settings a recipe fixes for every task (all but the depth, which a task may change
    and each row states): a table is comparable only with tables of the same width."""
    model = settings.model
    changed = {name for changes in settings.model_overrides.values() for name in changes} - {"n_layers"}
    if changed:
        raise ValueError(f"tasks of a protocol run change {sorted(changed)} of the model: not one recipe")
    return f"{model.n_heads} heads x d_model {model.d_model} (d_ff {model.d_ff or 4 * model.d_model}, {model.dtype})"


# Settings a run's tasks may differ in without being two recipes: the positions follow each task's
# longest test string (or the recipe's reach), and how many strings score a bin changes no model.
PER_TASK_SETTINGS = ("max_positions", "position_reach", "test_bins", "eval_examples_per_length")


def recipe_line(settings: RunSettings) -> str:
    """The recipe the run trained under, from its settings: the part that differs between the
    protocol's recipes (a table is only comparable with tables of the same recipe), training
    settings and the model's width. The test bins, and so the positions trained, are each row's."""
    trains = [
        {name: value for name, value in train.to_dict().items() if name not in PER_TASK_SETTINGS}
        for train in settings.train.values()
    ]
    if any(train != trains[0] for train in trains):
        raise ValueError("the tasks of a protocol run trained under different settings: not one recipe")
    return f"Recipe: {recipe_text(next(iter(settings.train.values())))}; models of {model_width(settings)}"


def seed_range(settings: RunSettings) -> str:
    return f"{settings.seeds[0]}-{settings.seeds[-1]}"


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
    return Verdict.TOO_FEW + (f" ({note})" if note else "")


def table(summary: dict, settings: RunSettings) -> str:
    rows = summary["protocol"]["rows"]
    bins = test_bins(summary)
    lines = [
        f"{recipe_line(settings)}; seeds {seed_range(settings)}.",
        "",
        "| task | layers | predicted | fitted of seeds run | " + " | ".join(bins) + " |",
        "|---|---|---|---|" + "---|" * len(bins),
    ]
    for row in rows:
        cells = [bin_cell(b, row) for b in row["bins"]] or [too_few(row)] * len(bins)
        lines.append(
            f"| {row['task']} | {task_layers(settings, row['task'])} | {row['predicted']} | "
            f"{len(row['fitted'])} of {len(row['seeds_run'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def committed_runs(runs=RUNS) -> dict[str, tuple[dict, RunSettings]]:
    """run -> (its summary.json, its settings)."""
    return {
        run: (json.loads((EVIDENCE / run / "summary.json").read_text()), read_settings(EVIDENCE / run)) for run in runs
    }


def sampler_of(settings: RunSettings, task: str) -> str:
    """The sampler a task drew its strings from in a run: spread, repeat-break (copying with
    repeats, tested on the repeat-break shape) or the paper's."""
    overrides = settings.task_overrides[task]
    if overrides.get("occurrences") == "spread":
        return "spread"
    return "repeat-break" if overrides.get("repeat_break_from") else "paper's"


def run_sampler(settings: RunSettings) -> str:
    """The sampler a run is set beside others by: the one its tasks draw other than the paper's (a
    control that runs beside them on its own sampler goes with them), else the paper's."""
    return next((name for task in settings.tasks if (name := sampler_of(settings, task)) != "paper's"), "paper's")


def positions(settings: RunSettings, task: str) -> int:
    """The longest input whose positions the task's models trained: the recipe's reach, or where it
    has none (0, as in every run made before the recipe fixed it), the longest test bin's."""
    train = settings.train[task]
    return train.position_reach or train.test_bins[-1][1]


def row_key(settings: RunSettings, task: str) -> tuple:
    """A headline row: the task, its depth, its run's sampler and the positions it trained. A
    task's control is the row of the control task with the same rest of the key."""
    return task, task_layers(settings, task), run_sampler(settings), positions(settings, task)


def sampler_text(settings: RunSettings, task: str) -> str:
    own = sampler_of(settings, task)
    return own if own == run_sampler(settings) else f"{own} (control, beside {run_sampler(settings)})"


def verdict_word(b: dict) -> str:
    """A bin's verdict in a few words: its agreement mark (and the control it counted on), or why
    it is not counted."""
    reason = not_counted_reason(b)
    if reason:
        return f"{b['verdict']} (not counted: {reason})"
    control = b.get("control")
    counted_on = f" (control {control['task']} generalizes)" if control else ""
    return b["verdict"] + MARKS[b["agrees"]] + counted_on


def headline_cells(runs: dict[str, tuple[dict, RunSettings]]) -> dict[str, dict[tuple, dict]]:
    """encoding -> row_key -> its row, with each bin's agreement counted afresh: the discrimination
    check as the run's summary holds it, and the control (Task.control) of the same encoding, depth,
    sampler and positions, from whichever run holds it."""
    cells = defaultdict(dict)
    for summary, settings in runs.values():
        for row in summary["protocol"]["rows"]:
            key = row_key(settings, row["task"])
            if key in cells[summary["pe"]]:
                raise ValueError(
                    f"{key[0]} at {key[1]} layers on the {key[2]} sampler, positions to {key[3]}, under "
                    f"{summary['pe']} is in two runs"
                )
            row = copy.deepcopy(row)
            for b in row["bins"]:
                b.pop("control", None)
                b["agrees"] = counted_agreement(row["generalizes"], b["verdict"], b["discriminates"])
            row["layers"] = key[1]
            cells[summary["pe"]][key] = row
    for by_key in cells.values():
        apply_controls(by_key)
    return cells


def _cell(row: dict) -> str:
    # a row without a verdict reads alike whether none or too few of its seeds fit
    has_verdict = row["bins"] and row["bins"][0]["verdict"] != Verdict.TOO_FEW
    verdicts = [verdict_word(b) for b in row["bins"]] if has_verdict else [too_few(row)]
    return f"{len(row['fitted'])} of {len(row['seeds_run'])} fit; " + " / ".join(verdicts)


def headline(runs: dict[str, tuple[dict, RunSettings]]) -> str:
    """One table of the given runs, which must share one recipe (training settings and model
    width): per task, sampler and depth, each encoding's fitted seeds and verdict at each test
    bin, then what is counted per encoding (count_lines) and the scale (scale_line)."""
    recipes = {recipe_line(settings) for _, settings in runs.values()}
    if len(recipes) != 1:
        raise ValueError(f"the headline sets side by side runs of one recipe; these have {len(recipes)}")
    cells = headline_cells(runs)
    bins, samplers = {}, {}
    for summary, settings in runs.values():
        for row in summary["protocol"]["rows"]:
            key = row_key(settings, row["task"])
            bins.setdefault(key, " / ".join(test_bins(summary)))
            samplers.setdefault(key, sampler_text(settings, row["task"]))
    keys = sorted(bins, key=lambda key: (key[2] != "paper's", key[2], TASK_ORDER.index(key[0]), key[1], key[3]))
    seeds = sorted({seed_range(settings) for _, settings in runs.values()})
    lines = [
        f"{next(iter(recipes))}; seeds {', '.join(seeds)}"
        + (" (each run its own block of fresh seeds)." if len(seeds) > 1 else "."),
        "",
        "| task | layers | sampler | test bins | APE predicted | APE | RoPE | NoPE predicted | NoPE |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        predicted = {pe: cells[pe][key]["predicted"] for pe in ENCODINGS if key in cells[pe]}
        ape_predicted = predicted.get("ape") or predicted.get("rope", "").replace(" (no theorem)", "")
        shown = [_cell(cells[pe][key]) if key in cells[pe] else "not run" for pe in ENCODINGS]
        lines.append(
            f"| {key[0]} | {key[1]} | {samplers[key]} | {bins[key]} | {ape_predicted} | {shown[0]} | {shown[1]} | "
            f"{predicted.get('nope', '·')} | {shown[2]} |"
        )
    learned = learned_lines(runs)
    return "\n".join(
        lines + [""] + count_lines(cells) + [""] + learned + ([""] if learned else []) + [scale_line(runs)]
    )


@dataclass
class Tally:
    """One encoding's counted verdicts: per kind of prediction (True: "generalizes", False: "does
    not generalize"), the bins counted and those of them that agree; and for the predictions "does
    not generalize", the bins left out, by why."""

    counted: dict[bool, list[str]] = field(default_factory=lambda: defaultdict(list))
    agreeing: dict[bool, list[str]] = field(default_factory=lambda: defaultdict(list))
    left_out: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def count(self, kind: bool | None = None) -> tuple[int, int]:
        """(agreeing, counted) for one kind of prediction, or for both."""
        kinds = (True, False) if kind is None else (kind,)
        return sum(len(self.agreeing[k]) for k in kinds), sum(len(self.counted[k]) for k in kinds)


def tally(cells: dict[str, dict[tuple, dict]]) -> dict[str, Tally]:
    """encoding -> its Tally, over the headline's cells ("mixed" and "inconclusive" count neither way)."""
    tallies = {}
    for pe in ENCODINGS:
        tallies[pe] = counts = Tally()
        for (task, layers, sampler, _), row in sorted(cells.get(pe, {}).items()):
            for b in row["bins"]:
                where = f"{task} {b['lo']}-{b['hi']}" + (f" ({sampler})" if sampler != "paper's" else "")
                if b["agrees"] is not None:
                    counts.counted[row["generalizes"]].append(where)
                    if b["agrees"]:
                        counts.agreeing[row["generalizes"]].append(where)
                elif row["generalizes"] is False and b["verdict"] != Verdict.TOO_FEW and not_counted_reason(b):
                    counts.left_out[not_counted_reason(b)].append(where)
    return tallies


def count_lines(cells: dict[str, dict[tuple, dict]]) -> list[str]:
    """The count per encoding, then what it holds: the counted verdicts by kind of prediction, and
    for the predictions "does not generalize", each bin left out and why."""
    counts, kinds, left_out = [], [], []
    for pe, counted in tally(cells).items():
        name = ENCODINGS[pe]
        counts.append(f"{name} {counted.count()[0]} of {counted.count()[1]}")
        yes, no = counted.counted[True], counted.counted[False]
        kinds.append(
            f'{name}: {len(yes)} of a prediction "generalizes"; '
            + (
                f'{len(no)} of a prediction "does not generalize" ({", ".join(no)})'
                if no
                else 'no prediction "does not generalize" is counted'
            )
        )
        if counted.left_out:
            left_out.append(
                f"{name}: " + "; ".join(f"{', '.join(where)}: {why}" for why, where in counted.left_out.items())
            )
    return [
        f"Counted verdicts that agree with the prediction: {'; '.join(counts)}.",
        "",
        "What the count holds, per encoding, by the prediction's kind: " + ". ".join(kinds) + ".",
        "",
        'Verdicts on a prediction "does not generalize" that are not counted, and why: '
        + (". ".join(left_out) or "none")
        + ".",
    ]


def learned_lines(runs) -> list[str]:
    """What the fitted seeds of each kept run's tasks predicted not to generalize learned
    (what_learned.json, experiments/what_learned.py): per task and bin, how many behave like none
    of the bounded programs exact on training, and the range of their closest member's agreement."""
    lines = []
    for run in runs:
        path = EVIDENCE / run / "what_learned.json"
        if not path.exists():
            continue
        learned = json.loads(path.read_text())
        for task, entry in learned["tasks"].items():
            shape = [s["shape_at_training"] for s in entry["seeds"] if s.get("shape_at_training")]
            if shape:
                shares = [cell["agreeing"] / cell["total"] for cell in shape]
                lines.append(
                    f"{task} ({run}) on its test bins' shape at the training lengths: {min(shares):.2f}-"
                    f"{max(shares):.2f} right, so its models are not exact on the shape before the length grows"
                )
            by_bin = defaultdict(list)
            for seed in entry["seeds"]:
                for b in seed["bins"]:
                    by_bin[b["bin"]].append(b["members"])
            for bin_, seeds in by_bin.items():
                like_none = [
                    members for members in seeds if behaviour(members, learned["threshold"]).startswith(NONE_OF_THEM)
                ]
                closest = defaultdict(list)
                for members in like_none:
                    name, cell = max(members.items(), key=lambda item: item[1]["agreeing"] / item[1]["total"])
                    closest[name].append(cell["agreeing"] / cell["total"])
                nearest = "; ".join(f"{name} at {min(v):.2f}-{max(v):.2f}" for name, v in closest.items())
                lines.append(
                    f"{task} {bin_} ({run}): {len(like_none)} of {len(seeds)} fitted seeds agree with no bounded "
                    f"program exact on training on {learned['threshold']:g} of the strings"
                    + (f" (the closest: {nearest})" if nearest else "")
                )
    return [f'What the models of a prediction "does not generalize" learned: {". ".join(lines)}.'] if lines else []


def scale_line(runs: dict[str, tuple[dict, RunSettings]]) -> str:
    """The lab's scale, from the runs' configs, beside the paper's (PAPER_SCALE)."""
    lengths, depths, bins = set(), set(), set()
    for summary, settings in runs.values():
        for task in settings.tasks:
            lo, hi = settings.train[task].train_lengths
            lengths.add(f"{lo}-{hi}")
            depths.add(task_layers(settings, task))
            bins.add(" and ".join(test_bins(summary)))
    width = {model_width(settings) for _, settings in runs.values()}
    deeper = sorted({task for _, settings in runs.values() for task in settings.model_overrides})
    return (
        f"Scale: trained on input lengths {', '.join(sorted(lengths))}; models of "
        f"{' or '.join(map(str, sorted(depths)))} layers x {' / '.join(sorted(width))}"
        + (f" ({', '.join(deeper)} at {max(depths)} layers)" if deeper else "")
        + f"; test bins {'; '.join(sorted(bins))}. The paper: {PAPER_SCALE}."
    )


def _accuracies(row: dict) -> str:
    """A row's fitted seeds at each test bin: mean (min-max), the mean only to set beside the
    paper's means (no verdict is made from it)."""
    parts = []
    for b in row["bins"]:
        values = [s["correct"] / s["total"] for s in b["seeds"]]
        parts.append(f"{sum(values) / len(values):.2f} ({min(values):.2f}-{max(values):.2f})")
    return " / ".join(parts) or "no fitted seed"


def paper_table(runs: dict[str, tuple[dict, RunSettings]]) -> str:
    """The paper's figure numbers beside the lab's on the paper's sampler (each task at the depth
    the preset trains it), per encoding, with each scale stated in the header."""
    cells = headline_cells(runs)
    header_bins = " / ".join(PAPER_BINS)
    lines = [
        f"| task | paper APE {header_bins} | lab APE | paper RoPE {header_bins} | lab RoPE | lab NoPE |",
        "|---|---|---|---|---|---|",
    ]
    for task in PAPER_FIGURE:
        key = (task, preset_depth(task), "paper's", PROTOCOL_PRESET.train.position_reach)
        rows = {pe: by_key[key] for pe, by_key in cells.items() if key in by_key}
        lab = {pe: _accuracies(rows[pe]) if pe in rows else "not run" for pe in ENCODINGS}
        paper = {}
        for pe in PAPER_FIGURE[task]:
            figure = " / ".join(f"{a:.2f}" for a in PAPER_FIGURE[task][pe])
            means = PAPER_THREE_SEED_MEANS.get(task, {}).get(pe)
            paper[pe] = figure + (f" (one seed; three seeds: {' / '.join(f'{a:.2f}' for a in means)})" if means else "")
        lines.append(f"| {task} | {paper['ape']} | {lab['ape']} | {paper['rope']} | {lab['rope']} | {lab['nope']} |")
    return "\n".join(lines)


def preset_depth(task: str) -> int:
    """The depth the protocol preset trains a task at (NB deeper than the rest)."""
    return PROTOCOL_PRESET.model_changes_for(task).get("n_layers", PROTOCOL_PRESET.model.n_layers)
