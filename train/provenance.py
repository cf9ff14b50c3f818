"""What decides a training run's bits, recorded beside its numbers.

The same seed gives the same numbers only on the same kind of machine with the same versions:
XLA picks kernels by instruction set and version, and their last-bit differences grow through
training (the lab has seen losses agree to every printed digit for 200-300 steps, then part at
the 1e-6 level, then diverge). So every process that trains a job appends one line to the job's
`provenance.jsonl`: the lab's commit, the versions of the numeric stack, the device, the CPU
model and its instruction-set flags, and XLA's flags, with the step it started from.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import jax

PROVENANCE_FILE = "provenance.jsonl"
NUMERIC_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy")
SOURCE = Path(__file__).resolve().parents[1]


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def lab_commit() -> str | None:
    """The lab's git commit, with '+changes' when its tracked files differ from it; None outside a checkout."""

    def git(*args):
        return subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if dirty else "")


def cpu_description(cpuinfo: str) -> dict:
    """The CPU model and instruction-set flags from the text of /proc/cpuinfo (first processor)."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = sorted(fields.get("flags", "").split())
    return dict(
        model=fields.get("model name"),
        flags_sha256=hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16],
        flags=flags,
    )


def provenance() -> dict:
    cpuinfo = Path("/proc/cpuinfo")
    device = jax.devices()[0]
    return dict(
        lab_commit=lab_commit(),
        python=platform.python_version(),
        packages={name: _package_version(name) for name in NUMERIC_PACKAGES},
        backend=jax.default_backend(),
        device_kind=device.device_kind,
        device_count=jax.device_count(),
        machine=platform.machine(),
        system=f"{platform.system()} {platform.release()}",
        cpu=cpu_description(cpuinfo.read_text()) if cpuinfo.exists() else dict(model=platform.processor()),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
    )


def bits_key(record: dict) -> tuple:
    """What must be equal for two runs of the same seed to give the same numbers."""
    return (
        record["packages"].get("jax"),
        record["packages"].get("jaxlib"),
        record["backend"],
        record["device_kind"],
        record["device_count"],
        record["cpu"].get("model"),
        record["cpu"].get("flags_sha256"),
        record["xla_flags"],
    )
