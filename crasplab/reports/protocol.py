"""A protocol run's verdicts in words and tables: the discrimination check, the per-seed verdict
table and the recipe's benchmark, rendered from what crasplab.verdicts decided.
"""

from __future__ import annotations

import statistics

from crasplab.train.config import TrainConfig
from crasplab.verdicts.counting import last_bin_agreement
from crasplab.verdicts.rules import Verdict, VerdictRules


def discrimination_markdown(discrimination: dict) -> str:
    """Per task predicted not to generalize: each bounded approximation, whether it is exact on
    the training lengths, and its accuracy [95% interval] at each test bin."""
    checked = {task: entry for task, entry in discrimination.items() if entry.get("checked")}
    if not checked:
        return ""
    lines = [
        "## The discrimination check\n",
        "A bin discriminates when no approximation exact on training passes it.",
    ]
    for task, entry in checked.items():
        bins = [f"{lo}-{hi}" for lo, hi in entry["bins"]]
        when = f" ({entry['rechecked']})" if entry.get("rechecked") else ""
        lines += [f"\n{task}{when}:\n", "| approximation | exact on training | " + " | ".join(bins) + " |"]
        lines.append("|---|---|" + "---|" * len(bins))
        for approximation in entry["approximations"]:
            intervals = approximation.get("interval") or [None] * len(approximation["accuracy"])
            scores = [
                f"{accuracy:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
                for accuracy, interval in zip(approximation["accuracy"], intervals)
            ] or ["-"] * len(bins)
            found = approximation["program"] is not None
            exact = ("yes" if approximation["exact_on_training"] else "no") if found else "none found"
            lines.append(f"| {approximation['name']} | {exact} | " + " | ".join(scores) + " |")
        verdicts = {True: "yes", False: "no", None: "unknown"}
        lines.append("| bin discriminates | | " + " | ".join(verdicts[d] for d in entry["discriminates"]) + " |")
    return "\n".join(lines) + "\n\n"


def control_text(control: dict) -> str:
    """A bin's control in words: "its control UB at 4 layers not run"."""
    return f"its control {control['task']} at {control['layers']} layers {control['verdict']}"


def _spread(values) -> str:
    values = sorted(values)
    return f"{statistics.median(values):g} ({values[0]:g}-{values[-1]:g})" if values else "-"


def recipe_text(train: TrainConfig) -> str:
    """The settings that make a training recipe, in words, from one task's training settings."""
    after_warmup = (
        f"linear decay to 0 at step {train.max_steps}"
        if train.schedule == "linear"
        else f"constant to step {train.max_steps}"
    )
    clipping = train.max_grad_norm
    stop = train.stop_after_perfect_evals
    return (
        f"batches of {train.batch_size}, AdamW with weight decay {train.weight_decay:g}, "
        f"learning rate {train.learning_rate:g} after {train.warmup_steps} warmup steps, {after_warmup}, "
        + (f"gradients clipped to norm {clipping:g}" if clipping > 0 else "no gradient clipping")
        + (f", stop after {stop} perfect evaluations in a row" if stop else ", no early stop")
        + f" (an evaluation every {train.eval_every} steps)"
    )


def recipe_markdown(rows: list[dict]) -> str:
    """The recipe's benchmark as a table: fit rate and steps to fit per task."""
    lines = [
        "## The recipe on the training bin\n",
        "Read from the training bin only. A seed fits at its first evaluation that is exact on every "
        "training-length string (the protocol's rule 1); a seed fitted at one evaluation may still "
        "lose it later. Median (min-max) over seeds.\n",
        "| task | seeds finished | fitted at some evaluation | steps to fit | steps at stop | seconds per job |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['task']} | {len(row['seeds'])} | {len(row['steps_to_fit'])} of {len(row['seeds'])} | "
            f"{_spread(row['steps_to_fit'].values())} | {_spread(row['steps_at_stop'].values())} | "
            f"{_spread(row['seconds'].values())} |"
        )
    total = sum(sum(row["seconds"].values()) for row in rows)
    lines.append(f"\nTraining time, summed over jobs: {total / 60:.1f} min.\n")
    return "\n".join(lines) + "\n"


def protocol_markdown(rules: VerdictRules, rows: list[dict]) -> str:
    lines = [
        "## Verdicts under the protocol\n",
        rules.text() + "\n",
        "| task | predicted | seeds run | fitted | bin | seeds passing (accuracy [95% interval]) | verdict | "
        "bin discriminates | agrees |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        fit = f"{len(row['fitted'])}" + (
            f" (still improving at cap: {row['still_improving']})" if row["still_improving"] else ""
        )
        if not row["bins"]:
            lines.append(
                f"| {row['task']} | {row['predicted']} | {len(row['seeds_run'])} | {fit} | - | - | "
                "too few fitted seeds | - | - |"
            )
        for b in row["bins"]:
            passing = sum(s["outcome"] == "pass" for s in b["seeds"])
            cells = ", ".join(f"{s['correct'] / s['total']:.3f} [{s['low']:.3f}, {s['high']:.3f}]" for s in b["seeds"])
            discriminates = {None: "-", True: "yes", False: "no (a bounded program passes)"}[b["discriminates"]]
            if b.get("control") and b["control"]["verdict"] != Verdict.GENERALIZES:
                discriminates += f"; {control_text(b['control'])}: not counted"
            agreement = {None: "-", True: "yes", False: "NO"}[b["agrees"]]
            lines.append(
                f"| {row['task']} | {row['predicted']} | {len(row['seeds_run'])} | {fit} | {b['lo']}-{b['hi']} "
                f"| {passing} of {len(b['seeds'])}: {cells} | {b['verdict']} | {discriminates} | {agreement} |"
            )
    agreeing, counted, decided = last_bin_agreement(rows)
    lines.append(
        f"\nAt the last bin: {agreeing} of {counted} counted verdicts agree "
        f"with the prediction ({decided} tasks with a "
        "generalizes/fails verdict; a task predicted not to generalize is counted only where its bin "
        "discriminates and its control, at the same depth, generalizes there).\n"
    )
    return "\n".join(lines) + "\n"
