"""The accelerator path: a grid's jobs trained on the one device of this process.

The seeds of a task train as one vmapped stack (at most `stack_size` seeds: train.stacks), and
`concurrent_stacks` stacks train at once, each in a thread of this process. A small model's step
is bound by kernel launches and the host, not by the device's arithmetic (the paper model's step
alone used about 5% of an H200's bfloat16 rate), so the device has room for several stacks: while
one thread waits on the host, another's kernels run. Threads rather than processes because
processes on one GPU each hold their own context and time-slice the device instead of sharing it.
Helper processes sample every stack's batches ahead of its steps (crasplab.train.sampling), since
sampling in the training threads would hold the interpreter lock that all of them share.

Stacks start longest first, one stack per thread until it is done, so that a run stopped by its
deadline leaves whole tasks done rather than every task half-trained. `deadline_s` stops every
stack after its current step, unfinished, as a kill would: a later run resumes them.

Numbers: a stack's seeds end where each ends trained alone, to float32 rounding
(tests/test_train_accelerator.py, on the CPU under CRASPLAB_ACCELERATOR_PATH=rehearse), and
threads change when a stack trains, never what it computes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

from crasplab.records.settings import Settings
from crasplab.train.loop import Job, is_done, run_stack
from crasplab.train.sampling import sampler_pool
from crasplab.train.stacks import group_into_stacks, stack_cost
from crasplab.train.workers import TaskBars


@dataclass(frozen=True)
class DeviceSettings(Settings):
    """How the accelerator path uses its device: the most seeds in a stack (None: all seeds of a
    task), stacks trained at once, processes sampling batches ahead (0: none, each thread samples
    its own), and a wall-time budget after which every stack stops unfinished (None: no limit)."""

    stack_size: int | None = None
    concurrent_stacks: int = 4
    sampler_processes: int = 0
    deadline_s: float | None = None

    def check(self) -> None:
        self.require(self.stack_size is None or self.stack_size >= 1, "stack_size", "at least 1, or none")
        self.require(self.concurrent_stacks >= 1, "concurrent_stacks", "at least 1")
        self.require(self.sampler_processes >= 0, "sampler_processes", "at least 0")
        self.require(self.deadline_s is None or self.deadline_s > 0, "deadline_s", "seconds above 0, or none")


def default_sampler_processes() -> int:
    """All cores but two (the training threads' host work and the driver), at least one."""
    return max(1, len(os.sched_getaffinity(0)) - 2)


def run_on_device(jobs: list[Job], settings: DeviceSettings, show_progress: bool = True) -> bool:
    """Train the jobs that are not done; True when all are done, False when the deadline stopped
    some (they resume on the next run). The first stack to fail stops the others and raises."""
    stacks = sorted(group_into_stacks([job for job in jobs if not is_done(job)], settings.stack_size), key=stack_cost)
    stacks.reverse()  # longest first
    bars = TaskBars(jobs, enabled=show_progress)
    for job in jobs:
        if is_done(job):
            bars.finish(job)
    stop = threading.Event()
    timer = threading.Timer(settings.deadline_s, stop.set) if settings.deadline_s is not None else None
    helpers = sampler_pool(settings.sampler_processes) if settings.sampler_processes else contextlib.nullcontext()
    try:
        with helpers as pool:
            if timer is not None:
                timer.start()
            _train_stacks(stacks, settings.concurrent_stacks, bars, pool, stop)
    finally:
        stop.set()
        if timer is not None:
            timer.cancel()
        bars.close()
    return all(is_done(job) for job in jobs)


def _train_stacks(stacks: list[list[Job]], concurrent: int, bars: TaskBars, pool, stop: threading.Event) -> None:
    def train(stack: list[Job]) -> None:
        if stop.is_set():
            return
        bars.stack_starts(stack)
        run_stack(stack, bars.update, pool, stop)
        for job in stack:
            if is_done(job):
                bars.finish(job)

    with ThreadPoolExecutor(max_workers=concurrent, thread_name_prefix="stack") as threads:
        futures = [threads.submit(train, stack) for stack in stacks]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()  # the first failure, raised here once every stack has stopped
        except BaseException:  # a failed stack, or Ctrl-C: the others stop after their current step
            stop.set()
            raise
