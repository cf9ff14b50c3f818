"""Where one training step spends its time: XLA's per-op profile of our step, grouped.

Runs the step of a preset's model on its longest unique-copy batch (as benchmarks/train_step.py
does) under jax.profiler, in a child process pinned to one core as a training worker runs. XLA's
single-thread flag alone does not keep the step on one core: unpinned, its products still ran on
both of the 2-core machine's (21 ms of wall time and 38 ms of CPU time a step). Three allocator
settings, each in its own child process since the settings cannot be undone: the lab's
(`train.allocator`: large blocks on huge pages, freed memory kept), huge pages alone, and glibc's
defaults. Each table ends with the same step timed without the profiler. Read the table whose op
times add up to about that step: under the profiler the lab's two settings together slow every op
several-fold (the quick step with flax's LayerNorm, before round 8 of docs/calibration.md: ops
summed to 192.5 ms against 33.6 ms unprofiled), huge pages alone do not (32.9 against 34.9 ms),
nor do glibc's defaults (48.7 against 51.2 ms). Every executed op is put in a group by its output
(attention weights, per-token activations and their gradients, or parameter-shaped: weight
gradients and AdamW) and in a kind by what XLA compiled it to (matrix products: a dot or a fusion
around one; everything else), and the milliseconds per step are summed per group. (The vmapped
step's ops carry no reliable forward/backward names, hence grouping by shape.) The costliest ops
follow, with their shapes.

    python benchmarks/profile_step.py                 # quick preset, about two minutes
    python benchmarks/profile_step.py --preset paper --steps 3
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from crasplab.train.workers import available_cores, single_thread_env, worker_env
from pinned_worker import pin_to_core

# (label, environment of the child, whether it keeps freed memory); see the module docstring.
ALLOCATOR_SETTINGS = (
    ("huge pages and freed memory kept (as the lab trains)", worker_env, "kept"),
    ("huge pages only", worker_env, "defaults"),
    ("glibc defaults", single_thread_env, "defaults"),
)
GROUPS = ("attention weights (B x H x T x T)", "per token (B x T x ...)", "per parameter (weights, AdamW)")
KINDS = ("matrix products", "elementwise and other")
TOP_OPS = 15


def shape_group(shape: str, batch: int, length: int) -> str:
    """Which of GROUPS an op belongs to, from its output shape (a tuple of several: its first)."""
    dims = [int(d) for d in re.findall(r"\d+", shape.split("]")[0].split("[", 1)[-1])]
    if dims.count(length) >= 2:
        return GROUPS[0]
    if batch * length in dims or (batch in dims and length in dims):
        return GROUPS[1]
    return GROUPS[2]


def instructions(hlo_text: str, batch: int, length: int) -> dict[str, tuple[str, str, str]]:
    """Top-level HLO instruction name -> (output shape, group, kind), from the compiled module text."""
    computations = dict(re.findall(r"\n%?([\w.-]+) [^\n]*\{\n(.*?)\n\}", hlo_text, flags=re.S))
    found = {}
    for line in hlo_text[hlo_text.index("ENTRY") :].splitlines()[1:]:
        match = re.match(r"\s*(?:ROOT )?%?([\w.-]+) = (\S+) ([\w-]+)\(", line)
        if not match:
            continue
        name, shape, opcode = match.groups()
        called = re.search(r"calls=%?([\w.-]+)", line)
        body = computations.get(called.group(1), "") if called else ""
        kind = KINDS[0] if opcode == "dot" or " dot(" in body else KINDS[1]
        found[name] = (shape, shape_group(shape, batch, length), kind)
    return found


def profile(preset_name: str, steps: int) -> None:
    """Child: trace `steps` steps and print the grouped table and the costliest ops."""
    import jax
    from jax.profiler import ProfileData

    from crasplab.train.steps import from_scratch_batch_parts, part_bounds
    from train_step import Ours, equal_shape_batch  # beside this script, which a child runs as a script too

    batch, vocab_size = equal_shape_batch(preset_name)
    ours = Ours(
        preset_name, vocab_size, batch["tokens_BxT"].shape[1], keep_memory=os.environ.get("PROFILE_ALLOCATOR") == "kept"
    )
    stacked = {name: array[None] for name, array in batch.items()}
    rows, length = batch["tokens_BxT"].shape
    bounds = part_bounds(rows, from_scratch_batch_parts())
    part_rows = max(stop - start for start, stop in zip(bounds, bounds[1:]))  # the step runs its ops on parts
    ops = instructions(ours.step_fn.lower(ours.params, ours.opt_state, stacked).compile().as_text(), part_rows, length)
    for _ in range(3):
        ours.step(batch)
    unprofiled_ms = []
    for _ in range(steps):
        start = time.perf_counter()
        ours.step(batch)
        unprofiled_ms.append((time.perf_counter() - start) * 1e3)
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(steps):
                ours.step(batch)
        trace = ProfileData.from_file(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0])
        nanoseconds = collections.Counter()
        for plane in trace.planes:
            for line in plane.lines:
                for event in line.events:
                    if event.name in ops:
                        nanoseconds[event.name] += event.duration_ns
    per_step = {name: ns / steps / 1e6 for name, ns in nanoseconds.items()}
    groups = collections.Counter()
    for name, ms in per_step.items():
        _, group, kind = ops[name]
        groups[group, kind] += ms
    print(f"{'outputs':32} " + " ".join(f"{kind:>22}" for kind in KINDS) + f" {'ms/step':>9}")
    for group in GROUPS:
        cells = [groups[group, kind] for kind in KINDS]
        print(f"{group:32} " + " ".join(f"{ms:>22.1f}" for ms in cells) + f" {sum(cells):>9.1f}")
    print(
        f"{'all':32} "
        + " ".join(f"{sum(groups[g, kind] for g in GROUPS):>22.1f}" for kind in KINDS)
        + f" {sum(per_step.values()):>9.1f}   ({len(per_step)} distinct ops)"
    )
    print(f"the same step without the profiler: {statistics.median(unprofiled_ms):.1f} ms (median of {steps})")
    print("costliest ops:")
    for name, ms in sorted(per_step.items(), key=lambda item: -item[1])[:TOP_OPS]:
        shape, _, kind = ops[name]
        print(f"  {ms:6.2f} ms  {kind:22} {shape:30} {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="quick", choices=("quick", "paper"))
    parser.add_argument("--steps", type=int, default=20, help="traced steps (the table is per step)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        pin_to_core(available_cores()[-1])
        profile(args.preset, args.steps)
        return
    for label, env, allocator in ALLOCATOR_SETTINGS:
        print(f"\n## {args.preset} step, one pinned core, {label}: XLA op time per step (ms)", flush=True)
        subprocess.run(
            [sys.executable, __file__, "--child", "--preset", args.preset, "--steps", str(args.steps)],
            env=dict(env(), PROFILE_ALLOCATOR=allocator),
            check=True,
        )


if __name__ == "__main__":
    main()
