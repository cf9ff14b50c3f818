"""Which jobs train together: the seeds of a task (jobs with one stack key) as vmapped stacks of a
bounded size. Pure: the engines place the stacks this returns, the worker trains one of them."""

from __future__ import annotations

import math

from crasp.tasks import get_task
from crasplab.train.data import sequence_length
from crasplab.train.loop import Job
from crasplab.train.steps import part_bounds


def group_into_stacks(jobs: list[Job], stack_size: int | None = None) -> list[list[Job]]:
    """The jobs cut into stacks: each stack holds jobs of one stack key, at most `stack_size` of
    them (None: all jobs of the key), and a key with more jobs is cut into as few consecutive
    stacks as the bound allows, of nearly equal sizes (5 seeds at most 4 a stack: 2 and 3, not 4
    and 1), since stacks running side by side take as long as the largest. Keys come in the order
    of their first job, jobs in the order given, so the same list gives the same stacks."""
    if stack_size is not None and stack_size < 1:
        raise ValueError(f"the stack size must be at least 1 (or None for all seeds of a task), got {stack_size}")
    by_key: dict[tuple, list[Job]] = {}
    for job in jobs:
        by_key.setdefault(job.stack_key(), []).append(job)
    stacks = []
    for same_key in by_key.values():
        bounds = part_bounds(len(same_key), math.ceil(len(same_key) / (stack_size or len(same_key))))
        stacks += [same_key[start:end] for start, end in zip(bounds, bounds[1:])]
    return stacks


def expected_cost(job: Job) -> int:
    """A job's cost at its step cap, in token-layer-steps (the step cost grows with the string
    length and the depth)."""
    task = get_task(job.task_code, **job.task_overrides)
    longest = min(job.train.train_lengths[1], task.max_length())
    return job.train.max_steps * sequence_length(task, longest) * job.model.n_layers


def stack_cost(stack: list[Job]) -> int:
    """A stack's seeds train side by side: it takes as long as its longest job."""
    return max(expected_cost(job) for job in stack)
