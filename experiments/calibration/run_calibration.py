"""Calibration study for the `quick` preset: learning curves per task for candidate recipes.

Each candidate trains the chosen tasks for a fixed step budget with early stopping disabled and
evaluates every `eval_every` steps on the training bin and two longer bins, so the curves show
when in-distribution accuracy reaches 100% and whether (and when) the longer bins follow. Runs
go to runs/calibration/<candidate>/<task>/ (git-ignored); the curves the repository keeps are
written to evidence/curves/<candidate>-<pe>.json, and `plot_calibration.py` draws them.

    python experiments/calibration/run_calibration.py --candidate base --tasks UF NF UR NRLast
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from crasplab.records.files import read_jsonl, write_json
from crasplab.models.positions import POSITIONS
from crasplab.train.config import ModelSettings, TrainConfig
from crasplab.train.loop import Job, run_job

ROOT = Path(__file__).resolve().parents[2]


# Every candidate: a model, a training length range with bins 1x / 2x / 3x of it, and a budget.
# The curves in evidence/curves/ were measured before evaluation became per length (200 random-length
# strings per bin then; 10 strings at each length now) and before length buckets (1: mixed batches).
def unique_alphabets(size: int) -> dict:
    """Unique-token tasks need at least as many symbols as the longest test input."""
    return {code: dict(alphabet_size=size) for code in ("UL", "UR", "UF", "UB")}


SMALL_MODEL = dict(n_layers=2, n_heads=4, d_model=64)
CANDIDATES = {
    "base": dict(model=SMALL_MODEL, train_max=10, lr=1e-3, steps=6000, task_overrides=unique_alphabets(32)),
    "long20": dict(model=SMALL_MODEL, train_max=20, lr=1e-3, steps=5000, task_overrides=unique_alphabets(64)),
    # Retrieval gets one supervised token per string (copying gets the whole input): more steps,
    # and a smaller alphabet for the unique variants (their inputs need no distinct symbols).
    "ret16": dict(model=SMALL_MODEL, train_max=20, lr=1e-3, steps=10000, task_overrides=unique_alphabets(16)),
    # Copying: does in-distribution-to-longer transfer keep rising with a longer budget?
    "copy8k": dict(model=SMALL_MODEL, train_max=20, lr=1e-3, steps=8000, task_overrides=unique_alphabets(64)),
    # Copying with a wider training range: does the reach beyond it grow with the range?
    "copy30": dict(model=SMALL_MODEL, train_max=30, lr=1e-3, steps=6000, task_overrides=unique_alphabets(96)),
}


def candidate_config(candidate: dict) -> TrainConfig:
    n = candidate["train_max"]
    bins = ((1, n), (n + 1, n + n // 2), (n + n // 2 + 1, 2 * n), (2 * n + 1, 3 * n))
    return TrainConfig(
        train_lengths=(1, n),
        test_bins=bins,
        batch_size=64,
        learning_rate=candidate["lr"],
        schedule=candidate.get("schedule", "linear"),
        warmup_steps=candidate.get("warmup", 200),
        max_steps=candidate["steps"],
        eval_every=candidate.get("eval_every", 500),
        stop_after_perfect_evals=0,
        eval_examples_per_length=10,
        greedy_examples_per_bin=16,
        eval_batch_size=200,
        length_buckets=candidate.get("length_buckets", 1),
        log_every=100,
        checkpoint_every=candidate["steps"],
        max_positions=candidate.get("max_positions", 0),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", required=True, choices=sorted(CANDIDATES), help="which recipe to measure")
    parser.add_argument("--tasks", nargs="+", required=True, help="task codes to train, one after the other")
    parser.add_argument("--pe", default="ape", choices=POSITIONS, help="positional encoding")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    args = parser.parse_args()
    candidate = CANDIDATES[args.candidate]
    config = candidate_config(candidate)
    curves_path = ROOT / "evidence" / "curves" / f"{args.candidate}-{args.pe}.json"
    for task in args.tasks:
        job = Job(
            task_code=task,
            seed=args.seed,
            model=ModelSettings(pe=args.pe, **candidate["model"]),
            train=config,
            task_overrides=candidate.get("task_overrides", {}).get(task, {}),
            out_dir=str(ROOT / "runs" / "calibration" / f"{args.candidate}-{args.pe}" / task),
        )
        start = time.monotonic()
        result = run_job(job)
        records = read_jsonl(job.folder / "metrics.jsonl")
        # Read just before writing: another process may have added its task meanwhile.
        curves = json.loads(curves_path.read_text()) if curves_path.exists() else {}
        curves[task] = dict(
            candidate=candidate,
            seed=args.seed,
            train_seconds=result.elapsed_s,
            wall_seconds=round(time.monotonic() - start, 1),
            train=[(r["step"], r["loss"], r["sequence_accuracy"]) for r in records if r["kind"] == "train"],
            eval=[(r["step"], [b["accuracy"] for b in r["bins"]]) for r in records if r["kind"] == "eval"],
            bins=[(b["lo"], b["hi"]) for b in records[-1]["bins"]],
        )
        write_json(curves_path, curves)
        print(task, result.elapsed_s, "s", curves[task]["eval"][-1], flush=True)


if __name__ == "__main__":
    main()
