"""A sweep with selection, then the verdict: per task, train every configuration of a grid (layers
x heads x d_model x learning rate, Huang et al.'s by default) on the training lengths, choose one
configuration by a rule applied identically to every task (crasplab/reports/selection.py: fit on
the training bin, then the best on a validation bin that the verdict never reads, ties to the
smaller model), then train the verdict seeds of each chosen configuration as a length_gen run.

    python experiments/sweep.py --pe ape --tasks NLFirst UL --grid small               # a CPU-sized grid
    python experiments/sweep.py --pe ape --tasks UL --layers 1 2 --d-model 64 --lr 1e-3 1e-4
    python experiments/sweep.py --pe ape --preset paper --engine ray --ray-address auto  # 54 configurations per task
    python experiments/sweep.py --report-only runs/sweep/ape-quick

The run folder (default runs/sweep/<pe>-<preset>/) holds config.json (the sweep's settings), one
job folder per run (<task>/<configuration>/seed<s>/), selection.json and selection.md (every
configuration's training-bin and validation-bin accuracy, the choice per task), and verdict/, a
length_gen run folder (config.json, job folders, summary.json, report.md) for the chosen
configurations. Running the same command again resumes every unfinished job; the selection is
recomputed from the job folders' result.json files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import add_run_folder_flags, add_tasks_flag, at_least, length_bins, run_from_flags
from crasplab.cli.engine_flags import add_engine_flags, engine_settings
from crasplab.cli.experiment import Report
from crasplab.cli.sweep import SweepInvocation, SweepSettings, run, sweep_markdown, write_sweep_report
from crasplab.models.positions import POSITIONS
from crasplab.records.settings import SettingsError
from crasplab.reports.selection import GRIDS, grid
from crasplab.train.config import PRESETS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pe", choices=POSITIONS, default="ape", help="position encoding")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="quick",
        help="training lengths, bins, budgets and sampler parameters per task",
    )
    add_tasks_flag(parser, None, "task codes (default: the preset's)", choices=TASK_CODES)
    parser.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="huang",
        help="the grid: "
        + "; ".join(
            f"{name}: " + " x ".join(f"{key} {list(values)}" for key, values in dims.items())
            for name, dims in GRIDS.items()
        ),
    )
    parser.add_argument("--layers", type=at_least(1), nargs="+", default=None, help="replace the grid's layer counts")
    parser.add_argument("--heads", type=at_least(1), nargs="+", default=None, help="replace the grid's head counts")
    parser.add_argument("--d-model", type=at_least(1), nargs="+", default=None, help="replace the grid's widths")
    parser.add_argument("--lr", type=float, nargs="+", default=None, help="replace the grid's learning rates")
    parser.add_argument(
        "--sweep-seeds",
        type=at_least(0),
        nargs="+",
        default=[0],
        help="seeds of every sweep run (default: 0; the selection uses their mean)",
    )
    parser.add_argument(
        "--seeds",
        type=at_least(0),
        nargs="+",
        default=None,
        help="verdict seeds of each chosen configuration (default: the preset's)",
    )
    parser.add_argument(
        "--validation-bin",
        type=length_bins,
        default=None,
        metavar="LO-HI",
        help="the bin the selection reads (default: the preset's first bin past training, which the "
        "verdict never reads: it judges on the last bin)",
    )
    parser.add_argument(
        "--max-steps",
        type=at_least(1),
        default=None,
        help="step cap of every run, sweep and verdict (default: the preset's per task)",
    )
    parser.add_argument("--select-only", action="store_true", help="stop after the selection; train no verdict seeds")
    add_run_folder_flags(
        parser, "runs/sweep/<pe>-<preset>", "selection.json, selection.md and the verdict run's report"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_engine_flags(parser)
    return parser


def sweep_config(args: argparse.Namespace) -> SweepSettings:
    """The sweep's settings, from the preset and the flags."""
    preset = PRESETS[args.preset]
    dims = dict(GRIDS[args.grid])
    for name, flag in (
        ("n_layers", args.layers),
        ("n_heads", args.heads),
        ("d_model", args.d_model),
        ("learning_rate", args.lr),
    ):
        dims[name] = tuple(flag or dims[name])
    configurations = grid(**dims)
    if not configurations:
        raise SettingsError(f"the grid {dims} has no configuration whose d_model the heads divide")
    validation = args.validation_bin or preset.train.test_bins[1:2]
    if len(validation) != 1:
        raise SettingsError(f"--validation-bin takes one LO-HI bin, got {len(validation)}")
    return SweepSettings(
        pe=args.pe,
        preset=preset.name,
        tasks=tuple(args.tasks or preset.tasks),
        configurations=tuple(configurations),
        sweep_seeds=tuple(args.sweep_seeds),
        validation_bin=validation[0],
        max_steps=args.max_steps,
        verdict_seeds=tuple(args.seeds or preset.seeds),
    )


def invocation(args: argparse.Namespace) -> SweepInvocation:
    return SweepInvocation(sweep_config(args), engine_settings(args), args.select_only, not args.no_progress)


def default_folder(settings: SweepInvocation) -> Path:
    return Path("runs") / "sweep" / f"{settings.config.pe}-{settings.config.preset}"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(args, invocation, default_folder, run, Report(write_sweep_report, sweep_markdown, "selection.md"))


if __name__ == "__main__":
    main()
