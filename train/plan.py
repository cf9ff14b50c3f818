"""A grid's plan before it runs: which job (or stack of seeds) goes to which slot of the engine,
and how long the whole takes, estimated from a measured training step.

The estimate is an upper bound per unit: every step at the job's step cap, each as long as a step
on the job's longest training bucket (the measured one). Jobs that stop early (a protocol job
stops at its second perfect evaluation in a row) and steps on shorter buckets take less;
evaluation and compile time are not counted. Slots are filled longest unit first, as the engines
start them. On the accelerator path a unit is a stack of seeds, timed as a stack, and the device
is one slot: stacks trained side by side share it, and can only fill the gaps one stack leaves.

Where no device is at hand to measure, the reference below gives what the lab measured of an
accelerator: the paper model's protocol training on an H200.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import numpy as np

from crasplab.train.data import batch_rng, sample_batch
from crasplab.train.loop import Job, TaskSetup
from crasplab.train.steps import from_scratch_batch_parts, init_stack, make_optimizer, make_train_step

TIMED_STEPS = 3
# The paper model's training (APE, 4 x 4 x 256, batch 64, lengths 1-50, float32) on an NVIDIA
# H200 with jax 0.11.2, as the protocol ran it on 2026-12-04: four stacks of five side by side,
# evaluations included, about 620 model-steps per second summed (evidence/gpu-2026-12-04/call3,
# the training log's steady minutes), so 1.61 ms per model-step; a stack of S at S times that,
# the stacks counted one after another on the device's one slot. (A stack of one alone: 3.53 ms.)
H200_PAPER_STEP_S = 1 / 620


def step_shape(job: Job, stack: int = 1) -> tuple:
    """Jobs with equal shapes take about equally long per step (the vocabulary and the position
    table change only the embedding rows read): one measurement serves them all."""
    setup = TaskSetup.for_job(job)
    m = job.model
    model = f"{m.pe} {m.n_layers}x{m.n_heads}x{m.d_model} (d_ff {m.d_ff or 4 * m.d_model}, {m.dtype})"
    return (model, job.train.batch_size, setup.buckets.padded_lengths[-1], stack)


def measure_step_seconds(job: Job, stack: int = 1) -> float:
    """Seconds of one training step of a stack of `stack` models of `job`'s, on its longest training
    bucket, on this process's default device (the median of a few steps after the compile)."""
    setup = TaskSetup.for_job(job)
    optimizer = make_optimizer(job.train)
    models = [job.model.build(len(setup.task.vocab), setup.max_positions, job.seed + i) for i in range(stack)]
    graphdef, rest, params, opt_state = init_stack(models, optimizer)
    step = make_train_step(graphdef, rest, optimizer, from_scratch_batch_parts())
    batch = sample_batch(
        setup.task,
        batch_rng(job.seed, 0, 0),
        job.train.batch_size,
        setup.buckets.ranges[-1],
        setup.buckets.padded_lengths[-1],
        setup.max_positions,
        random_offset=False,
    )
    stacked = {name: np.repeat(array[None], stack, axis=0) for name, array in batch.as_dict().items()}
    seconds = []
    for _ in range(TIMED_STEPS + 1):  # the first call compiles
        start = time.perf_counter()
        params, opt_state, loss, _ = step(params, opt_state, stacked)
        jax.block_until_ready(loss)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds[1:]))


@dataclass(frozen=True)
class Placement:
    job: Job
    slot: int
    start_s: float
    end_s: float


def unit_shape(unit: list[Job]) -> tuple:
    """The step shape of a unit the engine trains at once: one job, or a stack of seeds."""
    return step_shape(unit[0], len(unit))


def place(units: list[list[Job]], slots: int, step_seconds: dict[tuple, float]) -> list[Placement]:
    """Longest unit first onto the slot that frees first (each at its step cap); one placement per job."""
    cost = [unit[0].train.max_steps * step_seconds[unit_shape(unit)] for unit in units]
    free_at = [0.0] * slots
    placements = []
    for index in sorted(range(len(units)), key=lambda i: cost[i], reverse=True):
        slot = int(np.argmin(free_at))
        placements += [Placement(job, slot, free_at[slot], free_at[slot] + cost[index]) for job in units[index]]
        free_at[slot] += cost[index]
    return placements


def measured_here() -> str:
    return f"measured on {jax.devices()[0].device_kind} ({jax.default_backend()})"


def plan_text(
    placements: list[Placement], slots: int, where: str, step_seconds: dict[tuple, float], step_source: str
) -> str:
    """The dry run's printout: one line per job, then the totals."""
    lines = [f"{len(placements)} jobs on {slots} slot(s) ({where}); step times {step_source}:"]
    for shape, seconds in step_seconds.items():
        stack = f", a stack of {shape[3]}" if shape[3] > 1 else ""
        lines.append(f"  {shape[0]}, batch {shape[1]}, {shape[2]} tokens{stack}: {seconds * 1000:.1f} ms/step")
    lines.append(f"{'job':<48} {'slot':>4} {'steps':>6} {'start':>8} {'end':>8}")
    for p in sorted(placements, key=lambda p: (p.slot, p.start_s)):
        lines.append(
            f"{p.job.out_dir:<48} {p.slot:>4} {p.job.train.max_steps:>6} {p.start_s / 3600:>7.2f}h "
            f"{p.end_s / 3600:>7.2f}h"
        )
    total = max((p.end_s for p in placements), default=0.0)
    busy = sum(p.end_s - p.start_s for p in {(p.slot, p.start_s): p for p in placements}.values())
    lines.append(
        f"estimated wall time at most {total / 3600:.2f} h ({busy / 3600:.2f} slot-hours; every job at its "
        "step cap, evaluation and compiles not counted)"
    )
    return "\n".join(lines)
