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
import dataclasses
import sys
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from crasplab.cli.arguments import add_list_flag, add_run_folder_flags, at_least, run_from_flags, settings_from_flags
from crasplab.cli.experiment import Report

TASKS = ("UR", "NRFirst", "UF", "UB", "Majority")  # crasplab.compiler.study.WITNESS_RUNS, before jax is imported
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class CompiledSettings:
    """What one invocation compiles and scores; config.json (config-append-N.json with --append)."""

    lengths: tuple[int, ...] = (10, 20, 40, 100, 1000)
    tasks: tuple[str, ...] = TASKS
    samples: int = 10
    alphabet_size: int = 16
    rounding_lengths: tuple[int, ...] = (100, 1000, 3000, 10000)
    replay_lengths: tuple[int, ...] = ()
    rounding_dtypes: tuple[str, ...] = DTYPES
    witness_dtypes: tuple[str, ...] = DTYPES
    seed: int = 0
    trained: tuple[str, ...] = ()  # length_gen run folders
    trained_lengths: tuple[int, ...] = (10, 20, 30, 40, 64)
    append: bool = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = CompiledSettings()
    add_run_folder_flags(parser, "runs/compiled", "summary.json, report.md and the figure")
    add_list_flag(
        parser,
        "--lengths",
        defaults.lengths,
        "input lengths for the witnesses (those a task's sampler cannot produce are skipped)",
        type=at_least(1),
    )
    parser.add_argument(
        "--tasks",
        nargs="*",
        default=list(defaults.tasks),
        choices=TASKS,
        help=f"witnesses of these tasks (default: {' '.join(TASKS)}; none: only the rounding study and --trained)",
    )
    parser.add_argument("--samples", type=at_least(1), default=defaults.samples, help="strings per length (default 10)")
    parser.add_argument(
        "--alphabet-size",
        type=at_least(2),
        default=defaults.alphabet_size,
        help="symbols of the tasks that take an alphabet size (default 16; the defaults of 150 "
        "make the keyed heads wide and slow on a CPU)",
    )
    parser.add_argument(
        "--rounding-lengths",
        type=at_least(1),
        nargs="*",
        default=list(defaults.rounding_lengths),
        help="input lengths of the rounding study (none: skip it)",
    )
    parser.add_argument(
        "--replay-lengths",
        type=at_least(1),
        nargs="*",
        default=[],
        help="lengths at which layer 0's head of the rounding study is replayed alone (crasplab.compiler.replay; "
        "lengths the whole model cannot run on a CPU)",
    )
    add_list_flag(parser, "--rounding-dtypes", DTYPES, "dtypes of the rounding study (default both)", choices=DTYPES)
    add_list_flag(
        parser,
        "--witness-dtypes",
        DTYPES,
        "dtypes each witness runs in (default both; float64 runs in jax's 64-bit mode, float32 without it)",
        choices=DTYPES,
    )
    parser.add_argument("--seed", type=at_least(0), default=0, help="seed of the strings (default 0)")
    parser.add_argument(
        "--trained",
        type=Path,
        nargs="*",
        default=[],
        metavar="RUN_DIR",
        help="length_gen.py run folders whose trained models are scored beside the compiled witness "
        "of the same encoding, on the same strings",
    )
    add_list_flag(
        parser,
        "--trained-lengths",
        defaults.trained_lengths,
        "input lengths for the trained comparison (default 10 20 30 40 64)",
        type=at_least(1),
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add this run's records to the folder's metrics.jsonl instead of starting it afresh",
    )
    return parser


def settings_from(args: argparse.Namespace) -> CompiledSettings:
    # Frozen settings hold tuples, and the trained runs' folders as written.
    as_tuples = {name: tuple(value) for name, value in vars(args).items() if isinstance(value, list)}
    return settings_from_flags(CompiledSettings, args, **{**as_tuples, "trained": tuple(map(str, args.trained))})


def run(settings: CompiledSettings, out: Path) -> None:
    """Append one record per (witness, encoding, dtype, length) to metrics.jsonl, as each is computed."""
    from crasplab.compiler.replay import replay_records
    from crasplab.compiler.study import (
        check_trained_runs,
        read_config,
        rounding_records,
        trained_records,
        witness_records,
    )
    from crasplab.records.files import append_jsonl, write_json, write_jsonl
    from crasplab.records.run_folder import lock_run_folder

    check_trained_runs(settings.trained)
    if (out / "config.json").exists():
        read_config(out)  # a folder of another experiment is refused: its files are never replaced
    lock_run_folder(out)
    if not settings.append:
        write_jsonl(out / "metrics.jsonl", [])  # a fresh run: every record below is recomputed
    name = f"config-append-{len(list(out.glob('config*')))}.json" if settings.append else "config.json"
    write_json(out / name, dataclasses.asdict(settings))
    records = witness_records(
        settings.lengths,
        settings.samples,
        settings.seed,
        settings.alphabet_size,
        settings.tasks,
        settings.witness_dtypes,
    )
    if settings.rounding_lengths:
        records = chain(
            records,
            rounding_records(settings.rounding_lengths, settings.samples, settings.seed, settings.rounding_dtypes),
        )
    if settings.replay_lengths:
        records = chain(
            records, replay_records(settings.replay_lengths, settings.samples, settings.seed, settings.rounding_dtypes)
        )
    for run_dir in settings.trained:
        records = chain(
            records, trained_records(Path(run_dir), settings.trained_lengths, settings.samples, settings.seed)
        )
    for record in records:
        append_jsonl(out / "metrics.jsonl", record)
        print(record, flush=True, file=sys.stderr)


def write_report(run_dir: Path) -> dict:
    """summary.json, report.md and the figure, from metrics.jsonl."""
    from crasplab.compiler.study import figure, report, summarize
    from crasplab.records.files import write_json, write_text

    summary = summarize(run_dir)
    write_json(run_dir / "summary.json", summary)
    write_text(run_dir / "report.md", report(summary))
    figure(summary, run_dir / "accuracy_by_length.png")
    return summary


def report_markdown(summary: dict) -> str:
    from crasplab.compiler.study import report

    return report(summary)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args, settings_from, lambda settings: Path("runs/compiled"), run, Report(write_report, report_markdown)
    )


if __name__ == "__main__":
    main()
