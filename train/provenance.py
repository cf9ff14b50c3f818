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
(40 hex digits) and a digest of every code file, each checked against the file there. Where a
.git is, git alone decides, and a lab-source.json that disagrees with it is an error: a manifest
believed before git let a clone with an edited file and a hand-written manifest naming HEAD
record a clean commit (issue 61). A copy whose .git is older than its files is refused too:
carry the files without .git, or with the checkout's own. The lab
refuses rather than keeping the diff beside the run: a commit can be checked out and read by
anyone, a kept diff has to be found and applied to the right commit first, and "+changes" in the
provenance of 81 of 190 headline jobs had left open which code trained them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import jax

from crasplab.records.files import write_text
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


def _git_state(source: Path, besides: Path | None = None) -> tuple[str, list[str]]:
    """The checkout's HEAD and its code files (LAB_CODE) that differ from it, modified or
    untracked (a new module changes what runs as much as an edited one), leaving out those under
    `besides` (the run folder itself, whose files the run writes)."""
    try:
        head = _git(source, "rev-parse", "HEAD")
        status = _git(source, "status", "--porcelain", "--untracked-files=all", "--", *LAB_CODE)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UncommittedLabError(f"cannot ask git about {source}: {error}") from error
    if head.returncode != 0 or status.returncode != 0:
        raise UncommittedLabError(
            f"git cannot tell the commit of {source} ({(head.stderr or status.stderr).strip()}); a run records "
            "the commit that trains its jobs: commit the lab's code first"
        )
    top = Path(_git(source, "rev-parse", "--show-toplevel").stdout.strip())
    outside = Path(besides).resolve() if besides is not None else None
    changed = []
    for line in status.stdout.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if outside is None or not (top / path).resolve().is_relative_to(outside):
            changed.append(path)
    return head.stdout.strip(), changed


def _checked_checkout(source: Path, besides: Path | None = None) -> tuple[str, list[str]]:
    """_git_state of a checkout, which decides; a lab-source.json beside it must agree (name its
    HEAD, with no code file changed since and every digest equal), else UncommittedLabError: a
    manifest is read only where no .git is, so one that says otherwise is stale or forged."""
    head, changed = _git_state(source, besides)
    manifest = _read_manifest(source)
    if manifest is not None:
        differing = _differing_from_manifest(source, manifest, besides)
        if manifest["commit"] != head or changed or differing:
            state = f"{head} with changes to {_listed(changed)}" if changed else head
            raise UncommittedLabError(
                f"{source / SOURCE_MANIFEST_FILE} names commit {manifest['commit']}"
                + (f" and files that differ here ({_listed(differing)})" if differing else "")
                + f", and git says this checkout is at {state}: git decides where a .git is, so the file is "
                "stale or was not written by `python benchmarks/gpu_run.py --prepare`; delete it (--prepare "
                "writes it anew from a committed checkout)"
            )
    return head, changed


def lab_commit(source: Path = SOURCE) -> str | None:
    """In a checkout, git's commit, with '+changes' when a code file differs from it (a
    lab-source.json that disagrees is an UncommittedLabError); in a copy without .git,
    lab-source.json's commit, with '+changes' when a code file differs from its digest; None
    without either."""
    if _in_checkout(source):
        head, changed = _checked_checkout(source)
        return head + ("+changes" if changed else "")
    manifest = _read_manifest(source)
    if manifest is None:
        return None
    return manifest["commit"] + ("+changes" if _differing_from_manifest(source, manifest) else "")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_source_manifest(source: Path = SOURCE) -> dict:
    """lab-source.json in `source`, a committed checkout (git alone decides: an earlier
    lab-source.json is replaced, not read): its commit and the digest of every code file git
    tracks, for a copy of the files without .git to know its commit (`lab_commit`)."""
    if not _in_checkout(source):
        raise UncommittedLabError(
            f"{source} is not the top of a git checkout; `--prepare` writes {SOURCE_MANIFEST_FILE} in the "
            "committed checkout the files are copied from"
        )
    commit, changed = _git_state(source)
    if changed:
        raise UncommittedLabError(_uncommitted_message(source, changed))
    tracked = _git(source, "ls-files", "--", *LAB_CODE).stdout.split("\n")
    manifest = dict(commit=commit, files={name: _digest(source / name) for name in tracked if name})
    write_text(source / SOURCE_MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return manifest


_COMMIT = re.compile(r"[0-9a-f]{40}")


def _read_manifest(source: Path) -> dict | None:
    path = source / SOURCE_MANIFEST_FILE
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        files = manifest.get("files")
        if (
            isinstance(manifest.get("commit"), str)
            and _COMMIT.fullmatch(manifest["commit"])
            and isinstance(files, dict)
            and all(isinstance(digest, str) for digest in files.values())
        ):
            return manifest
    except (ValueError, AttributeError, RecursionError):
        pass
    raise UncommittedLabError(
        f"{path}: not the manifest benchmarks/gpu_run.py --prepare writes (a commit of 40 hex digits and its "
        "files' digests); write it again there"
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
    """The lab's code files (LAB_CODE) that differ from its commit, modified or untracked, leaving
    out those under `besides` (the run folder itself, whose files the run writes): in a checkout
    git's answer (a lab-source.json that disagrees is an UncommittedLabError), in a copy without
    .git the files that differ from lab-source.json's digests; without either, UncommittedLabError."""
    if _in_checkout(source):
        return _checked_checkout(source, besides)[1]
    manifest = _read_manifest(source)
    if manifest is None:
        raise UncommittedLabError(
            f"{source} is not a git checkout: a protocol run records the commit that trains its jobs, so it runs "
            f"from a checkout of the lab, or from a copy of one with the {SOURCE_MANIFEST_FILE} that "
            "`python benchmarks/gpu_run.py --prepare` writes there"
        )
    return _differing_from_manifest(source, manifest, besides)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _uncommitted_message(source: Path, changed: list[str]) -> str:
    return (
        f"a protocol run starts only from committed code, so that its jobs' provenance names the code "
        f"that trained them; {source} has uncommitted changes to {_listed(changed)}. Commit them (or stash them) "
        "and run again"
    )


def require_committed_lab(run_dir: Path | None = None, source: Path = SOURCE) -> str:
    """The lab's commit, when no code file differs from it; otherwise UncommittedLabError naming
    the files (changes under `run_dir`, the run's own folder, do not count)."""
    changed = uncommitted_lab_files(source, run_dir)
    if changed:
        raise UncommittedLabError(_uncommitted_message(source, changed))
    if _in_checkout(source):
        return _git(source, "rev-parse", "HEAD").stdout.strip()
    return _read_manifest(source)["commit"]


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
