"""Atomic files: every write goes to a temporary file in the same folder and is moved into place
with os.replace, so a process killed at any moment leaves either the old file or the new one,
never a torn one. A temporary is named `.<file>.<writer's host>.<writer's pid>.<random>.tmp`, so
that one left by a killed writer (a fine-tuning checkpoint's is over a gigabyte) is recognized and
removed the next time its folder is opened (remove_stale_temporaries). Only a writer on this host
can be known dead, so on a file system shared by several machines another host's temporaries stay.
JSON-lines files are appended to by running jobs; a line torn by a killed writer is skipped
when read, and said so, and the next append starts a line of its own after it. A JSON-lines file
that nothing appends to any more (a finished job's metrics.jsonl, the logs of a kept run) is stored
gzip-compressed as `<name>.gz` (compress_jsonl; docs/evidence.md), and read_jsonl reads it wherever
the plain file is absent: the plain file is the one written to, so it wins while both exist (a kill
between writing the .gz and removing the plain file), and an append or a rewrite first takes the
records back out of the .gz, so none is lost or read twice. Every JSON file
the lab reads back goes through a reader that names the file, what is wrong with it and what to
do (read_json_object, read_jsonl; the formats' own readers check their fields with file_problem).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import socket
import sys
import tempfile
import zlib
from pathlib import Path
from typing import BinaryIO, Callable

from crasplab.errors import LabError

_UMASK = os.umask(0)
os.umask(_UMASK)


class ResultFileError(LabError, ValueError):
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
    full folder (also one that fills up during the write) is a ResultFileError naming the file."""
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
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.errno in _FOLDER_PROBLEMS:  # the disk filled up mid-write
            raise cannot_write(path, error) from None
        raise


def is_temporary(path: Path) -> bool:
    """Whether `path` is a temporary of an atomic write (a live writer's or a killed one's)."""
    return _TEMPORARY.fullmatch(Path(path).name) is not None


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
    """The records as the whole of a JSON-lines file; a compressed copy of what it held before is removed."""
    atomic_write(path, lambda f: f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()))
    compressed(path).unlink(missing_ok=True)


def append_jsonl(path: Path, record: dict) -> None:
    """One record at the end of a JSON-lines file. After a line torn by a killed writer (the file
    does not end with a newline) the record starts a line of its own, so that the torn line stays
    alone and read_jsonl reports it as torn instead of the two being read as one bad record. A file
    stored compressed is first made plain again, so that the record follows the ones it holds."""
    path = Path(path)
    if not path.exists() and compressed(path).exists():
        data = _read_compressed(compressed(path), "restore it from a copy, or delete it to start the log afresh")
        atomic_write(path, lambda f: f.write(data))
        compressed(path).unlink()
    try:
        with open(path, "a+b") as f:
            torn = f.tell() > 0 and f.seek(-1, os.SEEK_END) >= 0 and f.read(1) != b"\n"
            f.write((("\n" if torn else "") + json.dumps(record, sort_keys=True) + "\n").encode())
    except OSError as error:
        if error.errno in _FOLDER_PROBLEMS:
            raise cannot_write(path, error) from None
        raise


def compressed(path: Path) -> Path:
    """Where the JSON-lines file `path` is stored once compressed: `<path>.gz`."""
    path = Path(path)
    return path.with_name(path.name + ".gz")


def compress_jsonl(path: Path) -> None:
    """Store a JSON-lines file that nothing appends to any more compressed, as `<path>.gz`: its
    bytes as they are (a torn line included), gzipped with no time or name in the header, so that
    the same file always gives the same bytes; written atomically, then the plain file removed. A
    kill between the two leaves both, holding the same records: the plain file is read, and the
    next compress_jsonl finishes. Nothing happens when there is no plain file."""
    path = Path(path)
    if path.exists():
        data = path.read_bytes()
        atomic_write(compressed(path), lambda f: f.write(gzip.compress(data, compresslevel=9, mtime=0)))
        path.unlink()


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file, or of its compressed copy where the plain file is absent
    ([] when neither exists). A torn line (what a writer killed mid-line leaves: the start of a
    record, cut before its closing brace) is skipped, and said so on stderr once per file and line;
    any other line that is not a JSON object is a ResultFileError naming the file and the line."""
    path = Path(path)
    if path.exists():
        text = _read_text(path, "repair or delete it")
    elif compressed(path).exists():
        path, fix = compressed(path), "restore it from a copy, or delete it"
        text = _decoded(path, _read_compressed(path, fix), fix)
    else:
        return []
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line)
        except RecursionError:
            raise file_problem(path, f"line {number} is {NESTED_TOO_DEEP}", "delete or repair that line") from None
        except json.JSONDecodeError as error:
            if _is_torn(line, error):
                _report_torn(path, number)
                continue
            raise ResultFileError(
                f"{path}:{number}: not a JSON record ({error.msg}); expected one JSON object "
                "per line as the lab writes them. Delete or repair that line"
            ) from None
        if not isinstance(record, dict):
            raise ResultFileError(
                f"{path}:{number}: a JSON {type(record).__name__}, not the object the lab writes on each line. "
                "Delete or repair that line"
            )
        records.append(record)
    return records


# What json.loads's RecursionError means in a file: the lab nests its records a few levels deep.
NESTED_TOO_DEEP = "JSON nested deeper than Python's parser follows (the lab's files nest a few levels)"
_reported_torn: set[tuple[Path, int]] = set()
# What a number cut short may end in: the unread rest of the line where its parse stopped.
_NUMBER_START = re.compile(r"-?\d*(\.\d*)?([eE][+-]?\d*)?")


def _is_torn(line: str, error: json.JSONDecodeError) -> bool:
    """Whether a line that does not parse is a record cut short (the lab writes each record as one
    JSON object): its parse ran into the end of the line, where corrupt text goes wrong before it."""
    if not line.startswith("{"):
        return False
    rest = line[error.pos :]
    if error.msg.startswith("Unterminated string"):
        return True
    if error.msg.startswith("Invalid \\uXXXX escape"):  # cut inside an escape: nothing after it closes the string
        return '"' not in rest
    return (
        rest == ""
        or any(literal.startswith(rest) for literal in ("true", "false", "null"))
        or bool(_NUMBER_START.fullmatch(rest))
    )


def _report_torn(path: Path, number: int) -> None:
    if (path.resolve(), number) not in _reported_torn:
        _reported_torn.add((path.resolve(), number))
        print(f"{path}:{number}: a torn line (its writer was stopped mid-line), skipped", file=sys.stderr)


def _read_text(path: Path, fix: str) -> str:
    """The text of a file the lab wrote, or a ResultFileError naming it, what is wrong and `fix`."""
    return _decoded(path, _read_bytes(path, fix), fix)


def _read_bytes(path: Path, fix: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ResultFileError(f"{path} is missing; {fix}") from None
    except OSError as error:
        raise ResultFileError(f"cannot read {path}: {error.strerror}; {fix}") from None


def _decoded(path: Path, data: bytes, fix: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as error:
        raise ResultFileError(
            f"{path} is not text (byte {error.start} is not UTF-8), so not the file the lab wrote; {fix}"
        ) from None


def _read_compressed(path: Path, fix: str) -> bytes:
    """The bytes a compressed JSON-lines file holds, or a ResultFileError: not gzip, or cut short."""
    data = _read_bytes(path, fix)
    try:
        return gzip.decompress(data)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise file_problem(path, f"not a whole gzip stream ({error or 'cut short'})", fix) from None


def read_json_object(path: Path, fix: str, required: tuple[str, ...] = ()) -> dict:
    """The JSON object a file the lab wrote holds, with at least the keys `required`; anything else
    (missing, not text, not JSON, not an object, a key missing) is a ResultFileError that names the
    file, says what is wrong, and then `fix`: what the user can do (rerun what writes it, delete it)."""
    path = Path(path)
    try:
        value = json.loads(_read_text(path, fix))
    except json.JSONDecodeError as error:
        raise ResultFileError(
            f"{path}: not JSON ({error.msg} at line {error.lineno} column {error.colno}), so not the file "
            f"the lab wrote (cut short, or edited); {fix}"
        ) from None
    except RecursionError:
        raise file_problem(path, NESTED_TOO_DEEP, fix) from None
    if not isinstance(value, dict):
        raise file_problem(path, f"a JSON {type(value).__name__} where the lab writes an object", fix)
    if missing := [key for key in required if key not in value]:
        raise file_problem(path, f"no {', '.join(missing)}", fix)
    return value


def file_problem(path: Path, problem: str, fix: str) -> ResultFileError:
    """The error for a file the lab wrote that holds something else: what `problem` it has, and `fix`."""
    return ResultFileError(f"{path}: {problem}, so not the file the lab wrote (edited, or cut short); {fix}")


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
