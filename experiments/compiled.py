"""Compiled witnesses: the transformers the C-RASP programs describe, run far past any training length.

    python experiments/compiled.py --out runs/compiled                  # lengths 10 20 40 100 1000
    python experiments/compiled.py --out runs/compiled --lengths 10 100 1000 10000 --rounding-lengths 1000 10000 30000
    python experiments/compiled.py --report-only runs/compiled

Compiles the witnesses of UR, NRFirst, UF, UB and Majority (APE/RoPE, and the C-RASP[] nested-count
versions for NoPE) with crasplab.compiler, scores each on the task's sampled strings at every
length the sampler allows beside the interpreter, in float32 and float64 (the longest length
each is exact to), and runs the rounding study (Majority at margin 1 in float32 and float64: the
length where each first fails, and the rounding error of the compared counts). The folder holds
config.json, metrics.jsonl, summary.json, report.md and accuracy_by_length.png, all computed from
metrics.jsonl. With --trained RUN_DIR (a length_gen.py run) the run's trained models and the
compiled witness of the same encoding answer the same strings, beside each other.
"""

from __future__ import annotations

import argparse
import sys
from itertools import chain
from pathlib import Path

TASKS = ("UR", "NRFirst", "UF", "UB", "Majority")  # crasplab.compiler.study.WITNESS_RUNS, before jax is imported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/compiled"), help="run folder (default runs/compiled)")
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[10, 20, 40, 100, 1000],
        help="input lengths for the witnesses (those a task's sampler cannot produce are skipped)",
    )
    parser.add_argument(
        "--tasks",
        nargs="*",
        default=list(TASKS),
        choices=TASKS,
        help=f"witnesses of these tasks (default: {' '.join(TASKS)})",
    )
    parser.add_argument("--samples", type=int, default=10, help="strings per length (default 10)")
    parser.add_argument(
        "--alphabet-size",
        type=int,
        default=16,
        help="symbols of the tasks that take an alphabet size (default 16; the defaults of 150 "
        "make the keyed heads wide and slow on a CPU)",
    )
    parser.add_argument(
        "--rounding-lengths",
        type=int,
        nargs="*",
        default=[100, 1000, 3000, 10000],
        help="input lengths of the rounding study (none: skip it)",
    )
    parser.add_argument(
        "--replay-lengths",
        type=int,
        nargs="*",
        default=[],
        help="lengths at which layer 0's head of the rounding study is replayed alone (crasplab.compiler.replay; "
        "lengths the whole model cannot run on a CPU)",
    )
    parser.add_argument("--rounding-dtypes", nargs="+", default=["float32", "float64"], choices=("float32", "float64"))
    parser.add_argument(
        "--witness-dtypes",
        nargs="+",
        default=["float32", "float64"],
        choices=("float32", "float64"),
        help="dtypes each witness runs in (default both; float64 runs in jax's 64-bit mode, float32 without it)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the strings (default 0)")
    parser.add_argument(
        "--trained",
        type=Path,
        nargs="*",
        default=[],
        metavar="RUN_DIR",
        help="length_gen.py run folders whose trained models are scored beside the compiled witness "
        "of the same encoding, on the same strings",
    )
    parser.add_argument(
        "--trained-lengths",
        type=int,
        nargs="+",
        default=[10, 20, 30, 40, 64],
        help="input lengths for the trained comparison (default 10 20 30 40 64)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add this run's records to the folder's metrics.jsonl instead of starting it afresh",
    )
    parser.add_argument("--report-only", type=Path, metavar="RUN_DIR", help="rebuild the report of a finished run")
    args = parser.parse_args(argv)
    from crasplab.compiler.replay import replay_records
    from crasplab.compiler.study import figure, report, rounding_records, summarize, trained_records, witness_records
    from crasplab.results.files import append_jsonl, write_json, write_text

    def finish(run_dir: Path) -> None:
        summary = summarize(run_dir)
        write_json(run_dir / "summary.json", summary)
        write_text(run_dir / "report.md", report(summary))
        figure(summary, run_dir / "accuracy_by_length.png")
        print(report(summary))

    if args.report_only:
        finish(args.report_only)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "metrics.jsonl").exists() and not args.append:
        (args.out / "metrics.jsonl").unlink()  # a fresh run: every record below is recomputed
    settings = {
        k: ([str(p) for p in v] if k == "trained" else str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
    }
    write_json(
        args.out / ("config.json" if not args.append else f"config-append-{len(list(args.out.glob('config*')))}.json"),
        settings,
    )
    records = witness_records(
        args.lengths, args.samples, args.seed, args.alphabet_size, args.tasks, args.witness_dtypes
    )
    if args.rounding_lengths:
        records = chain(records, rounding_records(args.rounding_lengths, args.samples, args.seed, args.rounding_dtypes))
    if args.replay_lengths:
        records = chain(records, replay_records(args.replay_lengths, args.samples, args.seed, args.rounding_dtypes))
    for run_dir in args.trained:
        records = chain(records, trained_records(run_dir, args.trained_lengths, args.samples, args.seed))
    for record in records:
        append_jsonl(args.out / "metrics.jsonl", record)
        print(record, flush=True)
    finish(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
