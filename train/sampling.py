"""A stack's training batches, step after step: sampled in the training loop, or ahead of the
device by helper processes.

Sampling a batch is Python and numpy work on the host (about 0.7 ms for a paper-scale batch of
64 strings on one core). On a CPU that is a small part of a step, and each worker samples its
own. On an accelerator a stack of ten seeds needs ten batches per step while the device's step
takes a few milliseconds, so the host, not the device, would set the pace; and threads would not
help, since sampling holds the interpreter lock. So on the accelerator path a pool of processes
samples the next steps' stacked batches while the device trains (`BatchStream` with a pool).

Every batch is a function of (seed, step) alone (crasplab.train.data), so a batch sampled in
another process, or in another order, is the same batch: the pool changes when a batch is made,
never what it holds.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from crasp.tasks import get_task
from crasplab.train.data import TRAIN_STREAM, LengthBuckets, batch_rng, sample_training_batch, stack_batches
from crasplab.train.environment import environment_variable

# Steps sampled ahead of the one being trained: enough to cover a slow sample or a busy pool,
# few enough that a stack that stops early wastes little.
PREFETCH_STEPS = 8
JAX_PLATFORMS_ENV = "JAX_PLATFORMS"


@functools.lru_cache(maxsize=64)
def _task(code: str, overrides_json: str):
    return get_task(code, **json.loads(overrides_json))


@dataclass(frozen=True)
class StackBatches:
    """What decides the training batches of one stack: its task, its seeds and the batch shape.
    Small and picklable, so that a helper process can be sent it."""

    task_code: str
    overrides_json: str  # the task's sampler parameters, as sorted JSON (hashable, the same in every process)
    seeds: tuple[int, ...]
    batch_size: int
    buckets: LengthBuckets
    max_positions: int
    random_offset: bool
    score_eos: bool = True

    @classmethod
    def of(
        cls,
        task_code: str,
        task_overrides: dict,
        seeds,
        batch_size: int,
        buckets,
        max_positions,
        random_offset,
        score_eos: bool = True,
    ):
        overrides_json = json.dumps(task_overrides, sort_keys=True)
        return cls(
            task_code, overrides_json, tuple(seeds), batch_size, buckets, max_positions, random_offset, score_eos
        )

    def at(self, step: int) -> dict[str, np.ndarray]:
        """The stacked batch of `step`: each seed's own batch (its own length bucket), padded to the widest."""
        task = _task(self.task_code, self.overrides_json)
        batches = [
            sample_training_batch(
                task,
                batch_rng(seed, TRAIN_STREAM, step),
                self.batch_size,
                self.buckets,
                self.max_positions,
                self.random_offset,
                self.score_eos,
            )
            for seed in self.seeds
        ]
        return stack_batches(batches).as_dict()


class BatchStream:
    """The stacked batches of steps `start`, `start + 1`, ...: sampled on demand, or with a pool,
    PREFETCH_STEPS steps ahead (never past `end`), and two device calls' worth ahead where a call
    trains `steps_per_call` steps, so that the next call's batches are ready when it starts."""

    def __init__(
        self, batches: StackBatches, start: int, end: int, pool: Executor | None = None, steps_per_call: int = 1
    ):
        self.batches, self.next_step, self.end, self.pool = batches, start, end, pool
        self.prefetch = max(PREFETCH_STEPS, 2 * steps_per_call)
        self.ahead: collections.deque = collections.deque()
        self.submitted = start

    def next(self) -> dict[str, np.ndarray]:
        step = self.next_step
        self.next_step += 1
        if self.pool is None:
            return self.batches.at(step)
        while self.submitted < min(step + self.prefetch, self.end):
            self.ahead.append(self.pool.submit(self.batches.at, self.submitted))
            self.submitted += 1
        return self.ahead.popleft().result()

    def close(self) -> None:
        for future in self.ahead:
            future.cancel()
        self.ahead.clear()


def cpu_only_children():
    """Processes started in this block run JAX on the CPU: a helper that computes with numpy, and
    touched JAX on a GPU machine, would take its own share of the device's memory (JAX takes 75% of
    a GPU in each process). A child copies the environment as it starts; this process's JAX read
    its own at import, so the setting changes nothing here."""
    return environment_variable(JAX_PLATFORMS_ENV, "cpu")


@contextlib.contextmanager
def sampler_pool(processes: int) -> Iterator[ProcessPoolExecutor]:
    """Helper processes for BatchStream, for the life of the `with` block. Started with 'spawn':
    the training process has JAX's threads running, and forking a process with threads can
    deadlock the child. CPU-only (cpu_only_children) for the whole block, since helpers start on
    demand."""
    with cpu_only_children():
        pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))
        try:
            yield pool
        finally:
            pool.shutdown(cancel_futures=True)
