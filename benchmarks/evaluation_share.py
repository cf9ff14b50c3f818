"""What a job's evaluations cost beside its training steps, bin by bin, and what scoring the test
bins only at a job's last evaluation saves.

A job of `experiments/length_gen.py` evaluates every `eval_every` steps: the training bin
teacher-forced, with a few strings decoded greedily with the KV cache as a cross-check, and the
test bins the same way, at every evaluation or (`test_bins_at_stop_only`, the protocol preset's)
only at the evaluation that stops the job. This trains one job of a preset from scratch, as a CPU
worker does (one XLA thread, pinned to a core), twice: first scoring the test bins at every
evaluation, the baseline, with the evaluation's two parts timed per bin; then scoring them only at
the last evaluation. Both come after one untimed run of the job, so that both find its
compilations cached, as every job of a run but the first finds them (the lab keeps XLA's
compilation cache on disk); the ratio is the baseline's time over the other's (above 1: the job
is faster). Both train the same bits.

    python benchmarks/evaluation_share.py                                # RoPE UF, protocol preset, ~5 min
    python benchmarks/evaluation_share.py --task NB --pe ape --steps 2000
    python benchmarks/evaluation_share.py --task NRLast --pe nope --sampler spread --test-bins 1-20,21-40,61-80
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import tempfile
import time
from pathlib import Path
from unittest import mock

import crasplab.train.loop as loop
from crasplab.cli.arguments import length_bins
from crasplab.cli.length_gen import RunRequest, run_settings
from crasplab.train.config import PRESETS
from crasplab.train.runs import make_jobs
from pinned_worker import add_core_option, measure_as_a_worker


def timed_by_bin(function, part: str, seconds: dict, bins: int):
    """`function`, adding each call's seconds to seconds[(part, bin)]: an evaluation calls each
    part once per bin, in the bins' order."""
    calls = collections.Counter()

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        seconds[part, calls[part] % bins] += time.perf_counter() - start
        calls[part] += 1
        return result

    return wrapper


def timed_job(args: argparse.Namespace, test_bins_at_stop_only: bool, seconds: dict) -> tuple[float, tuple]:
    """(seconds of the whole job, its bins), with the evaluation's parts added to `seconds` (by
    bin, where every evaluation scores every bin)."""
    with tempfile.TemporaryDirectory() as out:
        request = RunRequest(
            pe=args.pe,
            preset=args.preset,
            tasks=(args.task,),
            seeds=(args.seed,),
            sampler=args.sampler,
            test_bins=args.test_bins,
            train_changes=dict(max_steps=args.steps, eval_every=args.eval_every),
        )
        settings = run_settings(request)
        job = make_jobs(settings, Path(out))[0]
        job = dataclasses.replace(job, train=job.train.replace(test_bins_at_stop_only=test_bins_at_stop_only))
        bins = job.train.test_bins
        # The loop calls these two by the names it imported; a job runs its (one-job) stack.
        teacher = timed_by_bin(loop.teacher_forced_exact, "teacher", seconds, len(bins))
        greedy = timed_by_bin(loop.greedy_disagreements, "greedy", seconds, len(bins))
        with (
            mock.patch.object(loop, "teacher_forced_exact", teacher),
            mock.patch.object(loop, "greedy_disagreements", greedy),
        ):
            start = time.perf_counter()
            loop.run_job(job)
            return time.perf_counter() - start, bins


def measure(args: argparse.Namespace) -> None:
    timed_job(args, False, collections.defaultdict(float))  # compiles every shape: both timed runs find them cached
    seconds = collections.defaultdict(float)
    total, bins = timed_job(args, False, seconds)
    at_stop, _ = timed_job(args, True, collections.defaultdict(float))
    evaluations = args.steps // args.eval_every + (args.steps % args.eval_every > 0)
    print(
        f"{args.task} with --pe {args.pe}, preset {args.preset}, seed {args.seed}: {args.steps} steps, "
        f"{evaluations} evaluations (the first compiles)"
    )
    print(f"{'part':<36}{'seconds':>9}{'of the job':>12}")
    print(f"{'the whole job (baseline)':<36}{total:9.1f}{1:12.1%}")
    for b, (lo, hi) in enumerate(bins):
        kind = "training bin" if b == 0 else "test bin"
        for part, name in (("teacher", "teacher-forced"), ("greedy", "greedy")):
            label = f"{kind} {lo}-{hi}, {name}"
            print(f"{label:<36}{seconds[part, b]:9.1f}{seconds[part, b] / total:12.1%}")
    test = sum(value for (_, b), value in seconds.items() if b > 0)
    print(f"{'every evaluation, all bins':<36}{sum(seconds.values()):9.1f}{sum(seconds.values()) / total:12.1%}")
    print(f"{'the test bins alone':<36}{test:9.1f}{test / total:12.1%}")
    print(f"\n{'test bins scored':<36}{'seconds':>9}{'ratio':>12}")
    print(f"{'at every evaluation (baseline)':<36}{total:9.1f}{1:12.2f}")
    print(f"{'at the last evaluation only':<36}{at_stop:9.1f}{total / at_stop:12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="protocol", choices=sorted(PRESETS))
    parser.add_argument("--pe", default="rope", help="position encoding, as length_gen.py takes it")
    parser.add_argument("--task", default="UF", help="task code (python -m crasp tasks lists them)")
    parser.add_argument("--seed", type=int, default=5000)
    parser.add_argument("--steps", type=int, default=1000, help="training steps of the job")
    parser.add_argument("--eval-every", type=int, default=500, help="steps between evaluations")
    parser.add_argument(
        "--sampler", help="the retrieval tasks' sampler, as length_gen.py takes it (default: the paper's)"
    )
    parser.add_argument(
        "--test-bins", type=length_bins, help="the bins, as length_gen.py takes them (default: the preset's)"
    )
    add_core_option(parser)
    args = parser.parse_args()
    measure_as_a_worker(__file__, args.core, lambda: measure(args))


if __name__ == "__main__":
    main()
