"""What a job's evaluations cost beside its training steps, bin by bin.

A job of `experiments/length_gen.py` evaluates every `eval_every` steps: each bin (the training
lengths, then the test bins) teacher-forced, and a few strings per bin decoded greedily with the
KV cache as a cross-check. The protocol reads the test bins only at a job's last evaluation, so
their share of a job is what scoring them only there would save. This trains one job of a preset
from scratch, as a CPU worker does (one XLA thread, pinned to a core), with the evaluation's two
parts timed per bin; the baseline is the job's whole time (compilation included, as in a run).

    python benchmarks/evaluation_share.py                                # RoPE UF, protocol preset, ~2 min
    python benchmarks/evaluation_share.py --task NB --pe ape --steps 2000
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crasplab.train.loop as loop  # noqa: E402
from crasplab.train.config import PRESETS  # noqa: E402
from crasplab.train.runs import make_jobs  # noqa: E402
from experiments import length_gen  # noqa: E402
from pinned_worker import add_core_option, measure_as_a_worker  # noqa: E402


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


def measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as out:
        settings = length_gen.run_settings(
            length_gen.build_parser().parse_args(
                ["--preset", args.preset, "--pe", args.pe, "--tasks", args.task, "--seeds", str(args.seed)]
                + ["--max-steps", str(args.steps), "--eval-every", str(args.eval_every), "--out", out]
            )
        )
        job = make_jobs(settings, Path(out))[0]
        bins = job.train.test_bins
        seconds = collections.defaultdict(float)
        # The loop calls these two by the names it imported; a job runs its (one-job) stack.
        loop.teacher_forced_exact = timed_by_bin(loop.teacher_forced_exact, "teacher", seconds, len(bins))
        loop.greedy_disagreements = timed_by_bin(loop.greedy_disagreements, "greedy", seconds, len(bins))
        start = time.perf_counter()
        loop.run_job(job)
        total = time.perf_counter() - start
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="protocol", choices=sorted(PRESETS))
    parser.add_argument("--pe", default="rope", help="position encoding, as length_gen.py takes it")
    parser.add_argument("--task", default="UF", help="task code (python -m crasp tasks lists them)")
    parser.add_argument("--seed", type=int, default=5000)
    parser.add_argument("--steps", type=int, default=1000, help="training steps of the job")
    parser.add_argument("--eval-every", type=int, default=500, help="steps between evaluations")
    add_core_option(parser)
    args = parser.parse_args()
    measure_as_a_worker(__file__, args.core, lambda: measure(args))


if __name__ == "__main__":
    main()
