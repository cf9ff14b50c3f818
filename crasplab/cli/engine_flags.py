"""The engine flags every training script shares (--engine, --workers, --ray-address, --gpu-share,
--stack-size and the accelerator path's --concurrent-stacks, --sampler-processes,
--time-limit-minutes), read into crasplab.train.engines.EngineSettings, which checks them."""

from __future__ import annotations

from crasplab.cli.arguments import above_zero, at_least
from crasplab.train.accelerator import DeviceSettings
from crasplab.train.engines import ENGINES, EngineSettings


def add_engine_flags(parser) -> None:
    """--engine, --workers, --ray-address, --gpu-share and --stack-size: where a script's jobs run."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: this machine's cores, one pinned single-threaded process per job; ray: each job "
        "a Ray task (pip install -e '.[cluster]'; docs/cluster.md)",
    )
    parser.add_argument(
        "--workers",
        type=at_least(1),
        default=None,
        help="jobs at once on this machine's cores, each a single-threaded process pinned to one core, or on a "
        "private Ray cluster (default: one per available core)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="with --engine ray: the cluster to join (host:port, or 'auto' for the one running on "
        "this machine); default: a private cluster on this machine, stopped at the end",
    )
    parser.add_argument(
        "--gpu-share",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="with --engine ray: the fraction of a GPU each stack of seeds takes (0.25 packs four stacks on one "
        "GPU); the seeds of a task then train as one vmapped stack in one Ray task; 0: CPU jobs, one per task",
    )
    parser.add_argument(
        "--stack-size",
        type=int,
        default=None,
        metavar="N",
        help="where seeds train as stacks (--gpu-share above 0, or --engine local on an accelerator): at most N "
        "seeds of a task in one stack, a task with more is cut into stacks of nearly equal sizes; "
        "default: all seeds of a task in one stack",
    )
    parser.add_argument(
        "--concurrent-stacks",
        type=at_least(1),
        default=None,
        metavar="N",
        help="on an accelerator (--engine local): stacks trained at once on the one device, each in a thread "
        f"(default: {DeviceSettings.concurrent_stacks})",
    )
    parser.add_argument(
        "--sampler-processes",
        type=at_least(0),
        default=None,
        metavar="N",
        help="on an accelerator (--engine local): processes that sample training batches ahead of the device "
        "(0: the training threads sample their own; default: all cores but two)",
    )
    parser.add_argument(
        "--time-limit-minutes",
        type=above_zero,
        default=None,
        metavar="MINUTES",
        help="on an accelerator (--engine local): stop every stack after this long, unfinished; running the "
        "command again resumes them (default: no limit)",
    )


def engine_settings(args) -> EngineSettings:
    minutes = args.time_limit_minutes
    return EngineSettings(
        engine=args.engine,
        ray_address=args.ray_address,
        workers=args.workers,
        gpu_share=args.gpu_share,
        stack_size=args.stack_size,
        concurrent_stacks=args.concurrent_stacks,
        sampler_processes=args.sampler_processes,
        time_limit_s=None if minutes is None else minutes * 60,
    )
