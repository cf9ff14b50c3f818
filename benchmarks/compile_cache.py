"""What the on-disk compilation cache (train.compile_cache) saves a quick job before its first step.

A job of the quick preset compiles its training step once per length bucket and its evaluation
once per test bin (teacher forcing and greedy decoding). Each row below is one fresh
single-threaded process, pinned to one core as the lab trains, that sets a job up, runs one
training step at every bucket's width and one evaluation, and reports the seconds this took and
the seconds the same calls take once compiled; the difference is compilation. Rows run in order
against one new cache folder:

- the baseline: cache off (every job of a run compiles from scratch);
- cold: the cache on but empty (the first job of a fresh machine: compiles and stores);
- warm: the same task again (another seed, a resumed run, a rerun);
- a task of the same vocabulary and lengths (UB after UF, UR after UL): JAX keys a compiled
  program by the computation, not by the task, so it is a hit too.

    python benchmarks/compile_cache.py            # about 3 minutes on a 2-core CPU
    python benchmarks/compile_cache.py --pairs UF:UB
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import jax

from crasplab.train.allocator import keep_freed_memory
from crasplab.train.compile_cache import CACHE_ENV, use_compile_cache
from crasplab.train.config import QUICK
from crasplab.train.data import TRAIN_STREAM, batch_rng, sample_training_batch, stack_batches
from crasplab.train.loop import Job, _StackRun
from crasplab.train.steps import shard_batch
from crasplab.train.workers import available_cores, worker_env
from pinned_worker import add_core_option, pin_to_core

PAIRS = ("UF:UB", "UL:UR")


def first_calls(code: str) -> dict:
    """In this process: set up a quick job of `code` and time its first and second calls."""
    keep_freed_memory()
    use_compile_cache()
    with tempfile.TemporaryDirectory(prefix="compile-cache-job-") as folder:
        job = Job(
            task_code=code,
            seed=0,
            model=QUICK.model,
            train=QUICK.train_for(code),
            task_overrides=QUICK.overrides_for(code),
            out_dir=folder,
        )
        return _time_first_calls(_StackRun([job], None))


def _time_first_calls(run: _StackRun) -> dict:
    batches, step = {}, 0
    while len(batches) < len(run.setup.buckets.ranges):  # one batch of each bucket width
        batch = stack_batches(
            [
                sample_training_batch(
                    run.setup.task,
                    batch_rng(0, TRAIN_STREAM, step),
                    64,
                    run.setup.buckets,
                    run.setup.max_positions,
                    True,
                )
            ]
        ).as_dict()
        batches.setdefault(batch["tokens_BxT"].shape[-1], batch)
        step += 1

    def calls() -> float:
        started = time.perf_counter()
        for batch in batches.values():
            run.state = run.train_step(*run.state, shard_batch(run.mesh, batch))[:2]
        jax.block_until_ready(run.state)
        run._evaluate()
        return time.perf_counter() - started

    first = calls()
    return dict(first_s=first, compiled_s=calls())


def in_fresh_process(code: str, cache: str, core: int) -> dict:
    env = dict(worker_env(), **{CACHE_ENV: cache})
    output = subprocess.run(
        [sys.executable, __file__, "--child", code, "--core", str(core)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(output.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pairs",
        nargs="+",
        default=list(PAIRS),
        metavar="TASK:SAME_SHAPES_TASK",
        help="a task, then one whose programs have the same shapes (default: %(default)s)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_core_option(parser)
    args = parser.parse_args()
    if args.child:
        pin_to_core(args.core)
        print(json.dumps(first_calls(args.child)))
        return
    core = available_cores()[-1]
    print(
        "## Seconds before a quick job's compiled speed: one step per length bucket and one evaluation, "
        "single-threaded, one fresh process per row\n"
    )
    print(f"{'task':8} {'cache':34} {'first calls s':>14} {'compiled s':>11} {'compiling s':>12} {'vs off':>7}")
    for pair in args.pairs:
        code, same_shapes = pair.split(":")
        with tempfile.TemporaryDirectory(prefix="xla-cache-") as cache:
            rows = [
                (code, "off (baseline)", "off"),
                (code, "on, empty (cold)", cache),
                (code, "on, same task again (warm)", cache),
                (same_shapes, f"on, after {code} (same shapes)", cache),
            ]
            baseline = None
            for task, label, folder in rows:
                timing = in_fresh_process(task, folder, core)
                compiling = timing["first_s"] - timing["compiled_s"]
                baseline = baseline or compiling
                print(
                    f"{task:8} {label:34} {timing['first_s']:14.1f} {timing['compiled_s']:11.2f} {compiling:12.1f} "
                    f"{compiling / baseline:6.2f}x"
                )


if __name__ == "__main__":
    main()
