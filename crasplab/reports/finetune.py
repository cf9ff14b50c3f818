"""The fine-tuning report (experiments/finetune.py), computed from a run folder's files only.

Inputs: `config.json` (model, tasks, seed, threshold, the fine-tuning settings), `results.jsonl`
(one record per test prompt and stage: task, stage "before" or "after", length, index, correct,
seconds), `predictions.json` (the interpreter's APE prediction per task, written when the run
started) and each task's job folder (`<task>/seed<seed>/`: training records and the result).
Outputs, written atomically into the same folder: `summary.json`, `report.md` and
`accuracy_by_length.png`.

A bin's accuracy pools its prompts (the same number at every length) with a 95% Wilson interval;
a gap between two tasks is a difference of accuracies with Newcombe's 95% interval (two tasks'
prompts are independent). Before and after are the same prompts, so what fine-tuning changed is
paired (reports.statistics): each task's change beyond the training lengths with McNemar's exact
test and a paired bootstrap interval, and each gap's change (after minus before) with a bootstrap
that resamples each task's prompt pairs; the gap changes are the family the report concludes from,
corrected by Holm. A fine-tuned
model below verdicts.rules.FIT_THRESHOLD on its training lengths "did not fit": it says
nothing about longer inputs, and is kept apart from "learned but did not generalize".
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from crasp.tasks import LEFT_OR_BACKWARD
from crasplab.reports.figures import pyplot, save_figure, set_title
from crasplab.records.files import rebuild_report
from crasplab.reports.in_context import GAPS
from crasp.intervals import wilson_interval
from crasplab.reports.intervals import difference_interval
from crasplab.reports.statistics import bootstrap, correct_family, p_value_text, paired_change
from crasplab.records.job_folder import FinetuneResult, JobRecords, run_jobs, run_records
from crasplab.incontext.settings import FinetuneSettings
from crasplab.records.answers import StagedAnswer, read_results
from crasplab.records.run_folder import read_run_settings
from crasplab.verdicts.predictions import read_predictions
from crasplab.verdicts.rules import FIT_THRESHOLD, in_line, observe_seed

FIGURE_FILE = "accuracy_by_length.png"
EXPERIMENT = "experiments/finetune.py"
STAGES = ("before", "after")


def _counts(records: list[StagedAnswer]) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(task, stage, length) -> (correct, total)."""
    correct, total = defaultdict(int), defaultdict(int)
    for record in records:
        key = (record.task, record.stage, record.length)
        correct[key] += record.correct
        total[key] += 1
    return {key: (correct[key], total[key]) for key in total}


def _pooled(counts: dict, task: str, stage: str, lengths) -> tuple[int, int]:
    pairs = [counts[(task, stage, n)] for n in lengths if (task, stage, n) in counts]
    return sum(c for c, _ in pairs), sum(t for _, t in pairs)


def _accuracy(correct: int, total: int) -> dict | None:
    if total == 0:
        return None
    low, high = wilson_interval(correct, total)
    return dict(correct=correct, total=total, accuracy=correct / total, low=low, high=high)


def _difference(counts: dict, first: str, second: str, stage: str, lengths) -> dict | None:
    (correct_a, total_a), (correct_b, total_b) = (_pooled(counts, task, stage, lengths) for task in (first, second))
    if not (total_a and total_b):
        return None
    gap, low, high = difference_interval(correct_a, total_a, correct_b, total_b)
    return dict(gap=gap, low=low, high=high)


def _pairs(answers: list[StagedAnswer], task: str, lengths) -> np.ndarray:
    """(prompts, 2): each prompt's correctness before and after fine-tuning, for the prompts answered in both."""
    by_stage = {
        stage: {
            (r.length, r.index): bool(r.correct)
            for r in answers
            if r.task == task and r.stage == stage and r.length in lengths
        }
        for stage in STAGES
    }
    keys = sorted(by_stage["before"].keys() & by_stage["after"].keys())
    return np.array([[by_stage["before"][key], by_stage["after"][key]] for key in keys], dtype=float).reshape(-1, 2)


def _gap_change(first: np.ndarray, second: np.ndarray) -> float:
    """(after - before) of (first - second), each task's prompts paired before and after."""
    return (first[:, 1].mean() - second[:, 1].mean()) - (first[:, 0].mean() - second[:, 0].mean())


def _training(job: JobRecords) -> dict | None:
    """The task's training result with its last training loss; None while it trains."""
    if not job.finished:
        return None
    losses = [record.loss for record in job.training]
    keys = ("steps", "elapsed_s", "tokens", "tokens_per_s", "method", "trainable_parameters")
    return dict({key: getattr(job.result, key) for key in keys}, final_loss=losses[-1] if losses else None)


def summarize(run_dir: Path, threshold: float | None = None) -> dict:
    """The run's summary; `threshold` overrides the one in config.json (the run's own)."""
    run_dir = Path(run_dir)
    recorded = read_run_settings(run_dir, FinetuneSettings, EXPERIMENT)
    run = recorded.settings
    threshold = run.threshold if threshold is None else threshold
    settings = run.finetune
    bins = [tuple(b) for b in settings.test_bins]
    beyond = [n for lo, hi in bins for n in range(lo, hi + 1) if n > settings.train_lengths[1]]
    answers = read_results(run_dir, StagedAnswer)
    counts = _counts(answers)
    jobs = {job.task: job for job in run_records(run_dir, run_jobs(run.tasks, [run.seed]), FinetuneResult)}
    predictions = read_predictions(run_dir)["tasks"]
    rows = []
    for task in run.tasks:
        stages = {
            stage: [_accuracy(*_pooled(counts, task, stage, range(lo, hi + 1))) for lo, hi in bins] for stage in STAGES
        }
        after = stages["after"]
        complete = all(cell is not None for cell in after)
        seen = (
            observe_seed(run.seed, *((c["correct"], c["total"]) for c in (after[0], after[-1])), threshold)
            if complete
            else None
        )
        prediction = predictions[task]["prediction"]
        lengths = sorted({n for (t, _, n) in counts if t == task})
        pairs = _pairs(answers, task, beyond)
        change = (
            dict(
                paired_change(pairs[:, 0], pairs[:, 1]),
                before=float(pairs[:, 0].mean()),
                after=float(pairs[:, 1].mean()),
                pairs=len(pairs),
            )
            if len(pairs)
            else None
        )
        rows.append(
            dict(
                task=task,
                predicted=prediction,
                before=stages["before"],
                after=after,
                observed=seen and seen.observation.value,
                agrees=in_line(prediction["generalizes"], [seen]) if seen else None,
                training=_training(jobs[task]),
                change_beyond=change,
                curve=dict(
                    lengths=lengths,
                    **{
                        stage: [
                            _accuracy(*counts[(task, stage, n)])["accuracy"] if (task, stage, n) in counts else None
                            for n in lengths
                        ]
                        for stage in STAGES
                    },
                ),
            )
        )
    gaps = []
    for kind, first, second in GAPS:
        if first in run.tasks and second in run.tasks:
            pairs = [_pairs(answers, task, beyond) for task in (first, second)]
            gaps.append(
                dict(
                    kind=kind,
                    name=f"{first} - {second}",
                    first=first,
                    second=second,
                    **{
                        stage: dict(
                            bins=[_difference(counts, first, second, stage, range(lo, hi + 1)) for lo, hi in bins],
                            beyond=_difference(counts, first, second, stage, beyond),
                        )
                        for stage in STAGES
                    },
                    change=bootstrap(_gap_change, pairs) if all(len(p) for p in pairs) else None,
                )
            )
    correct_family([gap["change"] for gap in gaps if gap["change"] is not None])
    seconds = {stage: sum(r.seconds for r in answers if r.stage == stage) for stage in STAGES}
    trained = [row["training"] for row in rows if row["training"]]
    examples = settings.examples_per_length
    return dict(
        model=run.model,
        architecture=recorded.facts.get("architecture"),
        preset=run.preset,
        seed=run.seed,
        tasks=list(run.tasks),
        settings=settings.to_dict(),
        bins=[list(b) for b in bins],
        threshold=threshold,
        fit_threshold=FIT_THRESHOLD,
        rows=rows,
        gaps=gaps,
        planned=len(run.tasks) * len({n for lo, hi in bins for n in range(lo, hi + 1)}) * examples,
        answered={stage: sum(r.stage == stage for r in answers) for stage in STAGES},
        eval_seconds=seconds,
        train_seconds=sum(t["elapsed_s"] for t in trained),
        train_tokens=sum(t["tokens"] for t in trained),
        agreements=sum(bool(row["agrees"]) for row in rows),
        judged=sum(row["agrees"] is not None for row in rows),
    )


def _cell(entry: dict | None) -> str:
    return "-" if entry is None else f"{entry['accuracy']:.2f} [{entry['low']:.2f}, {entry['high']:.2f}]"


def _gap_cell(entry: dict | None) -> str:
    # Three decimals, so an interval that ends just short of 0 does not print as "-0.00".
    return "-" if entry is None else f"{entry['gap']:+.3f} [{entry['low']:+.3f}, {entry['high']:+.3f}]"


def _side(entry: dict | None) -> str:
    if entry is None:
        return "not measured"
    if entry["low"] > 0:
        return "above 0"
    return "below 0" if entry["high"] < 0 else "includes 0"


def markdown_table(summary: dict) -> str:
    """Accuracy per bin before and after fine-tuning, the verdict and the prediction."""
    bins = [f"{lo}-{hi}" for lo, hi in summary["bins"]]
    lines = [
        "| task | predicted | "
        + " | ".join(f"before {b}" for b in bins)
        + " | "
        + " | ".join(f"after {b}" for b in bins)
        + " | after fine-tuning | agrees |",
        "|---|---|" + "---|" * (2 * len(bins)) + "---|---|",
    ]
    for row in summary["rows"]:
        agrees = "-" if row["agrees"] is None else ("yes" if row["agrees"] else "NO")
        lines.append(
            f"| {row['task']} | {row['predicted']['label']} | "
            + " | ".join(_cell(entry) for entry in row["before"] + row["after"])
            + f" | {row['observed'] or 'not finished'} | {agrees} |"
        )
    return "\n".join(lines) + "\n"


def gap_table(summary: dict) -> str:
    bins = [f"{lo}-{hi}" for lo, hi in summary["bins"]]
    lines = [
        "| gap | stage | " + " | ".join(bins) + " | beyond the training lengths |",
        "|---|---|" + "---|" * (len(bins) + 1),
    ]
    for gap in summary["gaps"]:
        for stage in STAGES:
            lines.append(
                f"| {gap['name']} ({gap['kind']}) | {stage} | "
                + " | ".join(_gap_cell(entry) for entry in gap[stage]["bins"])
                + f" | {_gap_cell(gap[stage]['beyond'])} |"
            )
    return "\n".join(lines) + "\n"


def _task_change_row(task: str, c: dict) -> str:
    return (
        f"| {task} | {c['before']:.2f} | {c['after']:.2f} | {_gap_cell(c)} | "
        f"{c['gained']} / {c['lost']} of {c['pairs']} | {p_value_text(c['p'])} |"
    )


def _gap_change_row(gap: dict) -> str:
    c = gap["change"]
    return (
        f"| {gap['name']} ({gap['kind']}) | {_gap_cell(gap['before']['beyond'])} | {_gap_cell(gap['after']['beyond'])} "
        f"| {_gap_cell(c)} | {p_value_text(c['p_holm'])} | {c['corrected']} |"
    )


def change_table(summary: dict) -> str:
    """What fine-tuning changed beyond the training lengths, each task on its own prompt pairs and
    each gap with its paired bootstrap and Holm's reading over the gap changes."""
    lines = [
        "| task | before | after | change (paired bootstrap 95%) | gained / lost | McNemar p |",
        "|---|---|---|---|---|---|",
        *(_task_change_row(row["task"], row["change_beyond"]) for row in summary["rows"] if row["change_beyond"]),
        "\n| gap | before | after | change of the gap (paired bootstrap 95%) | Holm p | after correction |",
        "|---|---|---|---|---|---|",
        *(_gap_change_row(gap) for gap in summary["gaps"] if gap["change"]),
    ]
    return "\n".join(lines) + "\n"


def seeds_table(summaries: list[dict]) -> str:
    """Runs of one preset on several seeds side by side: each task's verdict after fine-tuning (its
    fit first: "did not fit" when the training bin is below the fit threshold) and each gap's change
    beyond the training lengths with its paired interval and Holm's reading within that run."""
    tasks = summaries[0]["tasks"]
    gaps = [gap["name"] for gap in summaries[0]["gaps"] if gap["change"]]
    lines = [
        "| seed | " + " | ".join(tasks) + " | " + " | ".join(f"{name}: change of the gap" for name in gaps) + " |",
        "|---|" + "---|" * (len(tasks) + len(gaps)),
    ]
    for summary in summaries:
        rows = {row["task"]: row for row in summary["rows"]}
        changes = {gap["name"]: gap["change"] for gap in summary["gaps"] if gap["change"]}
        lines.append(
            f"| {summary['seed']} | "
            + " | ".join(
                f"{rows[task]['observed'] or 'not finished'} ({rows[task]['after'][0]['accuracy']:.3f} on "
                f"{'-'.join(map(str, summary['bins'][0]))})"
                for task in tasks
            )
            + " | "
            + " | ".join(f"{_gap_cell(changes[name])}, {changes[name]['corrected']}" for name in gaps)
            + " |"
        )
    return "\n".join(lines) + "\n"


def direction_statement(summary: dict) -> str:
    """One line per directional pair: where its gap beyond the training lengths lies, before and after."""
    lines = [
        f"- {gap['name']}: in context {_side(gap['before']['beyond'])}, after fine-tuning "
        f"{_side(gap['after']['beyond'])}."
        for gap in summary["gaps"]
        if gap["kind"] == "direction"
    ]
    return "\n".join(lines) + "\n" if lines else "No directional pair (both tasks of a pair) was run.\n"


def training_table(summary: dict) -> str:
    lines = [
        "| task | method | trainable parameters | steps | training time | tokens | tokens/s | last loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        t = row["training"]
        if t is None:
            lines.append(f"| {row['task']} | not finished | | | | | | |")
            continue
        loss = "-" if t["final_loss"] is None else f"{t['final_loss']:.4f}"
        lines.append(
            f"| {row['task']} | {t['method']} | {t['trainable_parameters']:,} | {t['steps']} | "
            f"{t['elapsed_s'] / 60:.1f} min | {t['tokens']:,} | {t['tokens_per_s']:.0f} | {loss} |"
        )
    return "\n".join(lines) + "\n"


def report_markdown(summary: dict) -> str:
    s = summary["settings"]
    answered, planned = summary["answered"], summary["planned"]
    parts = [
        f"# Fine-tuning, then longer inputs: {summary['model']} ({summary['architecture']}), "
        f"preset {summary['preset']}\n\n",
        f"Each task starts from the pretrained weights and is fine-tuned ({s['method']}"
        + (f", rank {s['lora_rank']}, alpha {s['lora_alpha']}" if s["method"] == "lora" else "")
        + f") for {s['max_steps']} steps of {s['batch_size']} prompts with input lengths "
        f"{s['train_lengths'][0]}-{s['train_lengths'][1]} (AdamW, lr {s['learning_rate']}, weight decay "
        f"{s['weight_decay']}, {s['warmup_fraction']:.0%} warmup, then linear decay; loss on the answer and its line "
        f"break only). Prompts: the in-context experiment's format with {s['demonstrations']} demonstrations of "
        f"length {s['demo_length']}. Before: the pretrained model answering in context; after: the fine-tuned "
        f"model; both on the same {s['examples_per_length']} prompts per length, greedy, exact match of the answer "
        "line. Accuracy with its 95% Wilson interval. `predicted`: the interpreter's C-RASP[pos] prediction, the "
        f"theory of APE transformers trained from scratch (shown for comparison; this model may use another "
        f"position encoding). After fine-tuning, observed as one seed (not a verdict): did not fit when the training "
        f"bin is below {summary['fit_threshold']}; else passes when the last bin's interval lies at or above "
        f"{summary['threshold']}, fails when it lies below, inconclusive otherwise.\n\n",
        markdown_table(summary),
        f"\nIn line with the prediction: {summary['agreements']} of {summary['judged']} tasks that have a "
        "prediction, fit their training lengths and are conclusive.\n",
        "\nGaps (accuracy difference with Newcombe's 95% interval), per bin and pooled over the lengths beyond "
        "training:\n\n",
        gap_table(summary),
        "\nDirectional gaps beyond the training lengths:\n\n",
        direction_statement(summary),
        "\nWhat fine-tuning changed beyond the training lengths, on the same prompts before and after "
        "(reports.statistics; bootstrap: 10,000 draws, seed 0). The family corrected by Holm: the changes of the "
        f"{sum(gap['change'] is not None for gap in summary['gaps'])} gaps below.\n\n",
        change_table(summary),
        "\nTraining:\n\n",
        training_table(summary),
    ]
    timing = [
        f"{stage}: {answered[stage]} prompts in {summary['eval_seconds'][stage]:.0f} s of generation"
        for stage in STAGES
        if answered[stage]
    ]
    if timing:
        parts.append(f"\nTest prompts answered ({'; '.join(timing)}; compilation included).\n")
    if summary["train_seconds"]:
        parts.append(
            f"Training: {summary['train_seconds'] / 60:.1f} min for {summary['train_tokens']:,} tokens "
            f"({summary['train_tokens'] / summary['train_seconds']:.0f} tokens/s, compilation and "
            "checkpoints included).\n"
        )
    missing = [f"{stage} {planned - answered[stage]} of {planned}" for stage in STAGES if answered[stage] < planned]
    if missing:
        parts.append(f"\nIncomplete run: prompts not answered yet: {', '.join(missing)}.\n")
    parts.append(
        "\nWhy each prediction:\n\n"
        + "".join(
            f"- {row['task']}: {row['predicted']['reason'] or row['predicted']['label']}\n" for row in summary["rows"]
        )
    )
    parts.append(f"\n![accuracy by length]({FIGURE_FILE})\n")
    return "".join(parts)


def draw_figure(summary: dict, path: Path) -> None:
    """Accuracy against input length per task, before (dashed) and after (solid) fine-tuning, the
    training lengths shaded; and the directional and uniqueness gaps beyond them."""
    plt = pyplot()
    rows = summary["rows"]
    figure, axes = plt.subplots(1, len(rows) + 1, figsize=(3.2 * (len(rows) + 1), 3.2), squeeze=False)
    lo, hi = summary["settings"]["train_lengths"]
    for ax, row in zip(axes[0], rows):
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.92", label="training lengths")
        for stage, style in (("before", "--"), ("after", "-")):
            points = [(n, a) for n, a in zip(row["curve"]["lengths"], row["curve"][stage]) if a is not None]
            if points:
                ax.plot(*zip(*points), style, marker=".", label="in context" if stage == "before" else "fine-tuned")
        ax.set_title(
            f"{row['task']} ({'left/backward' if row['task'] in LEFT_OR_BACKWARD else 'right/forward'})", fontsize=9
        )
        ax.set_xlabel("input length")
        ax.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("exact match")
    axes[0][0].legend(fontsize=7)
    ax = axes[0][-1]
    gaps = summary["gaps"]
    for offset, (stage, marker) in enumerate((("before", "s"), ("after", "o"))):
        entries = [(k, gap[stage]["beyond"]) for k, gap in enumerate(gaps) if gap[stage]["beyond"] is not None]
        if entries:
            positions = [k + 0.15 * (offset - 0.5) for k, _ in entries]
            values = [e["gap"] for _, e in entries]
            ax.errorbar(
                values,
                positions,
                xerr=[
                    [v - e["low"] for v, (_, e) in zip(values, entries)],
                    [e["high"] - v for v, (_, e) in zip(values, entries)],
                ],
                fmt=marker,
                capsize=3,
                label="in context" if stage == "before" else "fine-tuned",
            )
    ax.axvline(0, color="0.5", linewidth=1)
    ax.set_yticks(range(len(gaps)), [gap["name"] for gap in gaps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("gap beyond training (95% Newcombe)", fontsize=8)
    if gaps:
        ax.legend(fontsize=7)
    set_title(figure, f"{summary['model']}: fine-tuned on lengths {lo}-{hi}, tested beyond", fontsize=10)
    save_figure(figure, path, dpi=110)


def write_report(run_dir: Path, threshold: float | None = None) -> dict:
    """Rebuild summary.json, report.md and the figure from the run folder; return the summary."""
    return rebuild_report(
        run_dir, lambda folder: summarize(folder, threshold), report_markdown, draw_figure, FIGURE_FILE
    )
