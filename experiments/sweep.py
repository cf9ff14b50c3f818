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
from dataclasses import asdict, dataclass
from pathlib import Path

from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import add_run_folder_flags, add_tasks_flag, at_least, length_bins, run_from_flags
from crasplab.cli.experiment import Report
from crasplab.models.positions import POSITIONS
from crasplab.records.files import write_json, write_text
from crasplab.reports.length_gen import DEFAULT_THRESHOLD, markdown_table, write_report
from crasplab.reports.protocol import settings_predictions, write_predictions
from crasplab.records.run_folder import open_run_folder, read_run_config
from crasplab.reports.selection import (
    GRIDS,
    SELECTED,
    Configuration,
    grid,
    select_per_task,
    selection_markdown,
    sweep_folder,
)
from crasplab.train.config import PRESETS, RunSettings
from crasplab.records.settings import SettingsError
from crasplab.cli.engine_flags import add_engine_flags, engine_settings
from crasplab.train.engines import EngineSettings, run_jobs_on
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.runs import check_jobs, make_jobs

SWEEP_SETTINGS = ("pe", "preset", "tasks", "configurations", "sweep_seeds", "validation_bin", "max_steps")
VERDICT_FOLDER = "verdict"


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


def sweep_config(args: argparse.Namespace) -> dict:
    """config.json of the sweep."""
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
    return dict(
        pe=args.pe,
        preset=preset.name,
        tasks=list(args.tasks or preset.tasks),
        configurations=[asdict(c) for c in configurations],
        sweep_seeds=list(args.sweep_seeds),
        validation_bin=list(validation[0]),
        max_steps=args.max_steps,
        verdict_seeds=list(args.seeds or preset.seeds),
    )


def train_changes(config: dict) -> dict:
    return {} if config["max_steps"] is None else dict(max_steps=config["max_steps"])


def sweep_jobs(config: dict, run_dir: Path) -> list[Job]:
    """One job per (task, configuration, seed), evaluated on the training bin and the validation bin."""
    preset = PRESETS[config["preset"]]
    jobs = []
    for task in config["tasks"]:
        for values in config["configurations"]:
            configuration = Configuration.from_dict(values)
            base = preset.train_for(task, **train_changes(config))
            train = base.replace(
                learning_rate=configuration.learning_rate,
                test_bins=(base.train_lengths, tuple(config["validation_bin"])),
            )
            model = preset.model.replace(
                pe=config["pe"],
                n_layers=configuration.n_layers,
                n_heads=configuration.n_heads,
                d_model=configuration.d_model,
                d_ff=0,
            )
            jobs += [
                Job(
                    task_code=task,
                    seed=seed,
                    model=model,
                    train=train,
                    task_overrides=preset.overrides_for(task),
                    out_dir=str(sweep_folder(run_dir, task, configuration, seed)),
                )
                for seed in config["sweep_seeds"]
            ]
    return jobs


def evaluated_bins(config: dict, jobs: list[Job]) -> dict[str, tuple]:
    """task -> (training bin, validation bin) as the runs record them (limited to the lengths the
    task's sampler produces)."""
    return {job.task_code: tuple(TaskSetup.for_job(job).bins) for job in jobs}


def write_selection(run_dir: Path, config: dict, jobs: list[Job]) -> dict:
    configurations = [Configuration.from_dict(values) for values in config["configurations"]]
    selection = select_per_task(
        run_dir, config["tasks"], configurations, config["sweep_seeds"], evaluated_bins(config, jobs)
    )
    write_json(run_dir / "selection.json", selection)
    write_text(run_dir / "selection.md", selection_markdown(selection))
    return selection


def verdict_settings(config: dict, selection: dict) -> RunSettings | None:
    """A length_gen run of the chosen configurations (None when no task has one): the preset's
    bins and budgets, each task's chosen model and learning rate."""
    preset = PRESETS[config["preset"]]
    chosen = {
        task: Configuration.from_dict(entry["selected"])
        for task, entry in selection["tasks"].items()
        if entry["status"] == SELECTED
    }
    if not chosen:
        return None
    tasks = tuple(task for task in config["tasks"] if task in chosen)
    return RunSettings(
        preset=preset.name,
        tasks=tasks,
        seeds=tuple(config["verdict_seeds"]),
        threshold=DEFAULT_THRESHOLD,
        model=preset.model.replace(pe=config["pe"]),
        train={
            task: preset.train_for(task, learning_rate=chosen[task].learning_rate, **train_changes(config))
            for task in tasks
        },
        task_overrides={task: preset.overrides_for(task) for task in tasks},
        model_overrides={
            task: dict(
                n_layers=chosen[task].n_layers, n_heads=chosen[task].n_heads, d_model=chosen[task].d_model, d_ff=0
            )
            for task in tasks
        },
    )


@dataclass(frozen=True)
class SweepInvocation:
    """One invocation: the sweep's settings (config.json, validated by sweep_config) and how it runs."""

    config: dict
    engine: EngineSettings
    select_only: bool
    show_progress: bool


def invocation(args: argparse.Namespace) -> SweepInvocation:
    return SweepInvocation(sweep_config(args), engine_settings(args), args.select_only, not args.no_progress)


def default_folder(settings: SweepInvocation) -> Path:
    return Path("runs") / "sweep" / f"{settings.config['pe']}-{settings.config['preset']}"


def run(settings: SweepInvocation, run_dir: Path) -> None:
    """Train the sweep's jobs, select a configuration per task, then train the chosen ones' verdict seeds."""
    config = settings.config
    jobs = sweep_jobs(config, run_dir)
    check_jobs(jobs, run_dir)
    open_run_folder(run_dir, config, may_change=("verdict_seeds",))  # more verdict seeds reuse the sweep
    run_jobs_on(settings.engine, jobs, show_progress=settings.show_progress)
    verdict = verdict_settings(config, write_selection(run_dir, config, jobs))
    if verdict is None or settings.select_only:
        return
    verdict_dir = run_dir / VERDICT_FOLDER
    verdict_jobs = make_jobs(verdict, verdict_dir)
    check_jobs(verdict_jobs, verdict_dir)
    predictions = settings_predictions(verdict, with_discrimination=False)
    open_run_folder(verdict_dir, verdict.to_dict(), may_change=("threshold",))
    write_predictions(verdict_dir, predictions)
    run_jobs_on(settings.engine, verdict_jobs, show_progress=settings.show_progress)


def write_sweep_report(run_dir: Path) -> dict:
    """The selection, recomputed from the job folders, and the verdict run's report if it ran."""
    config = read_run_config(run_dir, SWEEP_SETTINGS, "experiments/sweep.py")
    selection = write_selection(run_dir, config, sweep_jobs(config, run_dir))
    verdict_dir = run_dir / VERDICT_FOLDER
    verdict = write_report(verdict_dir) if (verdict_dir / "config.json").exists() else None
    return dict(selection=selection, verdict=verdict)


def sweep_markdown(summary: dict) -> str:
    text = selection_markdown(summary["selection"])
    return text if summary["verdict"] is None else f"{text}\n{markdown_table(summary['verdict'])}"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(args, invocation, default_folder, run, Report(write_sweep_report, sweep_markdown, "selection.md"))


if __name__ == "__main__":
    main()
