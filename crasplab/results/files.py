"""Atomic files: every write goes to a temporary file in the same folder and is moved into place
with os.replace, so a process killed at any moment leaves either the old file or the new one,
never a torn one. A temporary is named `.<file>.<writer's host>.<writer's pid>.<random>.tmp`, so
that one left by a killed writer (a fine-tuning checkpoint's is over a gigabyte) is recognized and
removed the next time its folder is opened (remove_stale_temporaries). Only a writer on this host
can be known dead, so on a file system shared by several machines another host's temporaries stay.
JSON-lines files are appended to by running jobs; reading keeps complete lines only, so a line
torn by a killed writer is ignored.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

_UMASK = os.umask(0)
os.umask(_UMASK)


class ResultFileError(ValueError):
    """A file of a run folder does not hold what the lab writes there."""


# .<file>.<host>.<pid>.<mkstemp's random part>.tmp (the host name without its dots)
_HOST = socket.gethostname().replace(".", "-")
_TEMPORARY = re.compile(r"\..+\.(?P<host>[^.]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp")
# What a user can fix about a folder: it is read-only, on a read-only file system, or full.
_FOLDER_PROBLEMS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


def cannot_write(path: Path, error: OSError) -> ResultFileError:
    """The error to show for an OSError writing `path`."""
    return ResultFileError(
        f"cannot write {path}: {error.strerror}; make its folder writable (or free space there), or give another --out"
    )


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call `write` on a temporary file next to `path`, then move it into place. A read-only or
    full folder is a ResultFileError naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_HOST}.{os.getpid()}.", suffix=".tmp")
    except OSError as error:
        if error.errno in _FOLDER_PROBLEMS:
            raise cannot_write(path, error) from None
        raise
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes the file private; results are meant to be shared
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the temporaries that writers killed mid-write left anywhere under `folder` (those
    whose process, on this host, no longer runs); return them. Call it while holding the folder's lock, so that
    no live writer of another run shares the folder."""
    stale = []
    for path in Path(folder).rglob(".*.tmp"):
        match = _TEMPORARY.fullmatch(path.name)
        if match and match["host"] == _HOST and path.is_file() and not _is_running(int(match["pid"])):
            path.unlink(missing_ok=True)
            stale.append(path)
    return stale


def _is_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_json(path: Path, value) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(value, indent=2, sort_keys=True) + "\n").encode()))


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_jsonl(path: Path, records: list[dict]) -> None:
    atomic_write(path, lambda f: f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()))


def append_jsonl(path: Path, record: dict) -> None:
    """One record at the end of a JSON-lines file (a torn last line is ignored by read_jsonl)."""
    try:
        with open(path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError as error:
        if error.errno in _FOLDER_PROBLEMS:
            raise cannot_write(path, error) from None
        raise


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file ([] when it does not exist); complete lines only."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(keepends=True), start=1):
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise ResultFileError(
                f"{path}:{number}: not a JSON record ({error.msg}); expected one JSON object "
                "per line as the lab writes them. Delete or repair that line"
            ) from None
    return records


def write_summary_and_report(run_dir: Path, summary: dict, markdown: str) -> None:
    """A report's two text files: summary.json (every number) and report.md (the same, for people)."""
    write_json(Path(run_dir) / "summary.json", summary)
    write_text(Path(run_dir) / "report.md", markdown)


def rebuild_report(
    run_dir: Path,
    summarize: Callable[[Path], dict],
    markdown: Callable[[dict], str],
    draw: Callable[[dict, Path], None],
    figure_file: str,
) -> dict:
    """Rebuild a run folder's summary.json, report.md and figure from its own files; return the summary."""
    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    write_summary_and_report(run_dir, summary, markdown(summary))
    draw(summary, run_dir / figure_file)
    return summary
