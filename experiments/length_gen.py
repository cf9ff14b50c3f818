"""Length generalization from scratch: train one model per (task, seed), test on longer inputs,
and compare with the C-RASP prediction (APE -> C-RASP[pos], NoPE -> C-RASP[], RoPE -> the APE
prediction, no theorem).

    python experiments/length_gen.py --pe ape                       # quick preset on a CPU
    python experiments/length_gen.py --pe rope --preset paper --tasks UF NF
    python experiments/length_gen.py --report-only runs/length_gen/ape-quick

The run folder (default runs/length_gen/<pe>-<preset>/) holds config.json, metrics.jsonl,
summary.json, report.md, accuracy_by_length.png, and one sub-folder per task and seed with its
checkpoint. Running the same command again resumes unfinished jobs from their checkpoints and
skips finished ones; the report is rebuilt from the files.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import jax

from crasplab.cli.arguments import DistinctValues, add_length_flags, add_setting_flags, at_least, fraction
from crasp.search.results import SearchResultsError
from crasp.discrimination import SAMPLERS
from crasp.tasks import TASK_CODES, TASKS, parameters_of
from crasplab.models.config import DTYPES
from crasplab.models.positions import POSITIONS
from crasplab.incontext.memory import FLOAT_BYTES, check_batch_memory, decoding_bytes, training_bytes
from crasplab.results.files import ResultFileError, append_jsonl, read_jsonl
from crasplab.results.job_folder import RUN_SETTINGS_KEYS, job_folder
from crasplab.results.length_gen import (
    DEFAULT_THRESHOLD,
    INVOCATIONS_FILE,
    check_task_names,
    collect_metrics,
    final_evaluations,
    markdown_table,
    run_jobs,
    write_report,
)
from crasplab.results.run_folder import RunFolderError, check_output_folder, open_run_folder, read_run_config
from crasplab.results.protocol import (
    last_bin_agreement,
    next_seeds,
    predictions_for,
    protocol_for,
    write_predictions,
    write_protocol,
)
from crasplab.train.config import (
    PRESETS,
    ConfigError,
    ModelSettings,
    RunSettings,
    TrainConfig,
    bins_for_train_lengths,
    command_line_settings,
)
from crasplab.train.compile_cache import compile_cache_folder
from crasplab.train.data import sequence_length
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.engines import EngineError, add_engine_flags, engine_settings, run_jobs_on

MODEL_FLAGS = command_line_settings(ModelSettings)
TRAIN_FLAGS = command_line_settings(TrainConfig)
# Flags whose accepted values are a fixed vocabulary.
CHOICES = {"pe": POSITIONS, "dtype": tuple(DTYPES)}
# The tasks whose sampler --sampler chooses (the non-unique retrieval tasks).
WITH_OCCURRENCES = tuple(code for code, cls in TASKS.items() if "occurrences" in parameters_of(cls))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pe_type, pe_help = MODEL_FLAGS["pe"]
    parser.add_argument("--pe", type=pe_type, choices=POSITIONS, default="ape", help=pe_help)
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="experiment scale; default: paper on an accelerator, quick on a CPU. "
        + " ".join(f"{p.name}: {p.description}" for p in PRESETS.values()),
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        metavar="CODE",
        choices=TASK_CODES,
        action=DistinctValues,
        help="task codes (default: the preset's ten retrieval and copying tasks); accepted: " + ", ".join(TASK_CODES),
    )
    parser.add_argument(
        "--sampler",
        choices=tuple(SAMPLERS),
        default=None,
        help=f"how {' '.join(WITH_OCCURRENCES)} place the query: paper (the default) draws the context i.i.d.; "
        "official as the official code does (it also rejects NLLast strings whose last occurrence is the final "
        "slot); spread spreads the number of occurrences and the distance of the retrieved one, so that a bin at "
        "3x-4x the training length holds strings no bounded program exact on the training lengths gets right. "
        "Without --tasks it runs those four tasks; the run folder's default name ends in -<sampler>",
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
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/length_gen/<pe>-<preset>)")
    parser.add_argument(
        "--workers",
        type=at_least(1),
        default=None,
        help="CPU only: jobs run at once, each in a single-threaded process pinned to one core "
        "(default: one per available core)",
    )
    parser.add_argument(
        "--threshold",
        type=fraction,
        default=None,
        help="a task generalizes when the mean accuracy of the last bin is at least this "
        f"(default: {DEFAULT_THRESHOLD} for a new run; with --report-only, the run's own)",
    )
    parser.add_argument(
        "--report-only",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="rebuild summary.json, report.md and the figure of an existing run folder; train nothing",
    )
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="the verdict protocol (preset 'protocol'): its fixed recipe, fresh seeds from 2000 until "
        "5 seeds per task fit (APE; 3 for other encodings), per-seed verdicts with intervals and "
        "the discrimination check of each test bin, all in the report",
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
    on_accelerator = jax.default_backend() != "cpu"
    if args.protocol and args.preset not in (None, "protocol"):
        raise ConfigError(f"--protocol runs the preset 'protocol'; --preset {args.preset} asks for another")
    if args.protocol and args.seeds:
        raise ConfigError("--protocol chooses its own seeds (fresh ones, until enough fit); leave out --seeds")
    preset = PRESETS["protocol" if args.protocol else args.preset or ("paper" if on_accelerator else "quick")]
    changes = {name: getattr(args, name) for name in TRAIN_FLAGS if getattr(args, name) is not None}
    changes["test_bins"] = args.test_bins or preset.train.test_bins
    if args.train_lengths is not None:
        changes["train_lengths"] = tuple(args.train_lengths)
        changes["test_bins"] = args.test_bins or bins_for_train_lengths(args.train_lengths, preset.train.test_bins)
    model_changes = {name: getattr(args, name) for name in MODEL_FLAGS if getattr(args, name) is not None}
    tasks = tuple(args.tasks or (WITH_OCCURRENCES if args.sampler else preset.tasks))
    if args.sampler and (others := [task for task in tasks if task not in WITH_OCCURRENCES]):
        raise ConfigError(
            f"--sampler {args.sampler} chooses the sampler of {', '.join(WITH_OCCURRENCES)}; "
            f"it does not apply to {', '.join(others)}: leave them out of --tasks"
        )
    sampler = SAMPLERS[args.sampler] if args.sampler else {}
    return RunSettings(
        preset=preset.name,
        tasks=tasks,
        seeds=tuple(args.seeds or preset.seeds),
        threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold,
        model=preset.model.replace(**model_changes),
        train={task: preset.train_for(task, **changes) for task in tasks},
        task_overrides={task: {**preset.overrides_for(task), **sampler} for task in tasks},
        model_overrides={
            task: changed for task in tasks if (changed := preset.model_changes_for(task, **model_changes))
        },
    )


def default_run_folder(settings: RunSettings, sampler: str | None) -> Path:
    name = f"{settings.model.pe}-{settings.preset}" + (f"-{sampler}" if sampler else "")
    return Path("runs") / "length_gen" / name


def make_jobs(settings: RunSettings, run_dir: Path, seeds_by_task: dict[str, list[int]] | None = None) -> list[Job]:
    """The run's jobs: every task with every seed, or the seeds `seeds_by_task` names."""
    pairs = (
        run_jobs(settings.tasks, settings.seeds)
        if seeds_by_task is None
        else [(task, seed) for task, seeds in seeds_by_task.items() for seed in seeds]
    )
    return [
        Job(
            task_code=task,
            seed=seed,
            model=settings.model_for(task),
            train=settings.train[task],
            task_overrides=settings.task_overrides[task],
            out_dir=str(job_folder(run_dir, task, seed)),
        )
        for task, seed in pairs
    ]


def check_jobs(jobs: list[Job], run_dir: Path, protocol=None) -> None:
    """Everything that could fail once training has started, checked before a file is written."""
    check_output_folder(run_dir)
    compile_cache_folder()  # a cache path that names a file fails here, not in every worker
    for job in jobs:
        setup = TaskSetup.for_job(job)  # task parameters, lengths the sampler can produce, the position table
        check_job_memory(job, setup)
        if protocol is not None:
            per_length = job.train.eval_examples_per_length
            sizes = [per_length * (hi - lo + 1) for lo, hi in setup.bins]
            if (
                sizes[0] < protocol.min_train_strings
                or min(sizes[1:], default=protocol.min_bin_strings) < protocol.min_bin_strings
            ):
                raise ConfigError(
                    f"{job.task_code}: the protocol needs {protocol.min_train_strings} training-length "
                    f"strings and {protocol.min_bin_strings} per test bin; --eval-examples-per-length "
                    f"{per_length} gives {sizes}"
                )


def check_job_memory(job: Job, setup: TaskSetup) -> None:
    """Refuse sizes whose smallest footprint exceeds this machine's memory, before config.json is
    written (a batch of 10^9 sequences used to grow to 4 GB in the worker first)."""
    config = job.model.model_config(len(setup.task.vocab), setup.max_positions)
    # Parameters, gradients and AdamW's two moments of the position table.
    check_batch_memory(
        4 * FLOAT_BYTES * setup.max_positions * config.d_model,
        f"{job.task_code}: a position table of {setup.max_positions} rows",
        "--max-positions",
    )
    train_tokens = sequence_length(setup.task, setup.train_range[1])
    attention = FLOAT_BYTES * job.train.batch_size * config.n_heads * train_tokens**2 * config.n_layers
    check_batch_memory(
        training_bytes(config, job.train.batch_size, train_tokens) + attention,
        f"{job.task_code}: a training batch of {job.train.batch_size} strings of {train_tokens} tokens",
        "--batch-size",
    )
    test_tokens = sequence_length(setup.task, max(hi for _, hi in setup.bins))
    strings = job.train.eval_examples_per_length * sum(hi - lo + 1 for lo, hi in setup.bins)
    check_batch_memory(
        3 * FLOAT_BYTES * strings * test_tokens,
        f"{job.task_code}: {strings} test strings of up to {test_tokens} tokens",
        "--eval-examples-per-length",
    )
    check_batch_memory(
        decoding_bytes(config, job.train.eval_batch_size, test_tokens),
        f"{job.task_code}: evaluating {job.train.eval_batch_size} strings at once",
        "the eval batch size",
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.report_only is not None:
            report_only(args.report_only, args.threshold)
        else:
            train_and_report(args)
    except (RunFolderError, ResultFileError, SearchResultsError) as error:  # a damaged or unwritable file
        raise SystemExit(f"error: {error}")


def report_only(run_dir: Path, threshold: float | None) -> None:
    config = read_run_config(run_dir, RUN_SETTINGS_KEYS, "experiments/length_gen.py")
    check_task_names(config, run_dir)  # before any task name is used as a folder name
    try:
        settings = RunSettings.from_dict(config)
    except (KeyError, TypeError, ValueError) as error:  # a hand-edited config.json
        raise RunFolderError(
            f"{run_dir}/config.json is not the settings of a length_gen run ({type(error).__name__}: "
            f"{error}); restore the file the run wrote"
        ) from None
    # The job folders are the primary record; refresh the run's metrics.jsonl from them if present.
    if any((run_dir / task).is_dir() for task in settings.tasks):
        collect_metrics(run_dir, run_jobs(settings.tasks, settings.seeds))
    print(markdown_table(write_report(run_dir, threshold)))


def train_and_report(args: argparse.Namespace) -> None:
    try:  # everything that could fail is checked before the first file is written
        settings = run_settings(args)
        run_dir = args.out or default_run_folder(settings, args.sampler)
        jobs = make_jobs(settings, run_dir)
        engine = engine_settings(args)
        protocol = protocol_for(settings.model.pe, settings.threshold) if args.protocol else None
        check_jobs(jobs, run_dir, protocol)
        # What the interpreter predicts now is what the report will show, whenever it is rebuilt.
        predictions = predictions_for(
            settings.model.pe,
            settings.tasks,
            {t: c.train_lengths for t, c in settings.train.items()},
            {t: c.test_bins for t, c in settings.train.items()},
            settings.task_overrides,
            settings.threshold,
            with_discrimination=protocol is not None,
        )
        open_run_folder(run_dir, settings.to_dict(), may_change=("threshold",))
        if protocol is not None:
            write_protocol(run_dir, protocol)
        write_predictions(run_dir, predictions)
    except ValueError as error:  # ConfigError, TaskError, RunFolderError, SearchResultsError: each says what to change
        raise SystemExit(f"error: {error}")
    start, started = time.monotonic(), datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    finished = False
    try:
        if protocol is None:
            run_jobs_on(engine, jobs, show_progress=not args.no_progress)
        else:
            jobs = run_protocol_rounds(settings, run_dir, protocol, engine, show_progress=not args.no_progress)
        finished = True
    except EngineError as error:
        raise SystemExit(f"error: {error}")
    finally:  # an interrupted invocation (Ctrl-C, a failed job) keeps its records and its time too
        collect_metrics(run_dir, run_jobs(settings.tasks, settings.seeds))
        wall_s = time.monotonic() - start
        append_jsonl(
            run_dir / INVOCATIONS_FILE,
            dict(
                started=started, wall_s=round(wall_s, 1), jobs=len(jobs), workers=engine.describe(), finished=finished
            ),
        )
    summary = write_report(run_dir, args.threshold)
    print(f"\n{run_dir}: {len(jobs)} jobs, wall time of this invocation {wall_s / 60:.1f} min\n", file=sys.stderr)
    print(markdown_table(summary))
    if protocol is None:
        print(
            f"agreement: {summary['agreements']} of {summary['judged']}, from {len(settings.seeds)} seed(s) per task. "
            "One seed is one draw of the training (and of this machine's arithmetic); --protocol gives per-seed "
            "verdicts over fresh seeds."
        )
    else:
        agreeing, counted, _ = last_bin_agreement(summary["protocol"]["rows"])
        print(
            f"protocol verdicts at the last bin: {agreeing} of {counted} counted agree "
            "(report.md has every seed's interval)"
        )


def run_protocol_rounds(settings: RunSettings, run_dir: Path, protocol, engine, show_progress: bool) -> list[Job]:
    """Seeds in rounds: the first ones for every task, then fresh ones only for tasks with fewer
    fitted seeds than the protocol needs (decided on the training bin alone), until each task has
    enough or its candidate seeds run out. Returns every job run."""
    done: list[Job] = []
    previous = None
    while True:
        collect_metrics(run_dir, run_jobs(settings.tasks, settings.seeds))
        finals = final_evaluations(read_jsonl(run_dir / "metrics.jsonl"))
        plan = next_seeds(protocol, settings.seeds, finals, settings.tasks)
        if not plan:
            return done
        if plan == previous:
            raise EngineError(f"jobs {plan} did not finish in the round that ran them; see their worker.log")
        previous = plan
        jobs = make_jobs(settings, run_dir, plan)
        print(f"protocol round: {', '.join(f'{task} seeds {seeds}' for task, seeds in plan.items())}", file=sys.stderr)
        run_jobs_on(engine, jobs, show_progress=show_progress)
        done += jobs


if __name__ == "__main__":
    main()
