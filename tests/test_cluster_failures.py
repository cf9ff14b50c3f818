"""The Ray engine when something dies: a node lost mid-job (the job finishes on another node,
resumed from its checkpoint, equal to an uninterrupted run) and the launcher killed mid-run (no
worker left behind, the folder lock free, a rerun resumes).

A two-node cluster on this machine: two `ray start --block` processes, each in its own session
so that killing a node's process group takes its raylet and workers with it, with
RAY_AUTH_MODE=token exported on every side. Everything started is torn down by process id in a
`finally`; each wait has a deadline."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.tiny import ROOT, comparable, run_worker
from tests.tiny import TINY_MODEL, tiny_config
from crasplab.records.files import write_json
from crasplab.train.engines import PLACEMENTS_FILE
from crasplab.train.loop import Job

ray = pytest.importorskip("ray", reason="the Ray engine needs Ray: pip install -e '.[cluster]'")
psutil = pytest.importorskip("psutil", reason="psutil (a dependency of Ray) lists a node's processes")

DEADLINE_S = 240
# A driver that runs one job folder on the Ray engine: argv[1] the folder, argv[2] the cluster
# address ("" for a private cluster).
DRIVER = """
import sys
from crasplab.train.engines import EngineSettings, run_on_ray
from crasplab.train.runs import read_job
job = read_job(sys.argv[1])  # job.json names no folder: the job's is the one it lies in
run_on_ray([job], EngineSettings(engine="ray", ray_address=sys.argv[2] or None, workers=1), show_progress=False)
"""

NODE_COUNTER = """
import sys, time, ray
ray.init(address=sys.argv[1])
while sum(node["Alive"] for node in ray.nodes()) != int(sys.argv[2]):
    time.sleep(0.5)
"""


def slow_job(folder: Path) -> Job:
    """A job with a checkpoint every 20 steps and 1200 steps in all: long enough to be killed
    between its first checkpoint and its end, with the tens of seconds a killed launcher's
    cluster takes to go down (400 steps, about 10 s on 2 cores, ended first on a quiet machine)."""
    job = Job(
        task_code="UR",
        seed=5,
        model=TINY_MODEL,
        task_overrides=dict(alphabet_size=8),
        out_dir=str(folder),
        train=tiny_config(max_steps=1200, eval_every=100, checkpoint_every=20, log_every=10),
    )
    write_json(folder / "job.json", job.to_dict())
    return job


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The job run start to end by the worker alone: what every interrupted run must equal."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    slow_job(folder)
    assert run_worker(folder).wait(timeout=DEADLINE_S) == 0
    return folder


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {deadline_s} s waiting for {what}")
        time.sleep(every_s)


def token_env() -> dict[str, str]:
    return dict(os.environ, RAY_AUTH_MODE="token")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Nodes:
    """Ray nodes started by this test, each a `ray start --block` process in its own session."""

    def __init__(self):
        self.processes: dict[str, subprocess.Popen] = {}
        self.known_pids: set[int] = set()
        self.temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.address = f"127.0.0.1:{free_port()}"

    def start(self, name: str, cpus: int, head: bool = False) -> None:
        ray_cli = str(Path(sys.executable).with_name("ray"))
        where = (
            [
                "--head",
                "--port",
                self.address.split(":")[1],
                "--temp-dir",
                self.temp_dir,
                "--include-dashboard",
                "false",
            ]
            if head
            else ["--address", self.address]
        )
        self.processes[name] = subprocess.Popen(
            [
                ray_cli,
                "start",
                "--block",
                "--num-cpus",
                str(cpus),
                "--resources",
                json.dumps({name: 1}),
                "--disable-usage-stats",
                *where,
            ],
            env=token_env(),
            start_new_session=True,
            stdout=open(Path(self.temp_dir) / f"{name}.log", "w"),
            stderr=subprocess.STDOUT,
        )

    def tree(self, name: str) -> list:
        """A node's processes: its `ray start`, the raylet, agents and workers."""
        try:
            root = psutil.Process(self.processes[name].pid)
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            found = []
        self.known_pids |= {p.pid for p in found}
        return found

    def running(self, pid: int) -> str:
        """The node whose processes include `pid`."""
        return next(name for name in self.processes if pid in {p.pid for p in self.tree(name)})

    def kill(self, name: str) -> None:
        for process in self.tree(name):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass

    def wait_until_alive(self, count: int) -> None:
        """Ask the cluster (from a child: Ray reads RAY_AUTH_MODE when it is imported) until it
        counts `count` live nodes."""
        subprocess.run(
            [sys.executable, "-c", NODE_COUNTER, self.address, str(count)],
            env=token_env(),
            check=True,
            timeout=DEADLINE_S,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in self.processes:
            self.tree(name)  # remember every process id while the node is whole

    def teardown(self) -> None:
        """Kill, by process id, everything the nodes started (also what had left their tree)."""
        for name in self.processes:
            self.tree(name)
        for pid in self.known_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for process in self.processes.values():
            process.wait(timeout=30)


def worker_processes(folder: Path) -> list:
    """Processes training `folder` (the lab's worker entry point with this folder)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if "crasplab.train.workers" in command and str(folder) in command:
            found.append(process)
    return found


def alive(process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def lock_is_free(folder: Path) -> bool:
    with open(folder / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def start_driver(folder: Path, address: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(folder), address],
        cwd=ROOT,
        env=token_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def placements(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / PLACEMENTS_FILE).read_text().splitlines()]


@pytest.mark.slow
def test_a_job_whose_node_is_lost_finishes_on_another_node_as_if_uninterrupted(tmp_path, uninterrupted):
    folder = tmp_path / "job"
    slow_job(folder)
    nodes, driver = Nodes(), None
    try:
        nodes.start("head", cpus=0, head=True)  # holds the cluster's state; runs no job
        wait_for(lambda: Path(nodes.temp_dir, "session_latest").exists(), "the head node", every_s=0.5)
        nodes.start("first", cpus=1)
        nodes.wait_until_alive(2)
        nodes.start("second", cpus=1)  # one at a time: two nodes joining at once can take the same port
        nodes.wait_until_alive(3)
        driver = start_driver(folder, nodes.address)
        wait_for(lambda: (folder / "checkpoint.npz").exists(), "the job's first checkpoint")
        running = nodes.running(placements(folder)[0]["pid"])
        assert not (folder / "result.json").exists(), "the job ended before its node was killed; make it longer"
        nodes.kill(running)
        assert driver.wait(timeout=DEADLINE_S) == 0, driver.stderr.read()
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        nodes.teardown()
    timeline = placements(folder)
    print(
        "timeline:",
        *(f"{p['event']:5} node {p['node'][:8]} core {p['core']} at {p['time']:.1f}" for p in timeline),
        sep="\n  ",
    )
    starts = [p for p in timeline if p["event"] == "start"]
    assert len(starts) == 2 and starts[0]["node"] != starts[1]["node"], "the job did not move to the other node"
    assert [p["node"] for p in timeline if p["event"] == "end"] == [starts[1]["node"]]
    assert comparable(folder) == comparable(uninterrupted)


@pytest.mark.slow
def test_a_killed_launcher_leaves_no_worker_and_a_rerun_resumes(tmp_path, uninterrupted):
    folder = tmp_path / "job"
    slow_job(folder)
    driver = start_driver(folder)
    cluster = []  # the private cluster the launcher started: killed by pid at the end, whatever happens
    try:
        wait_for(lambda: (folder / "checkpoint.npz").exists(), "the job's first checkpoint")
        assert worker_processes(folder), "no worker process found for the job"
        cluster = psutil.Process(driver.pid).children(recursive=True)
        # The cluster's core dies with its launcher; Ray 2.60 leaves its dashboard and runtime-env
        # agents behind for a while (killed below), which hold no job and no lock.
        core = [
            p
            for p in cluster
            if p.name() in ("gcs_server", "raylet") or p.name().startswith("ray::") and "Agent" not in p.name()
        ]
        driver.kill()  # SIGKILL: the launcher gets no chance to clean up
        driver.wait()
        wait_for(
            lambda: not worker_processes(folder) and lock_is_free(folder),
            "the orphaned worker to exit and free the folder's lock",
            deadline_s=30,
        )
        wait_for(
            lambda: not [p for p in core if alive(p)],
            "the private cluster's raylet, GCS and workers to exit",
            deadline_s=30,
        )
    finally:
        for process in [psutil.Process(driver.pid), *cluster] if driver.poll() is None else cluster:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
    assert not (folder / "result.json").exists(), "the job ended before the launcher was killed; make it longer"
    rerun = start_driver(folder)
    assert rerun.wait(timeout=DEADLINE_S) == 0, rerun.stderr.read()
    assert [p["event"] for p in placements(folder)] == ["start", "start", "end"]
    assert comparable(folder) == comparable(uninterrupted)
