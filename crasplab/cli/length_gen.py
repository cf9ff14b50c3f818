"""Length generalization from scratch as functions with typed arguments: the run's settings from
a preset and the changes asked for, the run (resumed where its folder has jobs), the verdict
protocol's rounds of fresh seeds, and the report. experiments/length_gen.py reads its flags into a
RunRequest and calls these; experiments/paper_grid.py and the benchmarks call them directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from crasp.discrimination import NON_UNIQUE_RETRIEVAL, SAMPLERS, sampler_parameters
from crasp.tasks import CONTROLS
from crasp.tasks.retrieval import official_lengths
from crasplab.cli.arguments import chosen_preset
from crasplab.cli.experiment import Experiment, Report, run_experiment
from crasplab.records.invocations import InvocationRecord, recorded_invocation
from crasplab.records.job_folder import run_jobs, run_records
from crasplab.reports.length_gen import markdown_table, write_report
from crasplab.reports.protocol import protocol_markdown
from crasplab.records.run_folder import open_run_folder
from crasplab.records.settings import SettingsError
from crasplab.train.config import (
    PRESETS,
    PROTOCOL_PRESETS,
    PROTOCOL_REHEARSAL,
    RunSettings,
    TrainConfig,
    bins_for_train_lengths,
    scaled_length,
)
from crasplab.train.engines import EngineError, EngineSettings, run_jobs_on
from crasplab.train.loop import Job
from crasplab.train.provenance import require_committed_lab, training_at
from crasplab.train.runs import check_jobs, make_jobs
from crasplab.verdicts.counting import final_evaluations, next_seeds
from crasplab.verdicts.predictions import (
    PREDICTIONS_FILE,
    settings_predictions,
    settings_predictions_alongside,
    write_predictions,
)
from crasplab.verdicts.rules import VerdictRules, rules_for, write_protocol


@dataclass(frozen=True)
class RunRequest:
    """What a run is asked for. Empty or None fields take the preset's value (the preset: --preset's
    name, or 'protocol' for a protocol run, or this machine's scale); `model_changes` and
    `train_changes` are ModelSettings and TrainConfig fields, applied to every task over the
    preset's per-task changes."""

    pe: str = "ape"
    preset: str | None = None
    tasks: tuple[str, ...] = ()
    sampler: str | None = None  # the retrieval tasks' sampler (crasp.discrimination.SAMPLERS)
    seeds: tuple[int, ...] = ()
    threshold: float | None = None
    protocol: bool = False
    seed_block: int = 0  # a protocol run's candidate seeds: the preset's, shifted by this many blocks of them
    train_lengths: tuple[int, int] | None = None
    test_bins: tuple[tuple[int, int], ...] | None = None
    model_changes: dict = field(default_factory=dict)
    train_changes: dict = field(default_factory=dict)


def run_settings(request: RunRequest) -> RunSettings:
    """config.json of the run: the preset with the request's changes applied (training settings
    per task: the preset's per-task changes first, the request's over them)."""
    if request.protocol and request.preset not in (None, *PROTOCOL_PRESETS):
        raise SettingsError(
            f"--protocol runs one of the presets {', '.join(PROTOCOL_PRESETS)}; --preset {request.preset} is another"
        )
    if request.protocol and request.seeds:
        raise SettingsError(
            "--protocol chooses its own seeds (fresh ones, until enough fit; --seed-block K for another block of "
            "them); leave out --seeds"
        )
    if request.seed_block and not request.protocol:
        raise SettingsError("--seed-block chooses a protocol run's candidate seeds; without --protocol give --seeds")
    default_preset = PRESETS[request.preset or PROTOCOL_PRESETS[0]] if request.protocol else None
    preset = default_preset or chosen_preset(request.preset, PRESETS)
    changes = dict(request.train_changes)
    if request.test_bins:
        changes["test_bins"] = request.test_bins
    if request.train_lengths is not None:
        changes["train_lengths"] = tuple(request.train_lengths)
        changes["test_bins"] = request.test_bins or bins_for_train_lengths(
            request.train_lengths, preset.train.test_bins
        )
        if preset.train.position_reach and "position_reach" not in changes:
            changes["position_reach"] = scaled_length(
                preset.train.position_reach, request.train_lengths, preset.train.test_bins
            )
    model_changes = dict(request.model_changes, pe=request.pe)
    sampler = request.sampler
    drawn = (tuple(SAMPLERS[sampler]) or NON_UNIQUE_RETRIEVAL) if sampler else ()
    tasks = tuple(request.tasks or drawn or preset.tasks)
    # A control trains beside its task on its own sampler: the protocol counts a task's verdict
    # only where its control generalizes (unique copying for copying with repeats).
    controls = {CONTROLS[task] for task in drawn if task in CONTROLS} - set(drawn)
    if sampler and (others := [task for task in tasks if task not in drawn and task not in controls]):
        raise SettingsError(
            f"--sampler {sampler} chooses the sampler of {', '.join(drawn)}"
            + (f" (their controls {', '.join(sorted(controls))} keep their own)" if controls else "")
            + f"; it does not apply to {', '.join(others)}: leave them out of --tasks"
        )

    def sampler_of(task: str) -> dict:
        if task not in drawn:
            return {}
        return sampler_parameters(task, sampler, preset.train_for(task, **changes).train_lengths[1])

    def train_of(task: str) -> TrainConfig:
        train = preset.train_for(task, **changes)
        return as_the_official_code_trains(train) if sampler == "official" and task in drawn else train

    return RunSettings(
        preset=preset.name,
        tasks=tasks,
        seeds=tuple(request.seeds or protocol_seeds(preset.seeds, request.seed_block)),
        model=preset.model.replace(**model_changes),
        train={task: train_of(task) for task in tasks},
        task_overrides={task: {**preset.overrides_for(task), **sampler_of(task)} for task in tasks},
        model_overrides={
            task: changed for task in tasks if (changed := preset.model_changes_for(task, **model_changes))
        },
    )


def as_the_official_code_trains(train: TrainConfig) -> TrainConfig:
    """The official retrieval code's lengths and supervision: each length range lo-hi holds the
    lengths it draws, max(4, lo) to hi - 1 (crasp.tasks.retrieval.official_lengths), and the loss
    and exact match cover the answer token, not the EOS after it (TrainConfig.retrieval_eos)."""
    bins = tuple(official_lengths(lo, hi) for lo, hi in train.test_bins)
    empty = [f"{lo}-{hi}" for (lo, hi), (a, b) in zip(train.test_bins, bins) if a > b]
    if empty:
        raise SettingsError(
            f"--sampler official draws the lengths max(4, lo) to hi - 1 of a range lo-hi, so the range "
            f"{', '.join(empty)} holds none; give ranges with hi > max(4, lo)"
        )
    return train.replace(train_lengths=bins[0], test_bins=bins, retrieval_eos=False)


def protocol_seeds(seeds: tuple[int, ...], block: int) -> tuple[int, ...]:
    """A preset's seeds shifted by `block` blocks of as many: block 1 of 5000-5009 is 5010-5019."""
    return tuple(seed + block * len(seeds) for seed in seeds)


def default_run_folder(settings: RunSettings, sampler: str | None) -> Path:
    name = f"{settings.model.pe}-{settings.preset}" + (f"-{sampler}" if sampler else "")
    return Path("runs") / "length_gen" / name


@dataclass(frozen=True)
class Invocation:
    """One invocation's settings: what the run trains (config.json) and how this invocation runs it."""

    run: RunSettings
    sampler: str | None  # only names the default run folder: run.task_overrides hold the sampler
    protocol: VerdictRules | None  # the verdict protocol's rules, for a protocol run
    engine: EngineSettings
    show_progress: bool

    @classmethod
    def of(cls, request: RunRequest, engine: EngineSettings, show_progress: bool = True) -> Invocation:
        """The request's settings, validated (SettingsError, TaskError otherwise)."""
        settings = run_settings(request)
        protocol = rules_for(settings.model.pe, request.threshold) if request.protocol else None
        return cls(settings, request.sampler, protocol, engine, show_progress)


def check_protocol_sizes(jobs: list[Job], setups: dict, protocol: VerdictRules) -> None:
    """The protocol's evaluation sizes: enough training-length strings to call a seed fitted, and
    enough strings per test bin for a narrow interval."""
    for job in jobs:
        per_length = job.train.eval_examples_per_length
        sizes = [per_length * (hi - lo + 1) for lo, hi in setups[job.task_code].bins]
        if sizes[0] < protocol.min_train_strings or min(sizes[1:], default=protocol.min_bin_strings) < (
            protocol.min_bin_strings
        ):
            raise SettingsError(
                f"{job.task_code}: the protocol needs {protocol.min_train_strings} training-length "
                f"strings and {protocol.min_bin_strings} per test bin; --eval-examples-per-length "
                f"{per_length} gives {sizes}"
            )


def run(settings: Invocation, run_dir: Path) -> None:
    """Train what the run folder lacks (resuming unfinished jobs), after checking everything that
    could fail before the first file is written; each invocation's wall time goes to invocations.jsonl.
    A protocol run's discrimination checks are made in helper processes while it trains."""
    counted = settings.protocol is not None and settings.run.preset != PROTOCOL_REHEARSAL.name
    # A counted run's jobs must each name the commit that trained them: it starts only from
    # committed code, and each of its stacks only on that commit.
    commit = require_committed_lab(run_dir) if counted else None
    jobs = make_jobs(settings.run, run_dir)
    setups = check_jobs(jobs, run_dir)
    if settings.protocol is not None:
        check_protocol_sizes(jobs, setups, settings.protocol)
    open_run_folder(run_dir, settings.run.to_dict(), may_change=RunSettings.RETIRED)
    if settings.protocol is not None:
        write_protocol(run_dir, settings.protocol)
    # What the interpreter predicts at the run's start is what the report will show, whenever it is
    # rebuilt: a resumed run keeps the predictions.json it has.
    checking = settings.protocol is not None and not (run_dir / PREDICTIONS_FILE).exists()
    with recorded_invocation(run_dir, settings.engine.describe()) as invocation:
        with (
            training_at(commit) if commit else contextlib.nullcontext(),
            settings_predictions_alongside(settings.run, settings.protocol if checking else None) as predictions,
        ):
            if not checking:
                write_predictions(run_dir, predictions())  # written once: a no-op for a resumed run
            if settings.protocol is None:
                invocation.jobs = len(jobs)
                invocation.finished = run_jobs_on(settings.engine, jobs, show_progress=settings.show_progress)
            else:
                invocation.finished = run_protocol_rounds(settings, run_dir, invocation)
            if checking:
                write_predictions(run_dir, predictions())
    minutes = invocation.wall_s / 60
    print(f"\n{run_dir}: {invocation.jobs} jobs, wall time of this invocation {minutes:.1f} min\n", file=sys.stderr)
    if not invocation.finished:
        print(
            f"{run_dir}: the time limit stopped unfinished jobs; run the same command again to resume them",
            file=sys.stderr,
        )


def run_protocol_rounds(settings: Invocation, run_dir: Path, invocation: InvocationRecord) -> bool:
    """Seeds in rounds: the first ones for every task, then fresh ones only for tasks with fewer
    fitted seeds than the protocol needs (decided on the training bin alone), until each task has
    enough or its candidate seeds run out. Each round's jobs are counted in `invocation` as it
    starts; False when the engine's time limit (one budget for all rounds) stopped the rounds with
    jobs unfinished."""
    tasks, candidates = settings.run.tasks, settings.run.seeds
    limit_s, start = settings.engine.time_limit_s, time.monotonic()
    previous = None
    while True:
        finals = final_evaluations(run_records(run_dir, run_jobs(tasks, candidates)))
        plan = next_seeds(settings.protocol, candidates, finals, tasks)
        if not plan:
            return True
        if plan == previous:
            raise EngineError(f"jobs {plan} did not finish in the round that ran them; see their worker.log")
        previous = plan
        jobs = make_jobs(settings.run, run_dir, plan)
        print(f"protocol round: {', '.join(f'{task} seeds {seeds}' for task, seeds in plan.items())}", file=sys.stderr)
        engine = settings.engine
        if limit_s is not None:
            engine = dataclasses.replace(engine, time_limit_s=max(limit_s - (time.monotonic() - start), 1e-3))
        invocation.jobs += len(jobs)
        if not run_jobs_on(engine, jobs, show_progress=settings.show_progress):
            return False


def first_round_jobs(settings: Invocation, run_dir: Path) -> list[Job]:
    """The jobs a protocol run trains first: the first seeds of every task (later rounds add seeds
    only for tasks with too few fitted seeds)."""
    plan = next_seeds(settings.protocol, settings.run.seeds, {}, settings.run.tasks)
    return make_jobs(settings.run, run_dir, plan)


def rebuild_report(run_dir: Path, threshold: float | None) -> dict:
    """The report from the folder's files; a run made before predictions.json existed first gets
    one, computed now and marked so (the report says when its predictions were made)."""
    settings = RunSettings.of_run(run_dir)  # a hand-edited config.json is refused before anything is written
    if not (run_dir / PREDICTIONS_FILE).exists():
        predictions = settings_predictions(settings, None)
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        predictions["note"] = f"the run predates predictions.json: these are the interpreter's of {today}"
        write_predictions(run_dir, predictions)
        print(f"{run_dir}: no predictions.json (an older run); wrote today's predictions, marked so", file=sys.stderr)
    return write_report(run_dir, threshold)


def summary_markdown(summary: dict) -> str:
    """What the script prints: a protocol run's per-seed verdicts, or the table of means and the
    agreement in one line."""
    if summary["protocol"] is not None:
        protocol = summary["protocol"]
        return protocol_markdown(VerdictRules.from_dict(protocol["rules"]), protocol["rows"])
    seeds = len({seed for row in summary["rows"] for seed in row["seeds"]})
    return (
        f"{markdown_table(summary)}\nagreement: {summary['agreements']} of {summary['judged']}, from {seeds} "
        "seed(s) per task. One seed is one draw of the training (and of this machine's arithmetic); --protocol "
        "gives per-seed verdicts over fresh seeds."
    )


def report(threshold: float | None = None) -> Report:
    """The experiment's report: rebuilt from a run folder's files (`threshold`: the run's own if None)."""
    return Report(lambda run_dir: rebuild_report(Path(run_dir), threshold), summary_markdown)


def length_gen_experiment(settings: Callable[[], Invocation], threshold: float | None = None) -> Experiment:
    """The experiment whose settings `settings()` gives (called once, inside the command's error boundary)."""
    return Experiment(
        settings=settings,
        default_out=lambda invocation: default_run_folder(invocation.run, invocation.sampler),
        run=run,
        report=report(threshold),
    )


def run_length_gen(
    request: RunRequest, engine: EngineSettings, show_progress: bool = True, out: Path | None = None
) -> None:
    """Run the request into `out` (default: runs/length_gen/<pe>-<preset>[-<sampler>]) and print its
    report; a request that cannot run ends the command with one `error:` line."""
    experiment = length_gen_experiment(lambda: Invocation.of(request, engine, show_progress), request.threshold)
    run_experiment(experiment, out, None)


def report_length_gen(run_dir: Path, threshold: float | None = None) -> None:
    """Rebuild a run folder's report from its files and print it."""
    run_experiment(length_gen_experiment(lambda: None, threshold), None, run_dir)
