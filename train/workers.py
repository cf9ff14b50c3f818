"""Spread independent jobs over the machine, with one progress bar per task.

On a CPU, each job runs in its own process pinned to one core (os.sched_setaffinity) with XLA
told to use a single thread: on the 2-core development machine two such processes give 1.7x the
throughput of one process using both cores (benchmarks/train_step.py, real-token table). Jobs
start longest first. On an accelerator, the seeds of one task are trained as one stacked,
vmapped model in the driving process instead (crasplab.train.accelerator).

The worker entry point runs job folders by hand, or for an engine:

    python -m crasplab.train.workers FOLDER                 # one job, as the CPU pool runs it
    python -m crasplab.train.workers FOLDER1 FOLDER2 ...    # the seeds of a task as one stack

Several folders train as ONE vmapped stack through run_stack, each resuming from its own
checkpoint (folders whose checkpoints stand at different steps train as one stack per step).
Folders whose jobs differ in more than the seed (task, model, training settings, sampler
parameters), a folder named twice, or two folders of one seed are refused before anything is
locked or trained, with the folders and the settings that differ. Folders already done are
skipped; when all are, the worker exits 0 at once. The Ray engine runs one such command per
stack on a GPU share (train.engines).

Stacked numbers: a seed in a stack ends where it ends trained alone up to float32 rounding
(tests/test_train_loop.py asserts losses within rtol 1e-4, not equality: the vmapped step may
reduce in another order; on the 2-core CPU the tiny test stacks matched single runs bit for
bit). A stack of one folder is the single-job run itself.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from tqdm import tqdm

from crasplab.errors import LabError, command_boundary
from crasplab.records.files import write_json
from crasplab.train.allocator import with_huge_page_blocks
from crasplab.train.loop import Job, is_done, run_stack, stack_mismatch
from crasplab.train.runs import read_job
from crasplab.train.stacks import expected_cost

SINGLE_THREAD_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class WorkerError(LabError, RuntimeError):
    """A worker process exited with an error."""


def single_thread_env() -> dict[str, str]:
    """This process's environment with XLA told to use one thread (for a child pinned to a core)."""
    return dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + SINGLE_THREAD_XLA_FLAGS).strip())


def worker_env() -> dict[str, str]:
    """The environment a training worker runs in: one XLA thread, large blocks on huge pages."""
    return with_huge_page_blocks(single_thread_env())


def available_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def core_busy_times(proc_stat: str) -> dict[int, tuple[int, int]]:
    """core -> (busy, total) jiffies from the text of /proc/stat."""
    times = {}
    for line in proc_stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(v) for v in fields]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            times[int(name[3:])] = (sum(values) - idle, sum(values))
    return times


def idlest_first(cores: list[int], before: str, after: str) -> list[int]:
    """`cores` ordered by how idle they were between two readings of /proc/stat (idlest first;
    ties keep their order)."""
    start, end = core_busy_times(before), core_busy_times(after)

    def busy_fraction(core: int) -> float:
        if core not in start or core not in end:
            return 0.0
        busy, total = (e - s for e, s in zip(end[core], start[core]))
        return busy / total if total else 0.0

    return sorted(cores, key=busy_fraction)


def cores_for_workers(sample_seconds: float = 0.3) -> list[int]:
    """The available cores, idlest first, so that a run started beside another one (or beside any
    busy process) does not pin its first worker onto an occupied core."""
    cores = available_cores()
    stat = Path("/proc/stat")
    if not stat.exists():  # not Linux: keep the order
        return cores
    before = stat.read_text()
    time.sleep(sample_seconds)
    return idlest_first(cores, before, stat.read_text())


class TaskBars:
    """One tqdm bar per task: steps summed over its seeds, last loss and in-distribution accuracy.
    A task none of whose jobs has started shows "queued" and no rate or ETA; its clock starts with
    its first step (a bar timed from the start of the run had shown ETAs of hours for the tasks
    that waited). Without bars (`enabled=False`, or stderr not a terminal: a log file, a batch job,
    where redrawn bars had filled a log with 180 KB of redraws) the same, as lines on stderr: one
    per task at most every LINE_SECONDS, one per seed evaluated (when its training-bin accuracy
    changes), one when a stack starts and one when a seed is done: a log then shows where a run's
    time went (compiling, training, evaluating)."""

    LINE_SECONDS = 30.0
    QUEUED = "{desc}: queued, {total_fmt} steps"

    def __init__(self, jobs: list[Job], enabled: bool = True, terminal: bool | None = None):
        enabled = enabled and (sys.stderr.isatty() if terminal is None else terminal)
        by_task = defaultdict(list)
        for job in jobs:
            by_task[job.task_code].append(job)
        # Jobs by folder: a sweep trains one task and seed in several configurations, each its own job.
        self.jobs = {str(job.folder): job for job in jobs}
        self.done: set[str] = set()
        width = max(len(code) for code in by_task)
        self.bars = {
            code: tqdm(
                total=sum(j.train.max_steps for j in group),
                desc=code.ljust(width),
                position=i,
                leave=True,
                disable=not enabled,
                unit="step",
                dynamic_ncols=True,
                bar_format=self.QUEUED,
            )
            for i, (code, group) in enumerate(by_task.items())
        }
        self.started_tasks: set[str] = set()
        self.lines = not enabled
        self.started = time.monotonic()
        self.last_line: dict[str, float] = {}
        self.steps = defaultdict(int)  # folder -> the job's last reported step
        self.status = {}  # folder -> the job's last report
        self.lock = threading.Lock()  # stacks training in threads of one process report to one set of bars

    def update(self, progress: dict) -> None:
        with self.lock:
            self._update(progress)

    def _update(self, progress: dict) -> None:
        """A report from a training job (train.loop); one marked done ends the job's part of its bar."""
        key = progress["folder"]
        if progress.get("done"):
            self._finish(self.jobs[key])
        if key in self.done or self.status.get(key) == progress:
            return
        self._start(progress["task"])
        bar = self.bars[progress["task"]]
        bar.update(progress["step"] - self.steps[key])
        evaluated = progress["train_bin_accuracy"] != self.status.get(key, {}).get("train_bin_accuracy")
        self.steps[key] = progress["step"]
        self.status[key] = progress
        seeds = [p for p in self.status.values() if p["task"] == progress["task"]]
        accuracies = [p["train_bin_accuracy"] for p in seeds if p["train_bin_accuracy"] is not None]
        loss = f"{sum(p['loss'] for p in seeds) / len(seeds):.3f}"
        accuracy = "-" if not accuracies else f"{sum(accuracies) / len(accuracies):.3f}"
        bar.set_postfix(loss=loss, acc_id=accuracy, refresh=False)
        bar.refresh()
        if self.lines and evaluated and progress["train_bin_accuracy"] is not None:
            self._line(
                progress["task"],
                f"seed {progress['seed']} evaluated at step {progress['step']}: training-bin accuracy "
                f"{progress['train_bin_accuracy']:.3f}",
            )
        elif self.lines and time.monotonic() - self.last_line.get(progress["task"], -self.LINE_SECONDS) >= (
            self.LINE_SECONDS
        ):
            self._line(progress["task"], f"loss {loss}, training-bin accuracy {accuracy}")

    def _start(self, task: str) -> None:
        """The task's first step: its bar shows rate and ETA from now, counting from the steps of
        its jobs already done."""
        if task in self.started_tasks:
            return
        self.started_tasks.add(task)
        bar = self.bars[task]
        already = bar.n
        bar.bar_format = None
        bar.reset(total=bar.total)
        bar.initial = bar.n = bar.last_print_n = already

    def _line(self, task: str, text: str) -> None:
        # Summed here, not read from the bar: a disabled bar counts none.
        steps = sum(count for folder, count in self.steps.items() if self.jobs[folder].task_code == task)
        self.last_line[task] = now = time.monotonic()
        print(
            f"[{now - self.started:7.1f} s] {task}: {steps}/{self.bars[task].total} steps, {text}",
            file=sys.stderr,
            flush=True,
        )

    def stack_starts(self, stack: list[Job]) -> None:
        """A line (without bars) naming the stack that starts: its first steps compile."""
        if self.lines:
            with self.lock:
                self._line(stack[0].task_code, f"a stack of seeds {[job.seed for job in stack]} starts")

    def finish(self, job: Job) -> None:
        """A job that is done (it may have stopped early): its remaining steps count as done, so
        the bar reaches the end; without bars, a line with its step, time and accuracy, once."""
        with self.lock:
            self._finish(job)

    def _finish(self, job: Job) -> None:
        key = str(job.folder)
        if key in self.done:  # reported done by the job itself, then by the engine that ran it
            return
        self.done.add(key)
        self.bars[job.task_code].update(job.train.max_steps - self.steps[key])
        self.steps[key] = job.train.max_steps
        if all(folder in self.done for folder, other in self.jobs.items() if other.task_code == job.task_code):
            self.bars[job.task_code].bar_format = None  # a task done before it started: no longer queued
        self.bars[job.task_code].refresh()
        if self.lines:
            result = job.files.read_result()
            self._line(
                job.task_code,
                f"seed {job.seed} done at step {result.steps} after {result.elapsed_s:.0f} s, training-bin "
                f"accuracy {result.bins[0].accuracy:.3f}",
            )

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def run_on_cpu_cores(jobs: list[Job], workers: int, show_progress: bool = True) -> None:
    """Run the jobs, at most `workers` at a time, each in a single-threaded process on its own core."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    cores = cores_for_workers()
    # Longest first: a long job started last would leave the other cores idle while it finishes.
    queue = sorted((job for job in jobs if not is_done(job)), key=expected_cost, reverse=True)
    bars = TaskBars(jobs, enabled=show_progress)
    for job in jobs:
        if is_done(job):
            bars.finish(job)
    running: dict[int, tuple[subprocess.Popen, Job]] = {}
    try:
        while queue or running:
            for slot in range(workers):
                if slot not in running and queue:
                    job = queue.pop(0)
                    running[slot] = (_launch(job, cores[slot % len(cores)]), job)
            time.sleep(0.5)
            for slot, (process, job) in list(running.items()):
                progress = _read_progress(job)
                if progress is not None:
                    bars.update(progress)
                if process.poll() is None:
                    continue
                del running[slot]
                if process.returncode != 0:
                    raise WorkerError(
                        f"the worker for {job.task_code} seed {job.seed} exited with code "
                        f"{process.returncode}; its log:\n{_tail(job.files.log_file)}"
                    )
                bars.finish(job)
    finally:
        for process, _ in running.values():
            process.kill()
        bars.close()


def worker_command(folders: list[Path | str], core: int, *extra: str) -> list[str]:
    """The command that runs job folders (one, or the seeds of a task as one stack) pinned to
    `core`. `-P` keeps the current folder off sys.path, so a `train.py` or a `crasplab/` folder
    where the run was started cannot shadow the lab's modules. The child pins itself (--core): a
    preexec_fn would make Python fork a multithreaded parent."""
    return [sys.executable, "-P", "-m", "crasplab.train.workers", *map(str, folders), "--core", str(core), *extra]


def _launch(job: Job, core: int) -> subprocess.Popen:
    job.folder.mkdir(parents=True, exist_ok=True)
    write_json(job.files.job_file, job.to_dict())
    with open(job.files.log_file, "ab") as log:
        return subprocess.Popen(
            worker_command([job.folder], core, "--die-with-parent"),
            env=worker_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _read_progress(job: Job) -> dict | None:
    """The job's last progress line, for the job's own folder: progress.json names no folder (a run
    folder moved or copied, then resumed, would otherwise report under the old one)."""
    try:
        progress = json.loads(job.files.progress_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return dict(progress, folder=str(job.folder)) if isinstance(progress, dict) else None


def _tail(path: Path, lines: int = 30) -> str:
    """The end of a worker's log: its `error:` line alone when it ended with one (the worker's
    command_boundary wrote it: the whole story), else its last lines (a traceback)."""
    last = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
    return last[-1].removeprefix("error: ") if last and last[-1].startswith("error: ") else "\n".join(last)


def _die_with_parent() -> None:
    """Linux: a worker whose pool is killed (even with -9) is killed too, so a rerun never finds an
    orphan still writing into the folder it resumes."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _lock_folder(folder: Path):
    """An exclusive lock on the job folder for the life of the process; a second process fails fast."""
    handle = open(folder / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"{folder} is being trained by another process; wait for it or stop it first")
    return handle


def read_stack(folders: list[str]) -> list[Job]:
    """The jobs of the folders, refused (SystemExit, before anything is locked or trained) when
    they cannot train as one stack: a folder named twice, two folders of one seed, or settings
    that differ in more than the seed."""
    if repeated := sorted(folder for folder, count in Counter(map(os.path.realpath, folders)).items() if count > 1):
        raise SystemExit(f"error: job folder(s) named more than once: {', '.join(repeated)}; name each folder once")
    jobs = [read_job(folder) for folder in folders]  # validated; each job's files stay in the folder named
    if mismatch := stack_mismatch(jobs):
        raise SystemExit(
            f"error: these job folders cannot train as one stack: {mismatch}. Folders train together only "
            "when their jobs differ in the seed alone; run the others in a worker of their own"
        )
    if len({job.seed for job in jobs}) < len(jobs):  # progress reports name a job by its seed
        seeds = ", ".join(f"{job.folder}: seed {job.seed}" for job in jobs)
        raise SystemExit(f"error: a stack trains distinct seeds, and these job folders repeat one ({seeds})")
    return jobs


def _worker_main(folders: list[str], core: int | None, with_parent: bool) -> None:
    if with_parent:
        _die_with_parent()
    if core is not None:
        os.sched_setaffinity(0, {core})
    jobs = read_stack(folders)
    locks = [_lock_folder(job.folder) for job in jobs]  # noqa: F841 (held until exit)
    by_seed = {job.seed: job for job in jobs}
    last_write = defaultdict(float)

    def write_progress(progress: dict) -> None:
        # Throttled: the pool polls twice a second, a file per step would only cost time.
        seed = progress["seed"]
        if time.monotonic() - last_write[seed] >= 1.0 or progress["step"] >= progress["max_steps"]:
            # Nothing absolute is kept in a run folder: the reader knows the folder it read from.
            write_json(by_seed[seed].files.progress_file, {k: v for k, v in progress.items() if k != "folder"})
            last_write[seed] = time.monotonic()

    run_stack(jobs, write_progress)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Run (or resume) job folders holding job.json: one folder, or the seeds of one task "
        "(jobs that differ in the seed alone) trained as one vmapped stack. Folders already done are skipped."
    )
    parser.add_argument("folders", nargs="+", metavar="FOLDER", help="the job folders")
    parser.add_argument("--core", type=int, default=None, help="pin this process to this CPU core")
    parser.add_argument("--die-with-parent", action="store_true", help="exit when the launching process dies")
    arguments = parser.parse_args()
    with command_boundary():  # a user error is one `error:` line, the last of worker.log (WorkerError shows it)
        _worker_main(arguments.folders, arguments.core, arguments.die_with_parent)
