"""The paper's grid in one command: APE, RoPE and NoPE, the paper preset's ten tasks and seeds,
each encoding a length_gen run (runs/paper/<pe>/), on whatever the engine has: locally one
accelerator (the seeds of a task as one vmapped stack) or this machine's cores; on Ray every
job a task, on a GPU share with --gpu-share.

    python experiments/paper_grid.py --dry-run                          # jobs, placement, estimated time
    python experiments/paper_grid.py --dry-run --engine ray --ray-address auto --gpu-share 0.25
    python experiments/paper_grid.py --engine ray --ray-address auto --gpu-share 0.25
    python benchmarks/paper_preset_dtypes.py --out runs/paper-dtypes    # first: float32 against bfloat16

--dry-run trains nothing: it measures one training step per distinct model and string length on
this process's device (crasplab.train.plan; --step-seconds skips that), places the jobs on the
engine's slots longest first and prints the placement and an upper bound on the wall time.
Running the same command again resumes every unfinished job.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `experiments` as a package, run as a script or imported

import jax  # noqa: E402

from crasplab.cli.arguments import at_least  # noqa: E402
from crasplab.train.engines import EngineSettings, add_engine_flags, connect, engine_settings, import_ray  # noqa: E402
from crasplab.train.plan import measure_step_seconds, measured_here, place, plan_text, step_shape  # noqa: E402
from crasplab.train.runs import make_jobs  # noqa: E402
from crasplab.train.workers import available_cores  # noqa: E402
from experiments import length_gen  # noqa: E402

ENCODINGS = ("ape", "rope", "nope")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pes", nargs="+", choices=ENCODINGS, default=list(ENCODINGS), help="position encodings")
    parser.add_argument("--seeds", nargs="+", type=at_least(0), default=None, help="seeds (default: the preset's)")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="compute dtype (default: the preset's; decide with benchmarks/paper_preset_dtypes.py)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs") / "paper", help="one run folder per encoding in here")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the jobs, their placement and the estimated time; train nothing"
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=None,
        help="with --dry-run: seconds per training step for every job, instead of measuring",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_engine_flags(parser)
    return parser


def length_gen_arguments(args: argparse.Namespace, pe: str) -> list[str]:
    arguments = [
        "--pe",
        pe,
        "--preset",
        "paper",
        "--out",
        str(args.out / pe),
        "--engine",
        args.engine,
        "--gpu-share",
        str(args.gpu_share),
    ]
    arguments += ["--seeds", *map(str, args.seeds)] if args.seeds else []
    arguments += ["--dtype", args.dtype] if args.dtype else []
    arguments += ["--ray-address", args.ray_address] if args.ray_address else []
    arguments += ["--workers", str(args.workers)] if args.workers else []
    arguments += ["--stack-size", str(args.stack_size)] if args.stack_size else []
    return arguments + (["--no-progress"] if args.no_progress else [])


def slots(settings: EngineSettings) -> tuple[int, str]:
    """(jobs at once, where) for the engine."""
    if settings.engine == "ray" and settings.ray_address is not None:
        connect(settings)
        resources = import_ray().cluster_resources()
        if settings.gpu_share:
            return int(resources.get("GPU", 0) / settings.gpu_share), f"Ray, {resources.get('GPU', 0):g} GPUs"
        return int(resources.get("CPU", 0)), f"Ray, {resources.get('CPU', 0):g} CPUs"
    if settings.engine == "local" and jax.default_backend() != "cpu":
        return 1, f"this process's {jax.default_backend()}, the seeds of a task counted one after another"
    count = settings.workers or len(available_cores())
    return count, f"{'a private Ray cluster on ' if settings.engine == 'ray' else ''}{count} cores of this machine"


def dry_run(args: argparse.Namespace) -> None:
    jobs = []
    for pe in args.pes:
        parsed = length_gen.build_parser().parse_args(length_gen_arguments(args, pe))
        jobs += make_jobs(length_gen.run_settings(parsed), args.out / pe)
    step_seconds = {}
    for job in jobs:
        if step_shape(job) not in step_seconds:
            step_seconds[step_shape(job)] = args.step_seconds or measure_step_seconds(job)
    count, where = slots(engine_settings(args))
    if count < 1:
        raise SystemExit(f"error: the engine has no slot for a job ({where}); check --gpu-share and the cluster")
    source = "given by --step-seconds" if args.step_seconds else measured_here()
    print(plan_text(place(jobs, count, step_seconds), count, where, step_seconds, source))


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return
    for pe in args.pes:
        length_gen.main(length_gen_arguments(args, pe))


if __name__ == "__main__":
    main()
