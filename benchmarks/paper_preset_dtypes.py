"""float32 against the faster compute dtypes under the paper-scale protocol's recipe: the same
short training in each, and a verdict on each, by a rule fixed here before any run, on whether it
may train the grid (meant for an accelerator; runs anywhere).

The choices (--dtypes, default all three; crasplab.models.config.DTYPES): bfloat16 (every
activation in bfloat16), bfloat16-mixed (bfloat16 products, the residual stream, norms, softmax
and loss in float32) and tf32 (float32 whose products run on tensor cores with TensorFloat-32
operands; on a CPU it computes as float32 does). Parameters and optimizer state stay float32 under
each. Trains --tasks with --seeds for --steps steps in float32 and in each choice through
experiments/length_gen.py, on the recipe of --preset (default protocol-paper: 4x4x256, AdamW 1e-4,
gradients clipped to norm 1) with a third of the steps warming the learning rate up and only the
training bin evaluated, once at the end (so on an accelerator the seeds of a task train as one
vmapped stack, as in the grid), into OUT/<dtype>. The seeds are not the protocol's (it draws from
9000), so the check spends none of them. It prints per choice and task the mean training loss at
every logged step beside float32's, the training-bin accuracy at the end and the training time,
then each verdict and the fastest dtype that may train (float32 where no choice may), and writes
the same to OUT/comparison.md and OUT/comparison.json. Running it again reuses finished runs.

The rule (SAME_TRAINING): a dtype trains the same when, for every task, it changes the training
no more than changing the seed does in float32 --
  * at no fewer than 90% of the logged steps after the warm-up, the seeds' mean training loss in
    that dtype differs from float32's by at most the spread (largest minus smallest) of the float32
    seeds' losses at that step; and
  * the seeds' mean accuracy on the training bin at the end differs by at most the larger of 0.05
    and the float32 seeds' spread.

    python benchmarks/paper_preset_dtypes.py --out runs/paper-dtypes
    python experiments/paper_grid.py --pes ape --dtype DTYPE      # then the grid, in the dtype it picked
"""

from __future__ import annotations

import argparse
from pathlib import Path

from crasplab.cli.arguments import at_least
from crasplab.cli.length_gen import RunRequest, run_length_gen
from crasplab.records.files import read_json_object, write_json, write_text
from crasplab.records.job_folder import JobRecords, run_jobs, run_records
from crasplab.train.config import PRESETS, PROTOCOL_PAPER, PROTOCOL_PRESETS
from crasplab.train.engines import EngineSettings

BASELINE = "float32"
CHOICES = ("bfloat16", "bfloat16-mixed", "tf32")  # each judged against BASELINE
COMPARISON_JSON = "comparison.json"
SAME_TRAINING = (
    "a dtype trains the same when, for every task, at >= 90% of the logged steps after the warm-up the seeds' "
    "mean training loss in it is within the float32 seeds' spread (max - min) of float32's mean, and the "
    "mean training-bin accuracy at the end is within max(0.05, the float32 seeds' spread) of float32's"
)
LOSS_STEPS_WITHIN = 0.9
ACCURACY_MARGIN = 0.05


def train(out: Path, dtype: str, args: argparse.Namespace) -> None:
    request = RunRequest(
        pe="ape",
        preset=args.preset,
        tasks=tuple(args.tasks),
        seeds=tuple(args.seeds),
        test_bins=PRESETS[args.preset].train.test_bins[:1],
        model_changes=dict(dtype=dtype),
        train_changes=dict(max_steps=args.steps, eval_every=args.steps, warmup_steps=args.steps // 3),
    )
    run_length_gen(request, EngineSettings(), show_progress=False, out=out / dtype)


def losses_by_step(jobs: list[JobRecords], task: str) -> dict[int, list[float]]:
    """step -> the training loss of each of the task's seeds (in the order the jobs came)."""
    by_step: dict[int, list[float]] = {}
    for job in jobs:
        if job.task == task:
            for record in job.training:
                by_step.setdefault(record.step, []).append(record.loss)
    return dict(sorted(by_step.items()))


def final_train_bin_accuracies(jobs: list[JobRecords], task: str) -> list[float]:
    evaluations = [e for job in jobs if job.task == task for e in job.evaluations]
    last_step = max(e.step for e in evaluations)
    return [e.bins[0].accuracy for e in evaluations if e.step == last_step]


def training_seconds(jobs: list[JobRecords], task: str) -> float:
    """The task's training time from its jobs' results (the longest seed; on an accelerator the
    seeds train as one stack, and each job records the stack's time)."""
    return max(job.result.elapsed_s for job in jobs if job.finished and job.task == task)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def spread(values: list[float]) -> float:
    return max(values) - min(values)


def compare_task(records: dict[str, list[JobRecords]], task: str, warmup_steps: int, choice: str = "bfloat16") -> dict:
    """The task's curves in float32 and in `choice`, and whether `choice` meets SAME_TRAINING."""
    dtypes = (BASELINE, choice)
    full, other = (losses_by_step(records[dtype], task) for dtype in dtypes)
    steps = [s for s in full if s in other]
    rows = [{"step": s, BASELINE: mean(full[s]), choice: mean(other[s]), "seed_spread": spread(full[s])} for s in steps]
    after_warmup = [row for row in rows if row["step"] > warmup_steps]
    within = [abs(row[choice] - row[BASELINE]) <= row["seed_spread"] for row in after_warmup]
    accuracy = {dtype: final_train_bin_accuracies(records[dtype], task) for dtype in dtypes}
    accuracy_gap = abs(mean(accuracy[choice]) - mean(accuracy[BASELINE]))
    accuracy_margin = max(ACCURACY_MARGIN, spread(accuracy[BASELINE]))
    loss_share = sum(within) / len(within) if within else 0.0
    return dict(
        losses=rows,
        loss_steps_within_seed_spread=loss_share,
        train_bin_accuracy=accuracy,
        accuracy_gap=accuracy_gap,
        accuracy_margin=accuracy_margin,
        seconds={dtype: training_seconds(records[dtype], task) for dtype in dtypes},
        same_training=loss_share >= LOSS_STEPS_WITHIN and accuracy_gap <= accuracy_margin,
    )


def comparison(out: Path, tasks: list[str], seeds: list[int], warmup_steps: int, choices=CHOICES) -> dict:
    """Each choice's verdict, the training seconds of every dtype (its tasks' summed), and the
    fastest dtype that trains the same (float32 where no choice does)."""
    records = {dtype: run_records(out / dtype, run_jobs(tasks, seeds)) for dtype in (BASELINE, *choices)}
    verdicts = {}
    for choice in choices:
        by_task = {task: compare_task(records, task, warmup_steps, choice) for task in tasks}
        verdicts[choice] = dict(tasks=by_task, same_training=all(t["same_training"] for t in by_task.values()))
    seconds = {dtype: sum(training_seconds(records[dtype], task) for task in tasks) for dtype in records}
    passed = [BASELINE] + [choice for choice in choices if verdicts[choice]["same_training"]]
    return dict(rule=SAME_TRAINING, choices=verdicts, seconds=seconds, fastest=min(passed, key=seconds.get))


def comparison_text(result: dict) -> str:
    lines = ["# float32 against faster compute dtypes under the protocol's recipe (APE)", ""]
    for choice, verdict in result["choices"].items():
        lines += [f"# {choice}", ""]
        for task, row in verdict["tasks"].items():
            lines += [
                f"## {task}",
                "",
                f"| step | loss {BASELINE} | loss {choice} | {BASELINE} seeds' spread |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| {r['step']} | {r[BASELINE]:.4f} | {r[choice]:.4f} | {r['seed_spread']:.4f} |" for r in row["losses"]
            ]
            accuracies = ", ".join(f"{dtype} {mean(values):.3f}" for dtype, values in row["train_bin_accuracy"].items())
            times = ", ".join(f"{dtype} {seconds:.0f} s" for dtype, seconds in row["seconds"].items())
            lines += [
                "",
                f"Logged steps after the warm-up where the loss gap is within the seeds' spread: "
                f"{row['loss_steps_within_seed_spread']:.0%}. Training-bin accuracy at the end (mean over seeds): "
                f"{accuracies} (gap {row['accuracy_gap']:.3f}, allowed {row['accuracy_margin']:.3f}). "
                f"Training time (compilation and evaluation included): {times}. "
                f"Same training: {'yes' if row['same_training'] else 'no'}.",
                "",
            ]
    lines += [f"Rule: {result['rule']}.", ""]
    for choice, verdict in result["choices"].items():
        lines.append(f"**{choice} trains the same: {'yes' if verdict['same_training'] else 'no'}**")
    seconds = ", ".join(f"{dtype} {value:.0f} s" for dtype, value in result["seconds"].items())
    lines += [
        "",
        f"Training time of the check, tasks summed: {seconds}.",
        f"**fastest that trains the same: {result['fastest']}**",
    ]
    return "\n".join(lines)


def fastest_same_training(out: Path) -> str:
    """The dtype a finished comparison in `out` picked; float32 where there is none, or where it
    is of the format before the choices (a verdict on bfloat16 alone, which picked nothing)."""
    path = out / COMPARISON_JSON
    if not path.is_file():
        return BASELINE
    return read_json_object(path, "delete it and run benchmarks/paper_preset_dtypes.py again").get("fastest", BASELINE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the two runs and comparison.md/json")
    parser.add_argument("--preset", choices=PROTOCOL_PRESETS, default=PROTOCOL_PAPER.name, help="the recipe")
    parser.add_argument(
        "--tasks", nargs="+", default=["NLFirst", "NLLast"], help="task codes (default: NLFirst NLLast)"
    )
    parser.add_argument("--seeds", nargs="+", type=at_least(0), default=[0, 1, 2], help="seeds (default: 0 1 2)")
    parser.add_argument("--steps", type=int, default=2000, help="training steps in each dtype (default: 2000)")
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=CHOICES,
        default=list(CHOICES),
        help="the choices judged against float32 (default: all)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    log_every = PRESETS[args.preset].train.log_every
    if args.steps < 3 * log_every:
        parser.error(
            f"--steps {args.steps}: at least {3 * log_every} are needed, so that training records "
            f"(one per {log_every} steps) exist after the warm-up's third"
        )
    if len(args.seeds) < 2:
        parser.error("--seeds: give at least two, the float32 seeds' spread is what bfloat16 is measured against")
    for dtype in (BASELINE, *args.dtypes):
        train(args.out, dtype, args)
    result = comparison(args.out, args.tasks, args.seeds, args.steps // 3, tuple(args.dtypes))
    write_json(args.out / COMPARISON_JSON, result)
    text = comparison_text(result)
    write_text(args.out / "comparison.md", text + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    main()
