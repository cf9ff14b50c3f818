"""The in-context evaluation report, computed from a run folder's files only.

Inputs: `config.json` (tasks, lengths, n, model) and `results.jsonl` (one record per prompt:
task, length, index, expected, output, correct, seconds). Outputs, written atomically into the
same folder: `summary.json`, `report.md` and `accuracy_by_length.png`.

Intervals are 95%: Wilson score intervals for an accuracy, Newcombe's hybrid score interval
(his method 10, built from the two Wilson intervals) for a difference of two independent
accuracies (two tasks' prompts are drawn independently). Gaps are computed per length and pooled
over all lengths (the counts summed). The conclusions are drawn from the pooled gaps, so they are
the family that reports.statistics corrects (Holm): a report's 10 pooled gaps, or every pooled
gap of the models compared side by side; the per-length gaps are descriptive. Beside each task,
its floor (reports.floors): the best trivial strategy's accuracy on the same prompts.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

from crasp.prediction import predict
from crasp.tasks import COPYING_CODES, LEFT_OR_BACKWARD, RETRIEVAL_CODES
from crasplab.reports.figures import pyplot, save_figure, set_title
from crasplab.reports.floors import at_floor, task_floor
from crasplab.records.files import rebuild_report
from crasp.intervals import wilson_interval
from crasplab.reports.intervals import difference_interval
from crasplab.reports.statistics import correct_family, difference_p_value, p_value_text
from crasplab.incontext.settings import PretrainedSettings
from crasplab.records.answers import PromptAnswer, read_results
from crasplab.records.run_folder import read_run_settings

FIGURE_FILE = "accuracy_by_length.png"
EXPERIMENT = "experiments/pretrained.py"

# (kind, better-by-hypothesis, other): the paper reports right/forward above left/backward and
# unique above non-unique; each gap is accuracy(first) - accuracy(second).
GAPS = (
    ("direction", "UR", "UL"),
    ("direction", "UF", "UB"),
    ("direction", "NRFirst", "NLFirst"),
    ("direction", "NRLast", "NLLast"),
    ("uniqueness", "UR", "NRFirst"),
    ("uniqueness", "UR", "NRLast"),
    ("uniqueness", "UL", "NLFirst"),
    ("uniqueness", "UL", "NLLast"),
    ("uniqueness", "UF", "NF"),
    ("uniqueness", "UB", "NB"),
)


def _counts(records: list[PromptAnswer]) -> dict[tuple[str, int], tuple[int, int]]:
    correct, total = defaultdict(int), defaultdict(int)
    for record in records:
        key = (record.task, record.length)
        correct[key] += bool(record.correct)
        total[key] += 1
    return {key: (correct[key], total[key]) for key in total}


def _gap(kind: str, first: str, second: str, counts: dict, lengths: list[int]) -> dict | None:
    def pooled(task):
        pairs = [counts[(task, length)] for length in lengths if (task, length) in counts]
        return sum(c for c, _ in pairs), sum(t for _, t in pairs)

    per_length = []
    for length in lengths:
        if (first, length) in counts and (second, length) in counts:
            difference, low, high = difference_interval(*counts[(first, length)], *counts[(second, length)])
            per_length.append(dict(length=length, gap=difference, low=low, high=high))
    if not per_length:
        return None
    difference, low, high = difference_interval(*pooled(first), *pooled(second))
    return dict(
        p=difference_p_value(*pooled(first), *pooled(second)),
        kind=kind,
        first=first,
        second=second,
        name=f"{first} - {second}",
        gap=difference,
        low=low,
        high=high,
        per_length=per_length,
    )


def summarize(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    recorded = read_run_settings(run_dir, PretrainedSettings, EXPERIMENT, facts=("architecture",))
    settings = recorded.settings
    records = read_results(run_dir, PromptAnswer)
    counts = _counts(records)
    lengths = list(settings.lengths)
    floors = {
        task: task_floor(task, [record for record in records if record.task == task])
        for task in settings.tasks
        if any(record.task == task for record in records)
    }
    cells = []
    for task in settings.tasks:
        for length in lengths:
            if (task, length) in counts:
                correct, total = counts[(task, length)]
                low, high = wilson_interval(correct, total)
                cells.append(
                    dict(
                        task=task,
                        length=length,
                        correct=correct,
                        total=total,
                        accuracy=correct / total,
                        low=low,
                        high=high,
                    )
                )
    gaps = [
        gap
        for kind, first, second in GAPS
        if first in settings.tasks and second in settings.tasks
        for gap in [_gap(kind, first, second, counts, lengths)]
        if gap is not None
    ]
    correct_family(gaps)
    pooled = {}
    for task in floors:
        correct, total = map(sum, zip(*[counts[(task, n)] for n in lengths if (task, n) in counts]))
        low, high = wilson_interval(correct, total)
        pooled[task] = dict(correct=correct, total=total, accuracy=correct / total, low=low, high=high)
        floors[task]["at_floor"] = at_floor(low, floors[task]["accuracy"])
    for gap in gaps:
        gap["at_floor"] = [task for task in (gap["first"], gap["second"]) if floors[task]["at_floor"]]
    seconds = sum(record.seconds for record in records)
    return dict(
        model=settings.model,
        architecture=recorded.facts["architecture"],
        tasks=list(settings.tasks),
        lengths=lengths,
        planned=len(settings.tasks) * len(lengths) * settings.n,
        evaluated=len(records),
        cells=cells,
        pooled=pooled,
        floors=floors,
        family=f"the {len(gaps)} pooled gaps of this report",
        gaps=gaps,
        predictions={task: dataclasses.asdict(predict(task, "ape")) for task in settings.tasks},
        generation_seconds=seconds,
        prompts_per_second=len(records) / seconds if seconds else None,
    )


def _interval(value: float, low: float, high: float, signed: bool = False) -> str:
    # Gaps get three decimals, so an interval that ends just short of 0 does not print as "-0.00".
    return f"{value:+.3f} [{low:+.3f}, {high:+.3f}]" if signed else f"{value:.2f} [{low:.2f}, {high:.2f}]"


def _corrected_side(gap: dict) -> str:
    return {"above 0 after correction": "above 0", "below 0 after correction": "below 0"}.get(
        gap["corrected"], "not resolved"
    )


def _floor_note(gap: dict) -> str:
    """Which side of a gap is at its floor: a gap between two such tasks measures no retrieval or
    copying, one with a single such side measures the other task alone."""
    if len(gap["at_floor"]) == 2:
        return " (both tasks at their floor)"
    return f" ({gap['at_floor'][0]} at its floor)" if gap["at_floor"] else ""


def bias_statement(summary: dict) -> str:
    """A plain sentence on the directional bias, from the pooled directional gaps after Holm's
    correction over the report's family."""
    directional = [gap for gap in summary["gaps"] if gap["kind"] == "direction"]
    if not directional:
        return "No directional gap could be computed (a task pair is missing)."
    above = [gap["name"] for gap in directional if _corrected_side(gap) == "above 0"]
    below = [gap["name"] for gap in directional if _corrected_side(gap) == "below 0"]
    if len(above) == len(directional):
        verdict = "shows the directional bias the paper reports (right/forward beats left/backward) on every pair"
    elif above and not below:
        verdict = (
            f"shows the paper's directional bias on {len(above)} of {len(directional)} pairs ({', '.join(above)}); "
            "the others are not resolved"
        )
    elif below and not above:
        verdict = (
            f"shows the opposite of the paper's directional bias on {', '.join(below)}; the others are not resolved"
        )
    elif above and below:
        verdict = f"is mixed: right/forward better on {', '.join(above)}, left/backward better on {', '.join(below)}"
    else:
        verdict = "shows no directional bias that these samples can resolve"
    return f"{summary['model']} {verdict} (Holm over {summary['family']}, at the 0.05 level)."


# What the paper reports for Llama-3 and Qwen2.5 about each gap (its section 4.1, in words: it gives
# the pattern, not these gaps as numbers): right/forward above left/backward, unique above
# non-unique, except that NF stays high although inexpressible.
PAPER_PATTERN = {
    "direction": "above 0 (right/forward beats left/backward)",
    "uniqueness": "above 0 (unique beats non-unique)",
}
PAPER_EXCEPTIONS = {"UF - NF": "near 0 (NF stays high)"}


def families_markdown(summaries: list[dict]) -> str:
    """The pooled gaps of several runs (one column per model) beside the paper's pattern, and
    whether each model's gap agrees with it (above 0), opposes it (below 0) or cannot tell, after
    Holm's correction over every pooled gap in the table (the family its reading is drawn from)."""
    models = [summary["model"] for summary in summaries]
    gaps = [{gap["name"]: dict(gap) for gap in summary["gaps"]} for summary in summaries]
    family = [gap for by_name in gaps for gap in by_name.values()]
    correct_family(family)
    lines = [
        f"Reading after Holm's correction over the table's {len(family)} pooled gaps (family-wise level 0.05); "
        "`both at floor`: neither task's accuracy can be told from its best trivial strategy (reports.floors).\n",
        "| kind | gap | paper (Llama-3, Qwen2.5) | " + " | ".join(models) + " |",
        "|---|---|---|" + "---|" * len(models),
    ]
    for kind, first, second in GAPS:
        name = f"{first} - {second}"
        paper = PAPER_EXCEPTIONS.get(name, PAPER_PATTERN[kind])
        cells = [
            f"{_interval(by_name[name]['gap'], by_name[name]['low'], by_name[name]['high'], signed=True)} "
            f"({_corrected_side(by_name[name])}{', both at floor' if len(by_name[name]['at_floor']) == 2 else ''})"
            if name in by_name
            else "-"
            for by_name in gaps
        ]
        lines.append(f"| {kind} | {name} | {paper} | " + " | ".join(cells) + " |")
    incomplete = [
        f"{s['model']} ({s['evaluated']} of {s['planned']})" for s in summaries if s["evaluated"] < s["planned"]
    ]
    if incomplete:
        lines.append(f"\nIncomplete runs, prompts evaluated: {', '.join(incomplete)}.")
    return "\n".join(lines) + "\n"


def report_markdown(summary: dict) -> str:
    lengths = summary["lengths"]
    by_cell = {(c["task"], c["length"]): c for c in summary["cells"]}
    lines = [
        f"# In-context retrieval and copying: {summary['model']} ({summary['architecture']})\n",
        "Few-shot prompts, greedy decoding, exact match of the stripped answer line. Accuracy with its 95% "
        "Wilson interval; `predicted` is the interpreter's APE prediction (theory for trained-from-scratch "
        "models, shown for comparison).\n",
        "| task | predicted | " + " | ".join(f"length {length}" for length in lengths) + " | pooled | floor |",
        "|---|---|" + "---|" * len(lengths) + "---|---|",
    ]
    for task in summary["tasks"]:
        row = [
            _interval(
                by_cell[(task, length)]["accuracy"], by_cell[(task, length)]["low"], by_cell[(task, length)]["high"]
            )
            + f" (n={by_cell[(task, length)]['total']})"
            if (task, length) in by_cell
            else "-"
            for length in lengths
        ]
        pooled, floor = summary["pooled"].get(task), summary["floors"].get(task)
        row.append("-" if pooled is None else _interval(pooled["accuracy"], pooled["low"], pooled["high"]))
        row.append(
            "-"
            if floor is None
            else f"{floor['accuracy']:.2f} ({floor['strategy']}{'; at the floor' if floor['at_floor'] else ''})"
        )
        lines.append(f"| {task} | {summary['predictions'][task]['label']} | " + " | ".join(row) + " |")
    lines += [
        "\n`floor`: the best trivial strategy's accuracy on the same prompts, pooled (a random input token; the "
        "token after or before a random occurrence of the query, except the one that answers a unique task; for "
        "copying, random input tokens); `at the floor`: the pooled interval reaches down to it.\n",
        "\nGaps (accuracy difference with Newcombe's 95% interval), pooled over lengths and per length; "
        f"`Holm p`: the pooled gap's p-value adjusted over {summary['family']} (the family the report's "
        "conclusions are drawn from); per-length gaps are descriptive:\n",
        "| kind | gap | pooled | Holm p | after correction | "
        + " | ".join(f"length {length}" for length in lengths)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(lengths),
    ]
    for gap in summary["gaps"]:
        per_length = {entry["length"]: entry for entry in gap["per_length"]}
        cells = [
            _interval(per_length[length]["gap"], per_length[length]["low"], per_length[length]["high"], signed=True)
            if length in per_length
            else "-"
            for length in lengths
        ]
        lines.append(
            f"| {gap['kind']} | {gap['name']} | {_interval(gap['gap'], gap['low'], gap['high'], signed=True)} | "
            f"{p_value_text(gap['p_holm'])} | {gap['corrected']}{_floor_note(gap)} | " + " | ".join(cells) + " |"
        )
    lines.append(f"\n{bias_statement(summary)}\n")
    uniqueness = [gap for gap in summary["gaps"] if gap["kind"] == "uniqueness"]
    if uniqueness:
        lines.append(
            "Uniqueness gaps (unique minus non-unique), after correction: "
            + "; ".join(f"{gap['name']} {gap['corrected']}{_floor_note(gap)}" for gap in uniqueness)
            + ".\n"
        )
    if summary["evaluated"] < summary["planned"]:
        lines.append(f"\nIncomplete run: {summary['evaluated']} of {summary['planned']} prompts evaluated.\n")
    if summary["prompts_per_second"]:
        lines.append(
            f"\nGeneration: {summary['evaluated']} prompts in {summary['generation_seconds']:.0f} s "
            f"({summary['prompts_per_second']:.2f} prompts/s; compilation included, model loading not).\n"
        )
    lines.append(f"\n![accuracy by length]({FIGURE_FILE})\n")
    return "\n".join(lines)


def draw_figure(summary: dict, path: Path) -> None:
    """Accuracy against length (retrieval, copying) with Wilson intervals, and the pooled gaps."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw=dict(width_ratios=[1, 1, 1.1]))
    groups = (("retrieval", RETRIEVAL_CODES), ("copying", COPYING_CODES))
    spread = 0.01 * (max(summary["lengths"]) - min(summary["lengths"]) + 1)
    for ax, (title, tasks) in zip(axes, groups):
        for offset, task in enumerate(tasks):
            cells = [c for c in summary["cells"] if c["task"] == task]
            if not cells:
                continue
            # A small shift per task keeps equal accuracies (often all 0) from hiding each other.
            lengths = [c["length"] + (offset - len(tasks) / 2) * spread for c in cells]
            accuracy = [c["accuracy"] for c in cells]
            errors = [
                [max(0.0, a - c["low"]) for a, c in zip(accuracy, cells)],
                [max(0.0, c["high"] - a) for a, c in zip(accuracy, cells)],
            ]
            # Right/forward solid, left/backward dashed: the comparison the paper makes.
            style = "--" if task in LEFT_OR_BACKWARD else "-"
            ax.errorbar(lengths, accuracy, yerr=errors, linestyle=style, marker="o", capsize=3, label=task)
        ax.set_title(f"{title} (dashed: left/backward)")
        ax.set_xlabel("input length")
        ax.set_ylim(-0.05, 1.05)
        if ax.lines:  # a run without this group's tasks leaves its panel empty
            ax.legend(fontsize=8)
    axes[0].set_ylabel("exact match")
    gaps = summary["gaps"]
    positions = range(len(gaps))
    axes[2].errorbar(
        [g["gap"] for g in gaps],
        positions,
        xerr=[[g["gap"] - g["low"] for g in gaps], [g["high"] - g["gap"] for g in gaps]],
        fmt="o",
        capsize=3,
    )
    axes[2].axvline(0, color="0.5", linewidth=1)
    axes[2].set_yticks(list(positions), [f"{g['name']} ({g['kind']})" for g in gaps], fontsize=8)
    axes[2].invert_yaxis()
    axes[2].set_xlabel("accuracy gap, pooled over lengths (95% Newcombe)")
    set_title(figure, f"{summary['model']}: few-shot in-context accuracy", fontsize=10)
    save_figure(figure, path, dpi=110)


def write_report(run_dir: Path) -> dict:
    """Rebuild summary.json, report.md and the figure from the run folder; return the summary."""
    return rebuild_report(run_dir, summarize, report_markdown, draw_figure, FIGURE_FILE)
