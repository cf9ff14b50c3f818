"""The reports of the realistic copying experiments (experiments/realistic.py), computed from a run
folder's files only: `config.json` and `results.jsonl`. Each writes `summary.json`, `report.md` and
a figure into the same folder.

Lorem ipsum: every output is aligned to its reference (incontext.alignment). Per direction and
length: exact-match rate, token accuracy (the share of right slots: each reference token and the
stop), errors per 100 reference tokens (the edit distance), and the accuracy after unambiguous and
after ambiguous tokens (the share of reached transitions whose slot is right).

git: exact match of the hash list per command and number of commits, and hash errors per 100
hashes (the edit distance between the hash lists).

Intervals are 95%: Wilson for a proportion, Newcombe's hybrid score interval for a difference of
two. For token-level proportions they count the transitions as independent trials, which tokens of
one paragraph are not: read those intervals as a lower bound on the uncertainty. The lorem report
concludes from the gap after ambiguous tokens with a cluster bootstrap that resamples whole prompts
(each one paragraph; reports.statistics), Holm-corrected over the pooled gap of each direction.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from crasp.prediction import predict
from crasplab.incontext.alignment import ON_TRACK, START, analyze
from crasplab.incontext.directions import DIRECTIONS, Direction
from crasplab.incontext.git_history import COMMANDS
from crasplab.reports.figures import pyplot, save_figure, set_title
from crasplab.records.files import rebuild_report
from crasp.intervals import wilson_interval
from crasplab.reports.intervals import difference_interval
from crasplab.reports.statistics import MIN_CLUSTERS, cluster_difference, correct_family
from crasplab.incontext.settings import GitRunSettings, LoremRunSettings
from crasplab.records.answers import GitAnswer, LoremAnswer, read_results
from crasplab.records.run_folder import read_run_settings

EXPERIMENT = "experiments/realistic.py"
LOREM_FIGURE = "lorem_by_length.png"
GIT_FIGURE = "git_by_commits.png"
TOP_TRANSITIONS = 8  # transition tokens of first errors listed per direction


def proportion(correct: int, total: int) -> dict:
    low, high = wilson_interval(correct, total)
    return dict(correct=correct, total=total, value=correct / total if total else None, low=low, high=high)


def difference(first: dict, second: dict) -> dict | None:
    if not (first["total"] and second["total"]):
        return None
    value, low, high = difference_interval(first["correct"], first["total"], second["correct"], second["total"])
    return dict(value=value, low=low, high=high)


def side(gap: dict | None) -> str:
    if gap is None:
        return "not computable"
    return "above 0" if gap["low"] > 0 else "below 0" if gap["high"] < 0 else "includes 0"


def shown(entry: dict | None, signed: bool = False) -> str:
    if entry is None or entry.get("value") is None:
        return "-"
    if signed:  # three decimals, so that an interval ending just short of 0 does not print as -0.00
        return f"{entry['value']:+.3f} [{entry['low']:+.3f}, {entry['high']:+.3f}]"
    return f"{entry['value']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


@dataclass(frozen=True)
class Grid:
    """How a run is laid out: conditions (each a copying direction) x sizes, n prompts each."""

    experiment: str
    conditions: str  # the setting that lists the conditions
    condition: str  # the field of an answer that names its condition
    sizes: str  # the setting that lists the sizes
    size: str  # the field of an answer that gives its size
    directions: dict[str, Direction]  # each condition's copying direction


LOREM_GRID = Grid("lorem", "directions", "direction", "lengths", "length", DIRECTIONS)
GIT_GRID = Grid("git", "commands", "command", "commits", "commits", COMMANDS)


def _summarize_grid(run_dir: Path, grid: Grid, summarize_cell) -> dict:
    """`summarize_cell` of the records of each (condition, size) cell and of each condition, and the
    exact-match gap forward minus backward, per size and pooled."""
    settings_type, answer_type = {"lorem": (LoremRunSettings, LoremAnswer), "git": (GitRunSettings, GitAnswer)}[
        grid.experiment
    ]
    recorded = read_run_settings(run_dir, settings_type, f"{EXPERIMENT} {grid.experiment}", facts=("architecture",))
    settings = recorded.settings
    records = read_results(run_dir, answer_type)
    by_cell, by_condition = defaultdict(list), defaultdict(list)
    for record in records:
        by_cell[(getattr(record, grid.condition), getattr(record, grid.size))].append(record)
        by_condition[getattr(record, grid.condition)].append(record)
    conditions, sizes = list(getattr(settings, grid.conditions)), list(getattr(settings, grid.sizes))
    cells = {
        (condition, size): summarize_cell(by_cell[(condition, size)])
        for condition in conditions
        for size in sizes
        if by_cell[(condition, size)]
    }
    pooled = {condition: summarize_cell(by_condition[condition]) for condition in conditions if by_condition[condition]}
    gaps = []
    forward = [condition for condition in pooled if not grid.directions[condition].reverse]
    backward = [condition for condition in pooled if grid.directions[condition].reverse]
    if forward and backward:
        first, second = forward[0], backward[0]
        gaps = [
            dict(size=size, **difference(cells[(first, size)]["exact"], cells[(second, size)]["exact"]))
            for size in sizes
            if (first, size) in cells and (second, size) in cells
        ]
        gaps.append(dict(size="pooled", **difference(pooled[first]["exact"], pooled[second]["exact"])))
    return {
        "model": settings.model,
        "architecture": recorded.facts["architecture"],
        grid.conditions: conditions,
        grid.sizes: sizes,
        "planned": len(conditions) * len(sizes) * settings.n,
        "cells": [{grid.condition: condition, grid.size: size, **cell} for (condition, size), cell in cells.items()],
        "pooled": pooled,
        "gaps": gaps,
        "evaluated": len(records),
        "generation_seconds": sum(record.seconds for record in records),
    }


def _predictions(codes) -> dict:
    return {code: dataclasses.asdict(predict(code, "ape")) for code in codes}


# Lorem ipsum ---------------------------------------------------------------------------------------


def _lorem_counts(records: list[LoremAnswer]) -> dict:
    """Counts summed over `records`, each aligned to its reference."""
    totals = Counter()
    transitions = Counter()
    clusters = []  # per prompt, one paragraph: (right after unambiguous, reached, right after ambiguous, reached)
    for record in records:
        reference = record.reference_ids
        result = analyze(reference, record.output_ids)
        totals.update(
            items=1,
            exact=result.exact,
            slots=result.slots,
            wrong=result.wrong,
            edits=result.edits,
            reference_tokens=len(reference),
            reached_ambiguous=result.reached_ambiguous,
            reached_unambiguous=result.reached_unambiguous,
            first_errors_ambiguous=result.first_errors_ambiguous,
            first_errors_unambiguous=len(result.first_errors) - result.first_errors_ambiguous,
        )
        transitions.update(record.reference_pieces[slot - 1] if slot else START for slot in result.first_errors)
        ambiguous_errors = result.first_errors_ambiguous
        unambiguous_errors = len(result.first_errors) - ambiguous_errors
        clusters.append(
            (
                result.reached_unambiguous - unambiguous_errors,
                result.reached_unambiguous,
                result.reached_ambiguous - ambiguous_errors,
                result.reached_ambiguous,
            )
        )
    return dict(totals=totals, transitions=transitions, clusters=clusters)


def _paragraph_gap(clusters: list[tuple[int, int, int, int]]) -> dict | None:
    """Unambiguous minus ambiguous, the prompts resampled whole; None unless MIN_CLUSTERS prompts
    reach each kind of transition."""
    if min(sum(c[1] > 0 for c in clusters), sum(c[3] > 0 for c in clusters)) < MIN_CLUSTERS:
        return None
    entry = cluster_difference(clusters)
    return dict(value=entry["gap"], low=entry["low"], high=entry["high"], p=entry["p"])


def _lorem_cell(records: list[LoremAnswer]) -> dict:
    counts = _lorem_counts(records)
    t = counts["totals"]
    unambiguous = proportion(t["reached_unambiguous"] - t["first_errors_unambiguous"], t["reached_unambiguous"])
    ambiguous = proportion(t["reached_ambiguous"] - t["first_errors_ambiguous"], t["reached_ambiguous"])
    first_errors = t["first_errors_ambiguous"] + t["first_errors_unambiguous"]
    return dict(
        items=t["items"],
        mean_reference_tokens=t["reference_tokens"] / t["items"],
        exact=proportion(t["exact"], t["items"]),
        token_accuracy=1 - t["wrong"] / t["slots"],
        errors_per_100_tokens=100 * t["edits"] / t["reference_tokens"],
        after_unambiguous=unambiguous,
        after_ambiguous=ambiguous,
        gap=difference(unambiguous, ambiguous),
        paragraph_gap=_paragraph_gap(counts["clusters"]),
        first_errors=first_errors,
        first_errors_after_ambiguous_share=t["first_errors_ambiguous"] / first_errors if first_errors else None,
        ambiguous_transition_share=t["reached_ambiguous"] / (t["reached_ambiguous"] + t["reached_unambiguous"]),
        top_transitions=counts["transitions"].most_common(TOP_TRANSITIONS),
    )


def summarize_lorem(run_dir: Path) -> dict:
    summary = _summarize_grid(run_dir, LOREM_GRID, _lorem_cell)
    family = [cell["paragraph_gap"] for cell in summary["pooled"].values() if cell["paragraph_gap"]]
    correct_family(family, estimate="value")
    tasks = [
        code
        for name in summary["directions"]
        for code in (DIRECTIONS[name].unique_task, DIRECTIONS[name].non_unique_task)
    ]
    return dict(summary, predictions=_predictions(tasks))


def concentration_statement(name: str, cell: dict) -> str:
    """Whether this direction's errors concentrate after ambiguous tokens."""
    paragraph = cell["paragraph_gap"]
    verdict = {
        "above 0 after correction": "errors concentrate after ambiguous tokens",
        "below 0 after correction": "errors are more frequent after unambiguous tokens, the opposite of the paper's "
        "finding",
        "not resolved after correction": "these samples cannot tell whether errors concentrate after ambiguous tokens",
        None: f"fewer than {MIN_CLUSTERS} prompts reach transitions of each kind, too few to compare",
    }[paragraph["corrected"] if paragraph else None]
    share = cell["first_errors_after_ambiguous_share"]
    where = (
        ""
        if share is None
        else f" {share:.0%} of the {cell['first_errors']} first errors follow an ambiguous "
        f"token, which make up {cell['ambiguous_transition_share']:.0%} of the transitions reached."
    )
    return (
        f"**{name}**: {verdict} (accuracy {shown(cell['after_unambiguous'])} after unambiguous vs "
        f"{shown(cell['after_ambiguous'])} after ambiguous tokens; gap {shown(cell['gap'], signed=True)}, "
        f"paragraphs resampled {shown(paragraph, signed=True)}"
        + (f", Holm p {paragraph['p_holm']:.3f}" if paragraph else "")
        + f").{where}"
    )


def theory_statement(directions: list[str], predictions: dict) -> str:
    """What the interpreter says about the two kinds of transition."""

    def named(codes):
        said = defaultdict(list)  # codes with the same prediction share one reason
        for code in codes:
            said[(predictions[code]["label"], predictions[code]["reason"])].append(code)
        return "; ".join(f"{', '.join(group)}: {label}, {reason}" for (label, reason), group in said.items())

    chosen = [DIRECTIONS[name] for name in directions]
    return (
        "Theory: after a token with a single successor in the text, copying needs only that successor, which is "
        f"unique copying ({named(d.unique_task for d in chosen)}). After an ambiguous token the successor depends "
        f"on where in the text the copy is, which is non-unique copying ({named(d.non_unique_task for d in chosen)}). "
        "If the model copies the way these programs do, its errors concentrate after ambiguous tokens."
    )


def lorem_markdown(summary: dict) -> str:
    predictions = summary["predictions"]
    lines = [
        f"# Lorem-ipsum copying: {summary['model']} ({summary['architecture']})\n",
        "Few-shot prompts, greedy decoding to the end of the line or 1.5x the reference length; outputs aligned to "
        "the reference token by token (Levenshtein). Token accuracy: share of right slots (each reference token "
        "and the stop). After (un)ambiguous: share of the transitions reached on track (the "
        f"{ON_TRACK} slots before them right) whose slot is right, split by whether the token before the slot has "
        "two or more distinct successors in the reference; a wrong slot there is a first error. 95% Wilson "
        "intervals, counting transitions as independent; gap: unambiguous minus ambiguous, Newcombe's 95% interval; "
        "by paragraph: the same gap with a 95% cluster bootstrap that resamples whole prompts (one paragraph each; "
        "10,000 draws, seed 0). The conclusions below read the pooled paragraph gaps after Holm's correction over "
        "the directions' pooled gaps. "
        "`predicted` is the interpreter's APE prediction for the formal task: unique tokens / repeated tokens.\n",
        "| direction | predicted | length | n | tokens | exact match | token accuracy | errors / 100 tokens "
        "| after unambiguous | after ambiguous | gap | gap, by paragraph |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        *summary["cells"],
        *(dict(direction=name, length="pooled", **cell) for name, cell in summary["pooled"].items()),
    ]
    for cell in sorted(rows, key=lambda c: summary["directions"].index(c["direction"])):
        direction = DIRECTIONS[cell["direction"]]
        predicted = (
            f"{direction.unique_task} {predictions[direction.unique_task]['label']} / "
            f"{direction.non_unique_task} {predictions[direction.non_unique_task]['label']}"
        )
        lines.append(
            f"| {cell['direction']} | {predicted} | {cell['length']} | {cell['items']} "
            f"| {cell['mean_reference_tokens']:.0f} | {shown(cell['exact'])} | {cell['token_accuracy']:.3f} "
            f"| {cell['errors_per_100_tokens']:.1f} | {shown(cell['after_unambiguous'])} "
            f"| {shown(cell['after_ambiguous'])} | {shown(cell['gap'], signed=True)} "
            f"| {shown(cell['paragraph_gap'], signed=True)} |"
        )
    if summary["gaps"]:
        lines += [
            "\nExact match, forward minus backward (Newcombe's 95% interval): "
            + "; ".join(f"{gap['size']}: {shown(gap, signed=True)}" for gap in summary["gaps"])
            + ".\n"
        ]
    lines += ["\n## Where the errors are\n", theory_statement(summary["directions"], predictions) + "\n"]
    for name, cell in summary["pooled"].items():
        lines.append(concentration_statement(name, cell) + "\n")
        if cell["top_transitions"]:
            lines.append(
                f"Most frequent transition tokens of first errors ({name}): "
                + ", ".join(f"`{token!r}` x{count}" for token, count in cell["top_transitions"])
                + ".\n"
            )
    lines += _closing(summary, LOREM_FIGURE)
    return "\n".join(lines)


def lorem_models_table(summaries: list[dict]) -> str:
    """The lorem runs of several models side by side, each direction pooled over its lengths: exact
    match, token accuracy, the accuracy after unambiguous and after ambiguous tokens, their gap, and
    the gap with paragraphs resampled whole with Holm's reading over the run's directions."""
    lines = [
        "| model | direction | paragraphs | exact match | token accuracy | first errors (after ambiguous) "
        "| after unambiguous | after ambiguous | gap | gap, by paragraph | after correction |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for summary in summaries:
        for name, cell in summary["pooled"].items():
            by_paragraph = cell["paragraph_gap"]
            lines.append(
                f"| {summary['model']} | {name} | {cell['items']} | {shown(cell['exact'])} "
                f"| {cell['token_accuracy']:.2f} | {cell['first_errors']} "
                f"({cell['first_errors_after_ambiguous_share']:.0%}) | {shown(cell['after_unambiguous'])} "
                f"| {shown(cell['after_ambiguous'])} | {shown(cell['gap'], signed=True)} "
                f"| {shown(by_paragraph, signed=True)} | {by_paragraph['corrected'] if by_paragraph else '-'} |"
            )
    return "\n".join(lines) + "\n"


def draw_lorem_figure(summary: dict, path: Path) -> None:
    """Exact match and token accuracy against length per direction, and the accuracy after
    unambiguous and after ambiguous tokens."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for d, name in enumerate(summary["directions"]):
        cells = [cell for cell in summary["cells"] if cell["direction"] == name]
        lengths = [cell["length"] for cell in cells]
        style = _curves(axes, lengths, cells, name, d, DIRECTIONS[name].reverse, "token_accuracy")
        for k, (kind, marker) in enumerate(
            (("unambiguous", dict(marker="o")), ("ambiguous", dict(marker="s", markerfacecolor="white")))
        ):
            _errorbar(
                axes[2],
                lengths,
                [cell[f"after_{kind}"] for cell in cells],
                f"{name}, after {kind}",
                series=2 * d + k,
                **marker,
                **style,
            )
    for ax, title in zip(axes, ("exact match", "token accuracy", "accuracy after the transition token")):
        _size_axes(ax, f"{title} (dashed: backward)", "paragraph length (tokens)", summary["lengths"])
    _save(figure, f"{summary['model']}: lorem-ipsum copying", path)


def _curves(axes, sizes: list[int], cells: list[dict], label: str, series: int, reverse: bool, second: str) -> dict:
    """One condition against size: exact match with its intervals on axes[0], `second` on axes[1]
    (dashed when the condition copies backward); returns the line style."""
    style = dict(linestyle="--" if reverse else "-", color=f"C{series}")
    _errorbar(axes[0], sizes, [cell["exact"] for cell in cells], label, series=series, **style)
    axes[1].plot(sizes, [cell[second] for cell in cells], marker="o", label=label, **style)
    return style


def _size_axes(ax, title: str, xlabel: str, sizes: list[int], proportion: bool = True) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_xscale("log", base=2)  # the default sizes double
    ax.set_xticks(sizes, [str(size) for size in sizes])
    ax.minorticks_off()
    if proportion:
        ax.set_ylim(-0.05, 1.05)
    if ax.lines:  # a run without results for this panel leaves it empty
        ax.legend(fontsize=8)


def _save(figure, title: str, path: Path) -> None:
    set_title(figure, title, fontsize=10)
    save_figure(figure, path, dpi=110)


def _errorbar(ax, xs: list, entries: list[dict], label: str, series: int, **style) -> None:
    """Proportions with their Wilson intervals; points without a proportion are left out. Each
    series is shifted a little to the right, so that equal values (often all 0) do not hide each other."""
    points = [(x * 1.03**series, entry) for x, entry in zip(xs, entries) if entry["value"] is not None]
    if points:
        x, values = [x for x, _ in points], [entry["value"] for _, entry in points]
        below = [max(0.0, entry["value"] - entry["low"]) for _, entry in points]
        above = [max(0.0, entry["high"] - entry["value"]) for _, entry in points]
        ax.errorbar(x, values, yerr=[below, above], capsize=3, label=label, **{"marker": "o", **style})


# git ---------------------------------------------------------------------------------------------


def _git_cell(records: list[GitAnswer]) -> dict:
    hashes = sum(len(record.expected.split()) for record in records)
    edits = sum(analyze(record.expected.split(), record.output.split()).edits for record in records)
    return dict(
        items=len(records),
        exact=proportion(sum(record.correct for record in records), len(records)),
        hash_errors_per_100=100 * edits / hashes,
    )


def summarize_git(run_dir: Path) -> dict:
    summary = _summarize_grid(run_dir, GIT_GRID, _git_cell)
    return dict(summary, predictions=_predictions(COMMANDS[command].unique_task for command in summary["commands"]))


def git_markdown(summary: dict) -> str:
    lines = [
        f"# git revert / cherry-pick: {summary['model']} ({summary['architecture']})\n",
        "revert lists the history's hashes in the order the log gives them (forward copying), cherry-pick in "
        "reverse (backward copying); the prompt explains both commands in the same words and gives few-shot "
        "examples of the one asked. Exact match of the hash list with its 95% Wilson interval; hash errors: "
        "edit distance between the hash lists per 100 hashes. `predicted`: the interpreter's APE prediction for "
        "the formal task (every hash is unique).\n",
        "| command | predicted | commits | n | exact match | hash errors / 100 |",
        "|---|---|---|---|---|---|",
    ]
    rows = [
        *summary["cells"],
        *(dict(command=command, commits="pooled", **cell) for command, cell in summary["pooled"].items()),
    ]
    for cell in sorted(rows, key=lambda c: summary["commands"].index(c["command"])):
        code = COMMANDS[cell["command"]].unique_task
        lines.append(
            f"| {cell['command']} | {code} {summary['predictions'][code]['label']} | {cell['commits']} "
            f"| {cell['items']} | {shown(cell['exact'])} | {cell['hash_errors_per_100']:.1f} |"
        )
    if summary["gaps"]:
        lines.append(
            "\nExact match, revert minus cherry-pick (forward minus backward; Newcombe's 95% interval): "
            + "; ".join(f"{gap['size']}: {shown(gap, signed=True)}" for gap in summary["gaps"])
            + ".\n"
        )
        verdict = {
            "above 0": "forward copying (revert) beats backward copying (cherry-pick), as in the paper",
            "below 0": "backward copying (cherry-pick) beats forward copying (revert), the opposite of the paper",
            "includes 0": "these samples cannot tell forward from backward copying apart",
        }
        lines.append(f"Pooled over the history lengths, {verdict[side(summary['gaps'][-1])]}.\n")
    lines += _closing(summary, GIT_FIGURE)
    return "\n".join(lines)


def draw_git_figure(summary: dict, path: Path) -> None:
    """Exact match and hash errors against the number of commits, per command."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for series, command in enumerate(summary["commands"]):
        cells = [cell for cell in summary["cells"] if cell["command"] == command]
        _curves(
            axes,
            [cell["commits"] for cell in cells],
            cells,
            command,
            series,
            COMMANDS[command].reverse,
            "hash_errors_per_100",
        )
    _size_axes(axes[0], "exact match of the hash list (dashed: backward)", "commits in the history", summary["commits"])
    _size_axes(
        axes[1],
        "hash errors per 100 hashes (dashed: backward)",
        "commits in the history",
        summary["commits"],
        proportion=False,
    )
    _save(figure, f"{summary['model']}: git revert (forward) / cherry-pick (backward)", path)


# Both --------------------------------------------------------------------------------------------


def _closing(summary: dict, figure: str) -> list[str]:
    lines = []
    if summary["evaluated"] < summary["planned"]:
        lines.append(f"\nIncomplete run: {summary['evaluated']} of {summary['planned']} prompts evaluated.\n")
    if summary["generation_seconds"]:
        lines.append(
            f"\nGeneration: {summary['evaluated']} prompts in {summary['generation_seconds']:.0f} s "
            "(compilation included, model loading not).\n"
        )
    lines.append(f"\n![figure]({figure})\n")
    return lines


REPORTS = {
    "lorem": (summarize_lorem, lorem_markdown, draw_lorem_figure, LOREM_FIGURE),
    "git": (summarize_git, git_markdown, draw_git_figure, GIT_FIGURE),
}


def write_report(experiment: str, run_dir: Path) -> dict:
    """Rebuild summary.json, report.md and the figure of a run folder of `experiment`; return the
    summary."""
    return rebuild_report(run_dir, *REPORTS[experiment])


def report_markdown(experiment: str, summary: dict) -> str:
    return REPORTS[experiment][1](summary)
