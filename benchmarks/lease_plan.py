"""Which of a protocol run's tasks one gpu_run.py call starts: only those whose jobs can finish in
it, since a job unfinished when the machine goes back comes back with nothing (the spread
sampler's first APE round trained 20 jobs about 6,400 steps each, and lost all of it).

A task's work is its next protocol round (crasplab.verdicts.counting.next_seeds, as the run would
start it): its seeds, each to train the steps the task's jobs needed in the kept run of the same
encoding and sampler (the most any of its seeds needed), or the step cap where none was kept;
a job this machine already trained part of (a warm machine keeps runs/) needs only the rest. The
time of a task is its model-steps at the summed rate measured at the start of the call (the
throughput part's rate for the training's dtype and steps per call; where that part did not run,
--step-rate), plus TASK_OVERHEAD_S for its compile and the evaluations that end its seeds. Tasks
with jobs under way come first, so that what a call started is finished before anything new is;
then the others in the run's order, each started only where it fits in what is left. The rest
is left for the next lease, and the summary says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from crasplab.cli.length_gen import RunRequest, run_settings
from crasplab.records.job_folder import JobFolder, run_jobs, run_records
from crasplab.verdicts.counting import final_evaluations, next_seeds
from crasplab.verdicts.rules import rules_for
from crasplab.train.checkpoint import read_checkpoint_meta

# Per task: compiling its stack's step (52 s for the paper model on the H200) and the evaluation
# that ends its seeds (bins to 200 and some strings decoded greedily: about a minute), rounded up.
TASK_OVERHEAD_S = 120.0
# The paper model's protocol training on the H200 in float32, four stacks of five side by side,
# summed, as the audit read call 4's training log (evidence/gpu-2026-12-04): the rate a plan
# assumes where this call measured none.
KEPT_STEP_RATE = 443.0


@dataclass(frozen=True)
class TaskWork:
    """One task's next round: `jobs` seeds, each to train about `steps_each` more steps."""

    task: str
    seeds: tuple[int, ...]
    steps_each: int
    steps_from: str  # where steps_each comes from: a kept run, or the step cap
    under_way: bool  # some of its jobs were trained here before (their checkpoints are on this machine)

    def seconds(self, rate: float, overhead_s: float = TASK_OVERHEAD_S) -> float:
        return len(self.seeds) * self.steps_each / rate + overhead_s


def choose(
    work: list[TaskWork], rate: float, seconds: float, overhead_s: float = TASK_OVERHEAD_S
) -> tuple[list[TaskWork], list[TaskWork]]:
    """(started, left): the tasks under way first, then the others in order, each started where
    its time fits in what the earlier ones leave of `seconds`."""
    started, left, free_s = [], [], seconds
    for item in sorted(work, key=lambda w: not w.under_way):  # a stable sort: the run's order otherwise
        if (needs_s := item.seconds(rate, overhead_s)) <= free_s:
            started.append(item)
            free_s -= needs_s
        else:
            left.append(item)
    return started, left


def kept_steps(kept_run: Path, task: str) -> int | None:
    """The most steps a finished job of `task` trained in the kept run folder; None without one."""
    steps = [json.loads(path.read_text())["steps"] for path in sorted((kept_run / task).glob("seed*/result.json"))]
    return max(steps, default=None)


def protocol_work(request: RunRequest, run_dir: Path, kept_run: Path | None) -> list[TaskWork]:
    """The next round of every task of the protocol run `request` in `run_dir` (absent: not
    started), its steps from `kept_run` (None, or absent: the step cap)."""
    # The run's settings and rules without an engine's: checking one asks JAX for its backend, and
    # on a GPU machine that would take most of the device's memory from the training that follows.
    run = run_settings(request)
    protocol = rules_for(run.model.pe, request.threshold)
    finals = final_evaluations(run_records(run_dir, run_jobs(run.tasks, run.seeds))) if run_dir.is_dir() else {}
    work = []
    for task, seeds in next_seeds(protocol, run.seeds, finals, run.tasks).items():
        train = run.train[task]
        kept = kept_steps(kept_run, task) if kept_run is not None and kept_run.is_dir() else None
        needed = train.max_steps if kept is None else min(kept, train.max_steps)
        done = [trained_steps(JobFolder.of(run_dir, task, seed)) for seed in seeds]
        # A job that trained past what the kept run needed still has to meet the stopping rule.
        least = train.eval_every * max(train.stop_after_perfect_evals, 1)
        left_each = [max(needed - step, min(least, train.max_steps - step)) for step in done]
        work.append(
            TaskWork(
                task=task,
                seeds=tuple(seeds),
                steps_each=max(left_each),
                steps_from=f"{kept_run.name}" if kept is not None else "the step cap",
                under_way=any(done),
            )
        )
    return work


def trained_steps(folder: JobFolder) -> int:
    """The step a job's checkpoint holds; 0 where it has none."""
    return read_checkpoint_meta(folder.checkpoint_file)["step"] if folder.checkpoint_file.exists() else 0


def measured_rate(throughput_json: Path, row: str) -> float | None:
    """The summed model-steps/s of the throughput part's best packing for `row` (a dtype, and its
    steps per call: device_throughput.row_name), where that part ran in this call and measured it."""
    if not throughput_json.is_file():
        return None
    rates = json.loads(throughput_json.read_text()).get("concurrent_model_steps_per_s", {}).get(row)
    return max(rates.values()) if rates else None


def plan_text(
    started: list[TaskWork], left: list[TaskWork], rate: float, rate_from: str, seconds: float, overhead_s: float
) -> str:
    lines = [
        f"{rate:.0f} model-steps/s ({rate_from}); {seconds / 60:.1f} min for training; "
        f"{overhead_s:.0f} s per task for its compile and final evaluation",
        "",
        "| task | seeds | steps each | from | expected min | |",
        "|---|---|---|---|---|---|",
    ]
    for item, what in [(w, "started") for w in started] + [(w, "left for the next lease") for w in left]:
        under_way = ", under way" if item.under_way else ""
        lines.append(
            f"| {item.task} | {', '.join(map(str, item.seeds))} | {item.steps_each} | {item.steps_from} | "
            f"{item.seconds(rate, overhead_s) / 60:.1f} | {what}{under_way} |"
        )
    return "\n".join(lines)
