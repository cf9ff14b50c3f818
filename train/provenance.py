"""What decides a training run's bits, recorded beside its numbers.

The same seed gives the same numbers only on the same kind of machine with the same versions:
XLA picks kernels by instruction set and version, and their last-bit differences grow through
training (the lab has seen losses agree to every printed digit for 200-300 steps, then part at
the 1e-6 level, then diverge). So every process that trains a job appends one line to the job's
`provenance.jsonl`: the lab's commit, the versions of the numeric stack, the device, the CPU
model and its instruction-set flags, and XLA's flags, with the step it started from.

A protocol run (whose jobs a report counts) starts only from a committed checkout
(`require_committed_lab`), so that each job's commit names the code that trained it, and every
stack of its jobs starts only on that same commit (`training_at` and `require_run_commit`): a
worker process started an hour into a run imports the files as they are then, and three of the
five jobs of one run (protocol-clip-ape-ub4, 2026-12-04) were trained so while the code was being
edited, recording "+changes" and three different commits. A machine
that gets the lab's files without its .git folder (a lent GPU: benchmarks/gpu_run.py) learns its
commit from lab-source.json, written in the committed checkout before the files travel: the commit
and a digest of every code file, each checked against the file there. The lab
refuses rather than keeping the diff beside the run: a commit can be checked out and read by
anyone, a kept diff has to be found and applied to the right commit first, and "+changes" in the
provenance of 81 of 190 headline jobs had left open which code trained them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import jax

from crasplab.records.settings import SettingsError
from crasplab.train.environment import environment_variable

PROVENANCE_FILE = "provenance.jsonl"
NUMERIC_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy")
SOURCE = Path(__file__).resolve().parents[1]
# What decides a run's numbers and predictions: the packages, the experiment scripts and the
# install's settings (documentation and kept run folders do not).
LAB_CODE = ("crasp/", "crasplab/", "train/", "models/", "experiments/", "pyproject.toml")


SOURCE_MANIFEST_FILE = "lab-source.json"
# The commit a protocol run started from, in the environment of every process that trains its
# jobs (worker processes inherit it, Ray tasks get it with the workers' environment).
RUN_COMMIT_ENV = "CRASPLAB_RUN_COMMIT"


class UncommittedLabError(SettingsError):
    """A protocol run was asked to start from code that no commit holds (a SettingsError, so that
    the scripts print it as the refusal of a setting, without a traceback)."""


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _git(source: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10)


def _in_checkout(source: Path) -> bool:
    """Whether `source` is the top of a git checkout (not a copy of one inside another)."""
    try:
        top = _git(source, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == Path(source).resolve()


def _manifest_commit(source: Path, besides: Path | None = None) -> str | None:
    """lab-source.json's commit when every code file matches it, else None. It comes before git:
    a copy of the lab can carry a .git older than its files (as the lent GPU machine's did)."""
    manifest = _read_manifest(source)
    if manifest is None or _differing_from_manifest(source, manifest, besides):
        return None
    return manifest["commit"]


def lab_commit(source: Path = SOURCE) -> str | None:
    """lab-source.json's commit where the files match it; else the lab's git commit, with '+changes'
    when its tracked files differ from it; outside a checkout, lab-source.json's commit with
    '+changes'; None without either."""
    if (commit := _manifest_commit(source)) is not None:
        return commit
    if not _in_checkout(source):
        manifest = _read_manifest(source)
        if manifest is None:
            return None
        return manifest["commit"] + ("+changes" if _differing_from_manifest(source, manifest) else "")
    dirty = _git(source, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    return _git(source, "rev-parse", "HEAD").stdout.strip() + ("+changes" if dirty else "")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_source_manifest(source: Path = SOURCE) -> dict:
    """lab-source.json in `source`, a committed checkout: its commit and the digest of every code
    file git tracks, for a copy of the files without .git to know its commit (`lab_commit`)."""
    commit = require_committed_lab(source=source)
    tracked = _git(source, "ls-files", "--", *LAB_CODE).stdout.split("\n")
    manifest = dict(commit=commit, files={name: _digest(source / name) for name in tracked if name})
    (source / SOURCE_MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _read_manifest(source: Path) -> dict | None:
    path = source / SOURCE_MANIFEST_FILE
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        if isinstance(manifest.get("commit"), str) and isinstance(manifest.get("files"), dict):
            return manifest
    except (ValueError, AttributeError):
        pass
    raise UncommittedLabError(
        f"{path}: not the manifest benchmarks/gpu_run.py --prepare writes (a commit and its files' digests); "
        "write it again there"
    )


def _differing_from_manifest(source: Path, manifest: dict, besides: Path | None = None) -> list[str]:
    """The code files that differ from the manifest's: changed, missing, or Python files it lacks."""
    files = manifest["files"]
    present = {
        str(path.relative_to(source))
        for folder in LAB_CODE
        if folder.endswith("/") and (source / folder).is_dir()
        for path in (source / folder).rglob("*.py")
    }
    changed = [
        name for name, digest in files.items() if not (source / name).is_file() or _digest(source / name) != digest
    ]
    changed += sorted(present - set(files))
    outside = Path(besides).resolve() if besides is not None else None
    return [name for name in changed if outside is None or not (source / name).resolve().is_relative_to(outside)]


def uncommitted_lab_files(source: Path = SOURCE, besides: Path | None = None) -> list[str]:
    """The lab's code files (LAB_CODE) that differ from its commit, modified or untracked (a new
    module changes what runs as much as an edited one), leaving out those under `besides` (the
    run folder itself, whose files the run writes). Outside a checkout, the files that differ from
    lab-source.json's; without it either, UncommittedLabError. None of them where every code file
    matches lab-source.json (whatever a .git beside them says)."""
    if _manifest_commit(source, besides) is not None:
        return []
    if not _in_checkout(source) and (manifest := _read_manifest(source)) is not None:
        return _differing_from_manifest(source, manifest, besides)
    try:
        status = _git(source, "status", "--porcelain", "--untracked-files=all", "--", *LAB_CODE)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UncommittedLabError(f"cannot ask git about {source}: {error}") from error
    if status.returncode != 0:
        raise UncommittedLabError(
            f"{source} is not a git checkout ({status.stderr.strip()}): a protocol run records the commit "
            f"that trains its jobs, so it runs from a checkout of the lab, or from a copy of one with the "
            f"{SOURCE_MANIFEST_FILE} that `python benchmarks/gpu_run.py --prepare` writes there"
        )
    top = Path(_git(source, "rev-parse", "--show-toplevel").stdout.strip())
    outside = Path(besides).resolve() if besides is not None else None
    changed = []
    for line in status.stdout.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if outside is None or not (top / path).resolve().is_relative_to(outside):
            changed.append(path)
    return changed


def require_committed_lab(run_dir: Path | None = None, source: Path = SOURCE) -> str:
    """The lab's commit, when no code file differs from it; otherwise UncommittedLabError naming
    the files (changes under `run_dir`, the run's own folder, do not count)."""
    if (commit := _manifest_commit(source, run_dir)) is not None:
        return commit
    changed = uncommitted_lab_files(source, run_dir)
    if changed:
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        raise UncommittedLabError(
            f"a protocol run starts only from committed code, so that its jobs' provenance names the code "
            f"that trained them; {source} has uncommitted changes to {shown}. Commit them (or stash them) "
            "and run again"
        )
    return _git(source, "rev-parse", "HEAD").stdout.strip()


def training_at(commit: str):
    """The jobs trained in this block, here and in the processes it starts, start only on `commit`
    (require_run_commit)."""
    return environment_variable(RUN_COMMIT_ENV, commit)


def require_run_commit(run_dir: Path | None = None, source: Path = SOURCE) -> None:
    """Within `training_at(commit)` (in this process or the one that started it): an
    UncommittedLabError unless the lab's code is still that commit's, so that a job trained now
    is trained by the code its run names. Elsewhere, nothing."""
    expected = os.environ.get(RUN_COMMIT_ENV)
    if expected is None:
        return
    try:
        now = require_committed_lab(run_dir, source)
    except UncommittedLabError as error:
        now = f"uncommitted ({error})"
    if now != expected and not _same_lab_code(expected, now, source):
        raise UncommittedLabError(
            f"this protocol run started at commit {expected}, and the lab's code is now {now}: a job trained "
            f"now would not be trained by the code its run names. Let the run end before changing the code, "
            "or stop it, commit, and run the same command again (finished jobs are kept, unfinished ones "
            "resume at the new commit, which their provenance records)"
        )


def _same_lab_code(commit: str, other: str, source: Path) -> bool:
    """Whether two commits hold the same code files (LAB_CODE): a commit of documents or tests
    made during a run changes nothing its jobs run. False where git cannot tell."""
    try:
        diff = _git(source, "diff", "--quiet", commit, other, "--", *LAB_CODE)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return diff.returncode == 0


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
