"""Time a benchmark as a CPU training worker runs: in its own process, one XLA thread, pinned to
one core (crasplab.train.workers explains why the lab trains that way on a CPU).

The benchmarks in this folder import it as a sibling module (they run as scripts, so this
folder is on sys.path). The `--core` option it adds is the child's: users never pass it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Callable

import jax

from crasplab.train.workers import available_cores, worker_env


def add_core_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)


def pin_to_core(core: int | None) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})


def measure_as_a_worker(script: str, core: int | None, measure: Callable[[], None]) -> None:
    """Call `measure` here when on an accelerator or already in the pinned child; otherwise rerun
    `script` with this command line in a child that runs as a training worker does."""
    pin_to_core(core)
    if jax.default_backend() != "cpu" or core is not None:
        measure()
        return
    command = [sys.executable, script, "--core", str(available_cores()[-1]), *sys.argv[1:]]
    subprocess.run(command, env=worker_env(), check=True)
