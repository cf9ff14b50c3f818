"""Atomic files: every write goes to a temporary file in the same folder and is moved into place
with os.replace, so a process killed at any moment leaves either the old file or the new one,
never a torn one. JSON-lines files are appended to by running jobs; reading keeps complete lines
only, so a line torn by a killed writer is ignored.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

_UMASK = os.umask(0)
os.umask(_UMASK)


class ResultFileError(ValueError):
    """A file of a run folder does not hold what the lab writes there."""


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call `write` on a temporary file next to `path`, then move it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def write_json(path: Path, value) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(value, indent=2, sort_keys=True) + "\n").encode()))


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_jsonl(path: Path, records: list[dict]) -> None:
    atomic_write(path, lambda f: f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()))


def append_jsonl(path: Path, record: dict) -> None:
    """One record at the end of a JSON-lines file (a torn last line is ignored by read_jsonl)."""
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


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
            raise ResultFileError(f"{path}:{number}: not a JSON record ({error.msg}); expected one JSON object "
                                  "per line as the lab writes them. Delete or repair that line") from None
    return records


def write_summary_and_report(run_dir: Path, summary: dict, markdown: str) -> None:
    """A report's two text files: summary.json (every number) and report.md (the same, for people)."""
    write_json(Path(run_dir) / "summary.json", summary)
    write_text(Path(run_dir) / "report.md", markdown)


def rebuild_report(run_dir: Path, summarize: Callable[[Path], dict], markdown: Callable[[dict], str],
                   draw: Callable[[dict, Path], None], figure_file: str) -> dict:
    """Rebuild a run folder's summary.json, report.md and figure from its own files; return the summary."""
    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    write_summary_and_report(run_dir, summary, markdown(summary))
    draw(summary, run_dir / figure_file)
    return summary
