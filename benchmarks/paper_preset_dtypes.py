"""float32 against bfloat16 on the paper preset: the same short training in each compute dtype,
checked before the whole grid is trained in one of them (meant for an accelerator; runs anywhere).

Trains --tasks with --seeds for --steps steps in each dtype through experiments/length_gen.py (so
on an accelerator the seeds of a task train as one vmapped stack, as in the grid), into
OUT/float32 and OUT/bfloat16 (parameters and optimizer state stay float32 in both; bfloat16 is the
compute dtype). Then it prints, per task, the training loss (mean over seeds) at every logged step
in both dtypes, the largest relative gap, the training-bin accuracy at the end and the training
time, and writes the same to OUT/comparison.md. Running it again reuses finished runs.

    python benchmarks/paper_preset_dtypes.py --out runs/paper-dtypes
    python experiments/length_gen.py --pe ape --preset paper --dtype bfloat16   # then the grid, in the dtype chosen
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `experiments` as a package, run as a script

from crasplab.cli.arguments import at_least  # noqa: E402
from experiments import length_gen  # noqa: E402
from crasplab.results.files import read_jsonl, write_text  # noqa: E402
from crasplab.train.config import PAPER  # noqa: E402

DTYPES = ("float32", "bfloat16")


def train(out: Path, dtype: str, args: argparse.Namespace) -> None:
    length_gen.main(
        [
            "--pe",
            "ape",
            "--preset",
            "paper",
            "--dtype",
            dtype,
            "--out",
            str(out / dtype),
            "--tasks",
            *args.tasks,
            "--seeds",
            *map(str, args.seeds),
            "--max-steps",
            str(args.steps),
            "--eval-every",
            str(args.steps),
            "--warmup-steps",
            str(args.steps // 3),
            "--no-progress",
        ]
    )


def losses_by_step(records: list[dict], task: str) -> dict[int, float]:
    """step -> training loss averaged over the task's seeds."""
    by_step: dict[int, list[float]] = {}
    for record in records:
        if record["kind"] == "train" and record["task"] == task:
            by_step.setdefault(record["step"], []).append(record["loss"])
    return {step: sum(losses) / len(losses) for step, losses in sorted(by_step.items())}


def final_train_bin_accuracy(records: list[dict], task: str) -> float:
    evaluations = [r for r in records if r["kind"] == "eval" and r["task"] == task]
    last_step = max(r["step"] for r in evaluations)
    finals = [r["bins"][0]["accuracy"] for r in evaluations if r["step"] == last_step]
    return sum(finals) / len(finals)


def training_seconds(records: list[dict], task: str) -> float:
    """The task's training time from its jobs' results (the longest seed; on an accelerator the
    seeds train as one stack, and each job records the stack's time)."""
    return max(r["elapsed_s"] for r in records if r["kind"] == "result" and r["task"] == task)


def comparison(out: Path, tasks: list[str]) -> str:
    records = {dtype: read_jsonl(out / dtype / "metrics.jsonl") for dtype in DTYPES}
    lines = ["# float32 against bfloat16, paper preset (APE)", ""]
    for task in tasks:
        curves = {dtype: losses_by_step(records[dtype], task) for dtype in DTYPES}
        full, half = curves["float32"], curves["bfloat16"]
        steps = sorted(set(full) & set(half))
        gaps = [abs(half[s] - full[s]) / max(full[s], 1e-9) for s in steps]
        lines += [f"## {task}", "", "| step | loss float32 | loss bfloat16 | relative gap |", "|---|---|---|---|"]
        lines += [f"| {s} | {full[s]:.4f} | {half[s]:.4f} | {g:.2%} |" for s, g in zip(steps, gaps)]
        accuracies = ", ".join(f"{dtype} {final_train_bin_accuracy(records[dtype], task):.3f}" for dtype in DTYPES)
        times = ", ".join(f"{dtype} {training_seconds(records[dtype], task):.0f} s" for dtype in DTYPES)
        lines += [
            "",
            f"Largest relative gap in the training loss: {max(gaps):.2%}. "
            f"Accuracy on the training bin at the end: {accuracies}. "
            f"Training time (compilation and evaluation included): {times}.",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the two runs and comparison.md")
    parser.add_argument("--tasks", nargs="+", default=["UF", "NLFirst"], help="task codes (default: UF NLFirst)")
    parser.add_argument("--seeds", nargs="+", type=at_least(0), default=[0, 1, 2], help="seeds (default: 0 1 2)")
    parser.add_argument(
        "--steps",
        type=int,
        default=300,
        help="training steps in each dtype, a third of them warming the learning rate up (default: 300)",
    )
    args = parser.parse_args()
    log_every = PAPER.train.log_every
    if args.steps < log_every:
        parser.error(
            f"--steps {args.steps}: at least {log_every} are needed, the steps over which the paper "
            f"preset averages one training record"
        )
    for dtype in DTYPES:
        train(args.out, dtype, args)
    text = comparison(args.out, args.tasks)
    write_text(args.out / "comparison.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
