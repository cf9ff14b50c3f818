"""Where a grid of job folders runs: the local per-core pool (train.workers) or a Ray cluster.

The Ray engine submits each job as a Ray task that runs the lab's own worker entry point,
`python -m crasplab.train.workers FOLDER --core N`, in the environment the local pool gives it:
XLA told to use one thread, the process pinned to a core that the task owns on its node (Ray
reserves a CPU but pins nothing, and XLA sizes its thread pool from the core affinity). On a GPU
share (`--gpu-share F > 0`) a Ray task trains a stack instead: the seeds of a task (jobs that
differ in the seed alone, at most `--stack-size` of them: train.stacks) run as one vmapped model
by one worker, `python -m crasplab.train.workers FOLDER1 FOLDER2 ... --core N`, which asks Ray
for F of a GPU and runs with `XLA_PYTHON_CLIENT_PREALLOCATE=false` so that stacks packed on one
GPU do not each reserve most of its memory. Every node must see the job folders at the same path
(one machine, or a shared filesystem) and run the same installation of the lab.

Failures: a worker that exits with an error is not retried (rerunning it would fail the same
way); the error shows the tail of its log. A lost node (its raylet or the task's process killed)
is a system failure that Ray retries on another node, and the worker resumes from the job's last
checkpoint, so the job ends with the numbers of an uninterrupted run. Each attempt is recorded in
the job folder's `placements.jsonl` (node, host, core, visible GPUs, the folders that trained
together, start and end), which is the timeline of which node ran what.

Ray is optional: `pip install -e ".[cluster]"`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from crasplab.errors import LabError
from crasplab.records.job_folder import JobFolder
from crasplab.records.files import append_jsonl, write_json
from crasplab.records.settings import Settings, SettingsError
from crasplab.train.loop import Job, is_done
from crasplab.train.accelerator import DeviceSettings, default_sampler_processes, run_on_device
from crasplab.train.device import ACCELERATOR_PATH_ENV, REHEARSE, accelerator_path, path_name
from crasplab.train.stacks import group_into_stacks, stack_cost
from crasplab.train.workers import (
    TaskBars,
    worker_command,
    WorkerError,
    _read_progress,
    _tail,
    available_cores,
    run_on_cpu_cores,
    worker_env,
)

ENGINES = ("local", "ray")
PLACEMENTS_FILE = "placements.jsonl"
# A lost node is retried this many times; an error in the job itself never is.
NODE_LOSS_RETRIES = 3
CORE_LOCK_FOLDER = Path(tempfile.gettempdir()) / f"crasp-lab-cores-{os.getuid()}"
POLL_SECONDS = 0.5
# How long a joined cluster may take to offer a node that fits a job (an autoscaler adding one).
NODE_WAIT_SECONDS = 60.0


# The accelerator path's settings: field -> (flag, whether a value is accepted, what is accepted).
DEVICE_FLAGS = {
    "concurrent_stacks": ("--concurrent-stacks", lambda n: n >= 1, "at least 1"),
    "sampler_processes": ("--sampler-processes", lambda n: n >= 0, "at least 0"),
    "time_limit_s": ("--time-limit-minutes", lambda s: 0 < s < float("inf"), "a number of minutes above 0"),
}


class EngineError(LabError, RuntimeError):
    """The engine cannot run: Ray missing, or the cluster cannot be reached."""


# The most jobs at once: each is a process (or a Ray worker) of its own, and a plan of more slots
# than any machine has (--workers 100000000) hung while it was made.
MAX_WORKERS = 1024


@dataclass(frozen=True)
class EngineSettings(Settings):
    """How a grid is run: the engine, the Ray cluster's address (None: a private local cluster),
    how many jobs run at once on a private cluster or the local pool (None: one per core), the
    share of a GPU each stack of seeds takes on a cluster with GPUs (0: CPU jobs, one per task),
    and the most seeds a stack holds where seeds train as stacks (None: all seeds of a task).
    On the local accelerator path (crasplab.train.accelerator): how many stacks train at once on
    the device, how many processes sample their batches (None: all cores but two), and a time
    limit after which every stack stops unfinished, to resume on the next run (None: none)."""

    engine: str = "local"
    ray_address: str | None = None
    workers: int | None = None
    gpu_share: float = 0.0
    stack_size: int | None = None
    concurrent_stacks: int | None = None
    sampler_processes: int | None = None
    time_limit_s: float | None = None

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise SettingsError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise SettingsError(
                f"--workers must be from 1 to {MAX_WORKERS} (jobs at once, each a process of its own), got "
                f"{self.workers}"
            )
        if self.ray_address is not None and self.engine != "ray":
            raise SettingsError(f"--ray-address {self.ray_address} needs --engine ray")
        if not 0.0 <= self.gpu_share <= 1.0 or (self.gpu_share and self.engine != "ray"):
            raise SettingsError(f"--gpu-share must be in [0, 1] and needs --engine ray, got {self.gpu_share}")
        if self.stack_size is not None:
            self._check_stack_size()
        for name, (flag, in_range, accepted) in DEVICE_FLAGS.items():
            if (value := getattr(self, name)) is not None:
                self._check_device_flag(flag, value, in_range(value), accepted)

    def _check_stack_size(self) -> None:
        if self.stack_size < 1:
            raise SettingsError(
                f"--stack-size must be at least 1 (or left out: all seeds of a task), got {self.stack_size}"
            )
        on_cpu_jobs = not self.gpu_share if self.engine == "ray" else not accelerator_path()
        if on_cpu_jobs:
            raise SettingsError(
                f"--stack-size {self.stack_size} applies only where seeds train as stacks: with --engine ray "
                "and --gpu-share above 0, or with --engine local on an accelerator; here each job runs alone "
                "on a CPU core, so leave it out"
            )

    def _check_device_flag(self, flag: str, value: float, in_range: bool, accepted: str) -> None:
        if not in_range:
            raise SettingsError(f"{flag} must be {accepted}, got {value:g}")
        if self.engine != "local" or not accelerator_path():
            raise SettingsError(
                f"{flag} applies to the accelerator path only (--engine local on a GPU or TPU, or on a CPU with "
                f"{ACCELERATOR_PATH_ENV}={REHEARSE}); here jobs run one per CPU core, so leave it out"
            )

    def device_settings(self) -> DeviceSettings:
        """The accelerator path's settings, defaults filled in."""
        return DeviceSettings(
            stack_size=self.stack_size,
            concurrent_stacks=self.concurrent_stacks or DeviceSettings.concurrent_stacks,
            sampler_processes=(
                default_sampler_processes() if self.sampler_processes is None else self.sampler_processes
            ),
            deadline_s=self.time_limit_s,
        )

    def describe(self) -> str:
        """Where the jobs ran, for a run's records."""
        if self.engine == "ray":
            return f"Ray at {self.ray_address}" if self.ray_address else "a private Ray cluster on this machine"
        if not accelerator_path():
            return f"{self.workers or len(available_cores())} pinned CPU workers"
        device = self.device_settings()
        return (
            f"one process on {path_name()}: stacks of {device.stack_size or 'all'} seeds, "
            f"{device.concurrent_stacks} at once, {device.sampler_processes} sampling processes"
        )


def run_jobs_on(settings: EngineSettings, jobs: list[Job], show_progress: bool = True) -> bool:
    """Run the jobs on the chosen engine; jobs already done are skipped. Locally, on a CPU one
    pinned process per job, on an accelerator the seeds of a task as vmapped stacks in this
    process; on Ray, one task per job, or on a GPU share one task per stack. True when every job
    is done, False when the time limit stopped some (they resume on the next run)."""
    if settings.engine == "ray":
        run_on_ray(jobs, settings, show_progress=show_progress)
    elif not accelerator_path():
        run_on_cpu_cores(jobs, settings.workers or len(available_cores()), show_progress=show_progress)
    else:
        return run_on_device(jobs, settings.device_settings(), show_progress=show_progress)
    return True


# -- the Ray task -------------------------------------------------------------------------------
def claim_core(cores: list[int] | None = None, wait_seconds: float = 0.2):
    """(core, lock handle): a core of this process's affinity that no other job on this machine
    holds, locked until the handle is closed (or the process dies). Waits while every core is held."""
    CORE_LOCK_FOLDER.mkdir(exist_ok=True)
    cores = cores or available_cores()
    while True:
        for core in cores:
            handle = open(CORE_LOCK_FOLDER / f"core{core}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return core, handle
            except BlockingIOError:
                handle.close()
        time.sleep(wait_seconds)


def job_environment(gpu_share: float) -> dict[str, str]:
    """The worker's environment: the local pool's, plus on a GPU share no preallocation (Ray has
    already set CUDA_VISIBLE_DEVICES to the GPU it assigned)."""
    env = worker_env()
    if gpu_share:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def run_job_folders(folders: list[str], gpu_share: float) -> dict:
    """Body of the Ray task: run the worker on job folders (one job, or on a GPU share the seeds
    of a task as one stack), pinned to a core this task owns. Every folder's worker.log gets the
    worker's output and its placements.jsonl the attempt, naming the folders trained together.
    Returns the worker's exit code and, on failure, the tail of its log."""
    import ray

    core, core_lock = claim_core()
    env = job_environment(gpu_share)
    placement = dict(
        node=ray.get_runtime_context().get_node_id(),
        host=socket.gethostname(),
        pid=os.getpid(),
        core=core,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        xla_flags=env["XLA_FLAGS"],
        gpu_share=gpu_share,
        folders=folders,
    )
    _record(folders, dict(placement, event="start", time=time.time()))
    try:
        returncode = _run_logged(worker_command(folders, core, "--die-with-parent"), env, folders)
    finally:
        core_lock.close()
    _record(folders, dict(placement, event="end", time=time.time(), returncode=returncode))
    return dict(
        returncode=returncode, log_tail=_tail(JobFolder(Path(folders[0])).log_file) if returncode else "", **placement
    )


def _record(folders: list[str], placement: dict) -> None:
    for folder in folders:
        append_jsonl(Path(folder) / PLACEMENTS_FILE, placement)


def _run_logged(command: list[str], env: dict[str, str], folders: list[str]) -> int:
    """Run the command; its output goes, line by line as it comes, to each folder's worker.log
    (a stack's worker speaks for all its jobs, and each folder keeps its whole history)."""
    with contextlib.ExitStack() as files:
        logs = [files.enter_context(open(JobFolder(Path(folder)).log_file, "ab")) for folder in folders]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in process.stdout:
            for log in logs:
                log.write(line)
                log.flush()
        return process.wait()


# -- the driver ---------------------------------------------------------------------------------
def import_ray():
    try:
        import ray
    except ImportError:
        raise EngineError("--engine ray needs Ray: pip install -e '.[cluster]' (or use --engine local)") from None
    return ray


def connect(settings: EngineSettings) -> bool:
    """Join the cluster at settings.ray_address, or start a private one on this machine; True
    when this process started the cluster (and stops it at the end)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    if settings.ray_address is not None:
        _check_reachable(settings.ray_address)
    try:
        if settings.ray_address is None:
            # "local" starts a new cluster even when another one runs on this machine (a bare
            # ray.init() would join it).
            ray.init(address="local", num_cpus=settings.workers or len(available_cores()), **options)
            return True
        ray.init(address=settings.ray_address, **options)
        return False
    except (ConnectionError, RuntimeError, ValueError) as error:  # ValueError: an address Ray cannot parse
        raise EngineError(
            f"cannot reach the Ray cluster at {settings.ray_address!r}: {error}. Start it with "
            "`ray start --head` (export RAY_AUTH_MODE=token on every node and here if the cluster "
            "uses token authentication), or leave out --ray-address for a private local cluster"
        ) from None


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a host:port that accepts no connection at once: ray.init would retry it for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise EngineError(
            f"cannot reach the Ray cluster at {address!r} ({error.strerror or error}). Start it with "
            "`ray start --head` and give the address it prints, or leave out --ray-address for a "
            "private local cluster"
        ) from None


def run_on_ray(jobs: list[Job], settings: EngineSettings, show_progress: bool = True) -> None:
    """Submit every job that is not done as a Ray task, or on a GPU share every stack of them
    (longest first), show progress from the job folders as the local pool does, and stop at the
    first task that fails."""
    ray = import_ray()
    started_cluster = connect(settings)
    task = ray.remote(run_job_folders).options(
        num_cpus=1, num_gpus=settings.gpu_share or 0, max_retries=NODE_LOSS_RETRIES, retry_exceptions=False
    )
    bars = TaskBars(jobs, enabled=show_progress)
    pending = {}
    try:
        # A private cluster has all its nodes from the start; a joined one may still be adding some.
        check_some_node_fits(ray, settings.gpu_share, wait_s=0.0 if started_cluster else NODE_WAIT_SECONDS)
        for job in jobs:
            if is_done(job):
                bars.finish(job)
        for stack in sorted(ray_units(jobs, settings), key=stack_cost, reverse=True):
            for job in stack:
                job.folder.mkdir(parents=True, exist_ok=True)
                write_json(job.files.job_file, job.to_dict())
            pending[task.remote([str(job.folder.resolve()) for job in stack], settings.gpu_share)] = stack
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_SECONDS)
            for job in (job for stack in pending.values() for job in stack):
                if (progress := _read_progress(job)) is not None:
                    bars.update(progress)
            for ref in ready:
                stack = pending.pop(ref)
                outcome = _outcome(ray, ref, stack)
                if outcome["returncode"] != 0:
                    raise WorkerError(
                        f"the worker for {describe(stack)} (node {outcome['host']}, core "
                        f"{outcome['core']}) exited with code {outcome['returncode']}; its log:\n"
                        f"{outcome['log_tail']}"
                    )
                for job in stack:
                    bars.finish(job)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)  # kills the task's process, and with it the worker (--die-with-parent)
        bars.close()
        if started_cluster:
            ray.shutdown()


def check_some_node_fits(ray, gpu_share: float, wait_s: float) -> None:
    """Refuse, within `wait_s`, a task that no live node of the cluster has the resources for (1 CPU
    and `gpu_share` of a GPU): Ray would keep it pending forever, without a word."""
    deadline = time.monotonic() + wait_s
    while True:
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        if any(node.get("CPU", 0) >= 1 and node.get("GPU", 0) >= gpu_share for node in nodes):
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)
    offered = "; ".join(f"CPU {node.get('CPU', 0):g}, GPU {node.get('GPU', 0):g}" for node in nodes) or "nothing"
    gpu = f" and {gpu_share:g} of a GPU (--gpu-share {gpu_share:g})" if gpu_share else ""
    waited = f" (after waiting {wait_s:g} s for a node to join)" if wait_s else ""
    raise EngineError(
        f"no node of the Ray cluster can run a job: each asks for 1 CPU{gpu}, and its live nodes offer "
        f"{offered}{waited}. Add such a node" + (", or leave out --gpu-share for CPU jobs" if gpu_share else "")
    )


def ray_units(jobs: list[Job], settings: EngineSettings) -> list[list[Job]]:
    """What each Ray task trains: on a GPU share a stack of a task's seeds (one vmapped model
    uses a GPU better than several processes of one seed), on CPUs one job, pinned to its own
    core as the local pool runs it."""
    pending = [job for job in jobs if not is_done(job)]
    return group_into_stacks(pending, settings.stack_size) if settings.gpu_share else [[job] for job in pending]


def describe(stack: list[Job]) -> str:
    """ "UR seed 0", or "UR seeds 0, 1, 2" for a stack."""
    seeds = ", ".join(str(job.seed) for job in stack)
    return f"{stack[0].task_code} seed{'s' if len(stack) > 1 else ''} {seeds}"


def _outcome(ray, ref, stack: list[Job]) -> dict:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as error:  # retries exhausted on lost nodes, or the task could not run
        raise WorkerError(
            f"the Ray task for {describe(stack)} failed ({type(error).__name__}); its "
            f"log:\n{_tail(stack[0].files.log_file)}\n{error}"
        ) from None
