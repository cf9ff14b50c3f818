"""Length generalization from scratch: train one model per (task, seed), test on longer inputs,
and compare with the C-RASP prediction (APE -> C-RASP[pos], NoPE -> C-RASP[], RoPE -> the APE
prediction, no theorem).

    python experiments/length_gen.py --pe ape                       # quick preset on a CPU
    python experiments/length_gen.py --pe rope --preset paper --tasks UF NF
    python experiments/length_gen.py --report-only runs/length_gen/ape-quick

The run folder (default runs/length_gen/<pe>-<preset>/) holds config.json, predictions.json
(what the interpreter predicted when the run started), invocations.jsonl (each invocation's wall
time), summary.json, report.md, accuracy_by_length.png, and one job folder per task and seed
(<task>/seed<k>/) with its records (metrics.jsonl, result.json) and checkpoint. The job folders
are the run's only record: running the same command again resumes unfinished jobs from their
checkpoints and skips finished ones; the report is rebuilt from the files.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from crasp.discrimination import NON_UNIQUE_RETRIEVAL, SAMPLERS, sampler_parameters
from crasp.tasks import TASK_CODES
from crasplab.cli.arguments import (
    DistinctValues,
    add_length_flags,
    add_preset_flag,
    add_run_folder_flags,
    add_setting_flags,
    add_tasks_flag,
    at_least,
    chosen_preset,
    fraction,
    run_from_flags,
)
from crasplab.cli.experiment import Report
from crasplab.models.config import DTYPES
from crasplab.models.positions import POSITIONS
from crasplab.results.files import append_jsonl
from crasplab.results.job_folder import run_jobs, run_records
from crasplab.results.length_gen import (
    DEFAULT_THRESHOLD,
    INVOCATIONS_FILE,
    final_evaluations,
    markdown_table,
    write_report,
)
from crasplab.results.protocol import (
    PREDICTIONS_FILE,
    next_seeds,
    protocol_markdown,
    protocol_for,
    settings_predictions,
    settings_predictions_alongside,
    write_predictions,
    write_protocol,
)
from crasplab.results.run_folder import open_run_folder
from crasplab.results.verdicts import Protocol
from crasplab.train.config import (
    PRESETS,
    PROTOCOL_PRESETS,
    PROTOCOL_REHEARSAL,
    ConfigError,
    ModelSettings,
    RunSettings,
    TrainConfig,
    bins_for_train_lengths,
    command_line_settings,
)
from crasplab.train.engines import EngineError, EngineSettings, add_engine_flags, engine_settings, run_jobs_on
from crasplab.train.loop import Job
from crasplab.train.provenance import require_committed_lab
from crasplab.train.runs import check_jobs, make_jobs

MODEL_FLAGS = command_line_settings(ModelSettings)
TRAIN_FLAGS = command_line_settings(TrainConfig)
# Flags whose accepted values are a fixed vocabulary.
CHOICES = {"pe": POSITIONS, "dtype": tuple(DTYPES)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pe_type, pe_help = MODEL_FLAGS["pe"]
    parser.add_argument("--pe", type=pe_type, choices=POSITIONS, default="ape", help=pe_help)
    add_preset_flag(parser, PRESETS)
    add_tasks_flag(
        parser,
        None,
        "task codes (default: the preset's ten retrieval and copying tasks); accepted: " + ", ".join(TASK_CODES),
        choices=TASK_CODES,
    )
    parser.add_argument(
        "--sampler",
        choices=tuple(SAMPLERS),
        default=None,
        help="how the retrieval tasks draw their strings: paper (the default) draws "
        f"{', '.join(NON_UNIQUE_RETRIEVAL)}'s context i.i.d.; official as the official code does "
        "(UL and UR over 5 symbols; the four i.i.d., with NLLast strings whose last occurrence is "
        "the final slot rejected); spread spreads the number of occurrences and the distance of "
        "the retrieved one, so that a bin at 3x-4x the training length holds strings no bounded "
        "program exact on the training lengths gets right. Without --tasks it runs the tasks the "
        "sampler draws (paper: the four); the run folder's default name ends in -<sampler>",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=at_least(0),
        default=None,
        metavar="SEED",
        action=DistinctValues,
        help="training seeds (default: the preset's)",
    )
    add_run_folder_flags(parser, "runs/length_gen/<pe>-<preset>[-<sampler>]")
    parser.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="a task generalizes when the mean accuracy of the last bin is at least this "
        f"(default: {DEFAULT_THRESHOLD} for a new run; with --report-only, the run's own)",
    )
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="the verdict protocol: a fixed recipe (preset 'protocol' by default, the quick scale; "
        "'protocol-paper', the paper's scale, on an accelerator), fresh seeds until 5 seeds per task fit (APE; 3 "
        "for other encodings), per-seed verdicts with intervals and the discrimination check of each test bin, "
        "all in the report",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_engine_flags(parser)
    model = parser.add_argument_group(
        "model overrides (default: the preset's; a flag given here applies to every "
        "task, also to one whose model the preset changes)"
    )
    add_setting_flags(model, {name: flag for name, flag in MODEL_FLAGS.items() if name != "pe"}, CHOICES)
    train = parser.add_argument_group("training overrides (default: the preset's)")
    add_length_flags(train, "1-10,11-20,21-30")
    add_setting_flags(train, TRAIN_FLAGS)
    return parser


def run_settings(args: argparse.Namespace) -> RunSettings:
    """config.json of the run: the preset with the command line's overrides applied (training
    settings per task: the preset's per-task changes first, the command line's over them)."""
    if args.protocol and args.preset not in (None, *PROTOCOL_PRESETS):
        raise ConfigError(
            f"--protocol runs one of the presets {', '.join(PROTOCOL_PRESETS)}; --preset {args.preset} is another"
        )
    if args.protocol and args.seeds:
        raise ConfigError("--protocol chooses its own seeds (fresh ones, until enough fit); leave out --seeds")
    preset = PRESETS[args.preset or PROTOCOL_PRESETS[0]] if args.protocol else chosen_preset(args.preset, PRESETS)
    changes = {name: getattr(args, name) for name in TRAIN_FLAGS if getattr(args, name) is not None}
    if args.test_bins:
        changes["test_bins"] = args.test_bins
    if args.train_lengths is not None:
        changes["train_lengths"] = tuple(args.train_lengths)
        changes["test_bins"] = args.test_bins or bins_for_train_lengths(args.train_lengths, preset.train.test_bins)
    model_changes = {name: getattr(args, name) for name in MODEL_FLAGS if getattr(args, name) is not None}
    drawn = (tuple(SAMPLERS[args.sampler]) or NON_UNIQUE_RETRIEVAL) if args.sampler else ()
    tasks = tuple(args.tasks or drawn or preset.tasks)
    if args.sampler and (others := [task for task in tasks if task not in drawn]):
        raise ConfigError(
            f"--sampler {args.sampler} chooses the sampler of {', '.join(drawn)}; "
            f"it does not apply to {', '.join(others)}: leave them out of --tasks"
        )
    return RunSettings(
        preset=preset.name,
        tasks=tasks,
        seeds=tuple(args.seeds or preset.seeds),
        threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold,
        model=preset.model.replace(**model_changes),
        train={task: preset.train_for(task, **changes) for task in tasks},
        task_overrides={
            task: {**preset.overrides_for(task), **(sampler_parameters(task, args.sampler) if args.sampler else {})}
            for task in tasks
        },
        model_overrides={
            task: changed for task in tasks if (changed := preset.model_changes_for(task, **model_changes))
        },
    )


def default_run_folder(settings: RunSettings, sampler: str | None) -> Path:
    name = f"{settings.model.pe}-{settings.preset}" + (f"-{sampler}" if sampler else "")
    return Path("runs") / "length_gen" / name


@dataclass(frozen=True)
class Invocation:
    """One invocation's settings: what the run trains (config.json) and how this invocation runs it."""

    run: RunSettings
    sampler: str | None  # only names the default run folder: run.task_overrides hold the sampler
    protocol: Protocol | None  # the verdict protocol's rules, for a --protocol run
    engine: EngineSettings
    show_progress: bool


def invocation(args: argparse.Namespace) -> Invocation:
    """The command line read once, validated (ConfigError, TaskError otherwise)."""
    settings = run_settings(args)
    return Invocation(
        run=settings,
        sampler=args.sampler,
        protocol=protocol_for(settings.model.pe, settings.threshold) if args.protocol else None,
        engine=engine_settings(args),
        show_progress=not args.no_progress,
    )


def check_protocol_sizes(jobs: list[Job], setups: dict, protocol: Protocol) -> None:
    """The protocol's evaluation sizes: enough training-length strings to call a seed fitted, and
    enough strings per test bin for a narrow interval."""
    for job in jobs:
        per_length = job.train.eval_examples_per_length
        sizes = [per_length * (hi - lo + 1) for lo, hi in setups[job.task_code].bins]
        if sizes[0] < protocol.min_train_strings or min(sizes[1:], default=protocol.min_bin_strings) < (
            protocol.min_bin_strings
        ):
            raise ConfigError(
                f"{job.task_code}: the protocol needs {protocol.min_train_strings} training-length "
                f"strings and {protocol.min_bin_strings} per test bin; --eval-examples-per-length "
                f"{per_length} gives {sizes}"
            )


def run(settings: Invocation, run_dir: Path) -> None:
    """Train what the run folder lacks (resuming unfinished jobs), after checking everything that
    could fail before the first file is written; each invocation's wall time goes to invocations.jsonl.
    A protocol run's discrimination checks are made in helper processes while it trains."""
    if settings.protocol is not None and settings.run.preset != PROTOCOL_REHEARSAL.name:
        require_committed_lab(run_dir)  # its jobs are counted: each must name the commit that trained it
    jobs = make_jobs(settings.run, run_dir)
    setups = check_jobs(jobs, run_dir)
    if settings.protocol is not None:
        check_protocol_sizes(jobs, setups, settings.protocol)
    open_run_folder(run_dir, settings.run.to_dict(), may_change=("threshold",))
    if settings.protocol is not None:
        write_protocol(run_dir, settings.protocol)
    # What the interpreter predicts at the run's start is what the report will show, whenever it is
    # rebuilt: a resumed run keeps the predictions.json it has.
    checking = settings.protocol is not None and not (run_dir / PREDICTIONS_FILE).exists()
    start, started = time.monotonic(), datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    finished = False
    try:
        with settings_predictions_alongside(settings.run, with_discrimination=checking) as predictions:
            if not checking:
                write_predictions(run_dir, predictions())  # written once: a no-op for a resumed run
            if settings.protocol is None:
                finished = run_jobs_on(settings.engine, jobs, show_progress=settings.show_progress)
            else:
                jobs, finished = run_protocol_rounds(settings, run_dir)
            if checking:
                write_predictions(run_dir, predictions())
    finally:  # an interrupted invocation (Ctrl-C, a failed job) keeps its time too
        wall_s = time.monotonic() - start
        append_jsonl(
            run_dir / INVOCATIONS_FILE,
            dict(
                started=started,
                wall_s=round(wall_s, 1),
                jobs=len(jobs),
                workers=settings.engine.describe(),
                finished=finished,
            ),
        )
    print(f"\n{run_dir}: {len(jobs)} jobs, wall time of this invocation {wall_s / 60:.1f} min\n", file=sys.stderr)
    if not finished:
        print(
            f"{run_dir}: the time limit stopped unfinished jobs; run the same command again to resume them",
            file=sys.stderr,
        )


def run_protocol_rounds(settings: Invocation, run_dir: Path) -> tuple[list[Job], bool]:
    """Seeds in rounds: the first ones for every task, then fresh ones only for tasks with fewer
    fitted seeds than the protocol needs (decided on the training bin alone), until each task has
    enough or its candidate seeds run out. Returns every job run, and False when the engine's time
    limit (one budget for all rounds) stopped the rounds with jobs unfinished."""
    tasks, candidates = settings.run.tasks, settings.run.seeds
    limit_s, start = settings.engine.time_limit_s, time.monotonic()
    done: list[Job] = []
    previous = None
    while True:
        finals = final_evaluations(run_records(run_dir, run_jobs(tasks, candidates)))
        plan = next_seeds(settings.protocol, candidates, finals, tasks)
        if not plan:
            return done, True
        if plan == previous:
            raise EngineError(f"jobs {plan} did not finish in the round that ran them; see their worker.log")
        previous = plan
        jobs = make_jobs(settings.run, run_dir, plan)
        print(f"protocol round: {', '.join(f'{task} seeds {seeds}' for task, seeds in plan.items())}", file=sys.stderr)
        engine = settings.engine
        if limit_s is not None:
            engine = dataclasses.replace(engine, time_limit_s=max(limit_s - (time.monotonic() - start), 1e-3))
        done += jobs
        if not run_jobs_on(engine, jobs, show_progress=settings.show_progress):
            return done, False


def rebuild_report(run_dir: Path, threshold: float | None) -> dict:
    """The report from the folder's files; a run made before predictions.json existed first gets
    one, computed now and marked so (the report says when its predictions were made)."""
    settings = RunSettings.of_run(run_dir)  # a hand-edited config.json is refused before anything is written
    if not (run_dir / PREDICTIONS_FILE).exists():
        predictions = settings_predictions(settings, with_discrimination=False)
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
        return protocol_markdown(Protocol(**protocol["rules"]), protocol["rows"])
    seeds = len({seed for row in summary["rows"] for seed in row["seeds"]})
    return (
        f"{markdown_table(summary)}\nagreement: {summary['agreements']} of {summary['judged']}, from {seeds} "
        "seed(s) per task. One seed is one draw of the training (and of this machine's arithmetic); --protocol "
        "gives per-seed verdicts over fresh seeds."
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args,
        invocation,
        default_out=lambda settings: default_run_folder(settings.run, settings.sampler),
        run=run,
        report=Report(lambda run_dir: rebuild_report(Path(run_dir), args.threshold), summary_markdown),
    )


if __name__ == "__main__":
    main()
