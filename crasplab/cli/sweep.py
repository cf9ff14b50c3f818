"""A sweep with selection, then the verdict, as functions with typed arguments: the sweep's
settings (SweepSettings, its config.json), its jobs, the selection written from their files
(crasplab.reports.selection), the verdict run of the chosen configurations, and the report.
experiments/sweep.py reads its flags into SweepSettings and calls these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crasp.tasks import TASK_CODES
from crasplab.models.positions import POSITIONS
from crasplab.records.files import write_json, write_text
from crasplab.records.run_folder import open_run_folder, read_run_settings
from crasplab.records.settings import Settings
from crasplab.reports.length_gen import markdown_table, write_report
from crasplab.verdicts.predictions import settings_predictions, write_predictions
from crasplab.reports.selection import SELECTED, Configuration, select_per_task, selection_markdown, sweep_folder
from crasplab.train.config import PRESETS, RunSettings
from crasplab.train.engines import EngineSettings, run_jobs_on
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.runs import check_jobs, make_jobs

VERDICT_FOLDER = "verdict"


@dataclass(frozen=True)
class SweepSettings(Settings):
    """What a sweep trains: its config.json. Every configuration of the grid on every task, with
    the preset's budgets (or `max_steps`), evaluated on the training bin and `validation_bin`; then
    `verdict_seeds` of each task's chosen configuration."""

    pe: str
    preset: str
    tasks: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    sweep_seeds: tuple[int, ...]
    validation_bin: tuple[int, int]
    max_steps: int | None
    verdict_seeds: tuple[int, ...]

    def check(self) -> None:
        self.require(self.pe in POSITIONS, "pe", f"one of {', '.join(POSITIONS)}")
        self.require(self.preset in PRESETS, "preset", f"one of {', '.join(sorted(PRESETS))}")
        self.require(
            bool(self.tasks) and set(self.tasks) <= set(TASK_CODES), "tasks", f"codes of {', '.join(TASK_CODES)}"
        )
        self.require(bool(self.configurations), "configurations", "at least one configuration")
        for name in ("sweep_seeds", "verdict_seeds"):
            self.require(all(seed >= 0 for seed in getattr(self, name)), name, "seeds of at least 0")
        lo, hi = self.validation_bin
        self.require(1 <= lo <= hi, "validation_bin", "LO-HI with 1 <= LO <= HI")
        self.require(self.max_steps is None or self.max_steps >= 1, "max_steps", "an integer of at least 1, or none")


def train_changes(config: SweepSettings) -> dict:
    return {} if config.max_steps is None else dict(max_steps=config.max_steps)


def sweep_jobs(config: SweepSettings, run_dir: Path) -> list[Job]:
    """One job per (task, configuration, seed), evaluated on the training bin and the validation bin."""
    preset = PRESETS[config.preset]
    jobs = []
    for task in config.tasks:
        for configuration in config.configurations:
            base = preset.train_for(task, **train_changes(config))
            train = base.replace(
                learning_rate=configuration.learning_rate,
                test_bins=(base.train_lengths, config.validation_bin),
            )
            model = preset.model.replace(
                pe=config.pe,
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
                for seed in config.sweep_seeds
            ]
    return jobs


def evaluated_bins(config: SweepSettings, jobs: list[Job]) -> dict[str, tuple]:
    """task -> (training bin, validation bin) as the runs record them (limited to the lengths the
    task's sampler produces)."""
    return {job.task_code: tuple(TaskSetup.for_job(job).bins) for job in jobs}


def write_selection(run_dir: Path, config: SweepSettings, jobs: list[Job]) -> dict:
    selection = select_per_task(
        run_dir, config.tasks, config.configurations, config.sweep_seeds, evaluated_bins(config, jobs)
    )
    write_json(run_dir / "selection.json", selection)
    write_text(run_dir / "selection.md", selection_markdown(selection))
    return selection


def verdict_settings(config: SweepSettings, selection: dict) -> RunSettings | None:
    """A length_gen run of the chosen configurations (None when no task has one): the preset's
    bins and budgets, each task's chosen model and learning rate."""
    preset = PRESETS[config.preset]
    chosen = {
        task: Configuration.from_dict(entry["selected"])
        for task, entry in selection["tasks"].items()
        if entry["status"] == SELECTED
    }
    if not chosen:
        return None
    tasks = tuple(task for task in config.tasks if task in chosen)
    return RunSettings(
        preset=preset.name,
        tasks=tasks,
        seeds=config.verdict_seeds,
        model=preset.model.replace(pe=config.pe),
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
    """One invocation: the sweep's settings (its config.json) and how it runs."""

    config: SweepSettings
    engine: EngineSettings
    select_only: bool
    show_progress: bool


def run(settings: SweepInvocation, run_dir: Path) -> None:
    """Train the sweep's jobs, select a configuration per task, then train the chosen ones' verdict seeds."""
    config = settings.config
    jobs = sweep_jobs(config, run_dir)
    check_jobs(jobs, run_dir)
    open_run_folder(run_dir, config.to_dict(), may_change=("verdict_seeds",))  # more verdict seeds reuse the sweep
    run_jobs_on(settings.engine, jobs, show_progress=settings.show_progress)
    verdict = verdict_settings(config, write_selection(run_dir, config, jobs))
    if verdict is None or settings.select_only:
        return
    verdict_dir = run_dir / VERDICT_FOLDER
    verdict_jobs = make_jobs(verdict, verdict_dir)
    check_jobs(verdict_jobs, verdict_dir)
    predictions = settings_predictions(verdict, None)
    open_run_folder(verdict_dir, verdict.to_dict(), may_change=RunSettings.RETIRED)
    write_predictions(verdict_dir, predictions)
    run_jobs_on(settings.engine, verdict_jobs, show_progress=settings.show_progress)


def write_sweep_report(run_dir: Path) -> dict:
    """The selection, recomputed from the job folders, and the verdict run's report if it ran."""
    config = sweep_settings_of(run_dir)
    selection = write_selection(run_dir, config, sweep_jobs(config, run_dir))
    verdict_dir = run_dir / VERDICT_FOLDER
    verdict = write_report(verdict_dir) if (verdict_dir / "config.json").exists() else None
    return dict(selection=selection, verdict=verdict)


def sweep_settings_of(run_dir: Path) -> SweepSettings:
    """The settings a sweep's run folder holds; a hand-edited config.json is refused here."""
    return read_run_settings(run_dir, SweepSettings, "experiments/sweep.py").settings


def sweep_markdown(summary: dict) -> str:
    text = selection_markdown(summary["selection"])
    return text if summary["verdict"] is None else f"{text}\n{markdown_table(summary['verdict'])}"
