"""The verdict protocol at the paper's scale in one command: APE, RoPE and NoPE, each on the
paper's sampler (the ten retrieval and copying tasks) and on the spread sampler (the four
non-unique retrieval tasks), each a length_gen.py --protocol run of the preset protocol-paper
(runs/paper/<pe>-<sampler>/), on whatever the engine has: locally one accelerator (the seeds of
a task as vmapped stacks, several stacks at once) or this machine's cores; on Ray every job a
task, on a GPU share every stack.

    python experiments/paper_grid.py --dry-run                          # jobs, placement, estimated time
    python experiments/paper_grid.py --dry-run --step-seconds h200      # estimated from the H200 measurement
    python experiments/paper_grid.py --pes ape --time-limit-minutes 5   # on a GPU; the same command resumes
    python benchmarks/paper_preset_dtypes.py --out runs/paper-dtypes    # float32 against bfloat16 first

--dry-run trains nothing: it lists the protocol's first round (the first 5 seeds of every task
for APE, 3 for RoPE and NoPE; later rounds add seeds only for tasks with too few fitted seeds),
measures one training step per distinct model, string length and stack size on this process's
device (crasplab.train.plan; --step-seconds gives a number instead, or 'h200' for the rate the
protocol trained at on an H200), places the units on the engine's slots longest first and prints the
placement and an upper bound on the wall time. Running the same command again resumes every
unfinished job.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from crasp.position_encodings import IN_THE_PAPERS
from crasplab.cli.arguments import above_zero, at_least
from crasplab.cli.length_gen import Invocation, RunRequest, first_round_jobs, run_length_gen
from crasplab.errors import command_boundary
from crasplab.models.config import TRAINING_DTYPES
from crasplab.train.config import PROTOCOL_PAPER, PROTOCOL_PRESETS
from crasplab.train.device import accelerator_path, path_name
from crasplab.cli.engine_flags import add_engine_flags, engine_settings
from crasplab.train.engines import EngineSettings, connect, import_ray
from crasplab.train.plan import (
    H200_PAPER_STEP_S,
    measure_step_seconds,
    measured_here,
    place,
    plan_text,
    unit_shape,
)
from crasplab.train.stacks import group_into_stacks
from crasplab.train.workers import available_cores

SAMPLERS = ("paper", "spread")


def step_seconds_flag(text: str) -> float | str:
    """--step-seconds: a number above 0, or 'h200'."""
    return text if text == "h200" else above_zero(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pes",
        nargs="+",
        choices=IN_THE_PAPERS,
        default=list(IN_THE_PAPERS),
        help="position encodings (those the papers train)",
    )
    parser.add_argument(
        "--samplers",
        nargs="+",
        choices=SAMPLERS,
        default=list(SAMPLERS),
        help="paper: the ten tasks on the paper's samplers; spread: the four non-unique retrieval tasks on the "
        "spread sampler, whose 151-200 bin no bounded program exact on lengths 1-50 passes",
    )
    parser.add_argument(
        "--preset",
        choices=PROTOCOL_PRESETS,
        default=PROTOCOL_PAPER.name,
        help="the protocol's preset (protocol-rehearsal: the rules on tiny settings, for rehearsing this command)",
    )
    parser.add_argument("--tasks", nargs="+", default=None, help="only these tasks (default: each sampler's)")
    parser.add_argument(
        "--dtype",
        choices=TRAINING_DTYPES,
        default=None,
        help="compute dtype (default: the preset's; decide with benchmarks/paper_preset_dtypes.py)",
    )
    parser.add_argument(
        "--steps-per-call",
        type=at_least(1),
        default=None,
        help="training steps per device call (default: the preset's, 1); it must divide the preset's log, "
        "evaluation and checkpoint counts and its step cap",
    )
    parser.add_argument("--out", type=Path, default=Path("runs") / "paper", help="one run folder per encoding in here")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the jobs, their placement and the estimated time; train nothing"
    )
    parser.add_argument(
        "--step-seconds",
        type=step_seconds_flag,
        default=None,
        metavar="SECONDS|h200",
        help="with --dry-run: seconds per training step of every unit instead of measuring, or 'h200': the paper "
        f"model's protocol training on an H200 ({H200_PAPER_STEP_S * 1000:.2f} ms per model-step, four stacks at "
        "once, evaluations included), times the stack's size",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_engine_flags(parser)
    return parser


def run_request(args: argparse.Namespace, pe: str, sampler: str) -> RunRequest:
    """The protocol run of one encoding on one sampler."""
    return RunRequest(
        pe=pe,
        preset=args.preset,
        protocol=True,
        tasks=tuple(args.tasks or ()),
        sampler=None if sampler == "paper" else sampler,
        model_changes=dict(dtype=args.dtype) if args.dtype else {},
        train_changes=dict(steps_per_call=args.steps_per_call) if args.steps_per_call else {},
    )


def run_folder(args: argparse.Namespace, pe: str, sampler: str) -> Path:
    return args.out / f"{pe}-{sampler}"


def first_round(args: argparse.Namespace, engine: EngineSettings) -> list:
    """Every job of the protocol's first round, for every encoding and sampler."""
    jobs = []
    for pe in args.pes:
        for sampler in args.samplers:
            settings = Invocation.of(run_request(args, pe, sampler), engine)
            jobs += first_round_jobs(settings, run_folder(args, pe, sampler))
    return jobs


def slots(settings: EngineSettings) -> tuple[int, str]:
    """(units at once, where) for the engine."""
    if settings.engine == "ray" and settings.ray_address is not None:
        connect(settings)
        resources = import_ray().cluster_resources()
        if settings.gpu_share:
            return int(resources.get("GPU", 0) / settings.gpu_share), f"Ray, {resources.get('GPU', 0):g} GPUs"
        return int(resources.get("CPU", 0)), f"Ray, {resources.get('CPU', 0):g} CPUs"
    if settings.engine == "local" and accelerator_path():
        return 1, f"{path_name()}: stacks side by side share it, counted one after another"
    count = settings.workers or len(available_cores())
    return count, f"{'a private Ray cluster on ' if settings.engine == 'ray' else ''}{count} cores of this machine"


def units(jobs: list, settings: EngineSettings) -> list[list]:
    """What the engine trains at once: stacks of seeds where seeds stack, else one job each."""
    stacking = settings.gpu_share > 0 if settings.engine == "ray" else accelerator_path()
    return group_into_stacks(jobs, settings.stack_size) if stacking else [[job] for job in jobs]


def dry_run(args: argparse.Namespace) -> None:
    engine = engine_settings(args)  # bad engine flags are refused before anything is measured
    count, where = slots(engine)
    if count < 1:
        raise SystemExit(f"error: the engine has no slot for a job ({where}); check --gpu-share and the cluster")
    planned = units(first_round(args, engine), engine)
    step_seconds = {}
    for unit in planned:
        if (shape := unit_shape(unit)) not in step_seconds:
            step_seconds[shape] = unit_step_seconds(args.step_seconds, unit)
    source = {None: measured_here(), "h200": "from the H200's protocol training rate, times each stack's size"}.get(
        args.step_seconds, "given by --step-seconds"
    )
    print(plan_text(place(planned, count, step_seconds), count, where, step_seconds, source))
    print("first round only: tasks with fewer fitted seeds than the protocol needs get more seeds in later rounds")


def unit_step_seconds(given: float | str | None, unit: list) -> float:
    if given is None:
        return measure_step_seconds(unit[0], len(unit))
    return H200_PAPER_STEP_S * len(unit) if given == "h200" else given


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dry_run:
        with command_boundary():
            dry_run(args)
        return
    with command_boundary():
        engine = engine_settings(args)
    start, budget_s = time.monotonic(), engine.time_limit_s
    for pe in args.pes:
        for sampler in args.samplers:
            if budget_s is not None:  # one budget for the whole grid
                left_s = budget_s - (time.monotonic() - start)
                if left_s <= 0:
                    print("the time limit is spent; the same command resumes the grid", file=sys.stderr)
                    return
                engine = dataclasses.replace(engine, time_limit_s=left_s)
            run_length_gen(run_request(args, pe, sampler), engine, not args.no_progress, run_folder(args, pe, sampler))


if __name__ == "__main__":
    main()
