"""Files the commands write where the user says (a trace picture, a program found by search, a
benchmark's numbers): every such path goes through `check_output_file` before any work is done, so
that a mistyped folder or extension costs nothing, and through `write_output_file`, which writes
in one step. Nothing is replaced without asking: a path that holds something other than a regular
file (a symbolic link, a device, a fifo, a folder) is refused, and an existing file is replaced
only when the command's --overwrite flag says so. Running as root, `crasp search --save
/dev/full` had replaced the device node with a regular file, and --save over a symbolic link had
replaced the link.

The commands that write a file the user names, each with its --overwrite
(tests/test_output_files.py runs every one of them against an existing file, a link and a device):

    python -m crasp search TASK --save FILE
    python -m crasp run PROGRAM --input ... --plot FILE
    python benchmarks/device_throughput.py --json FILE
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from crasp.expr import CraspError

OVERWRITE_FLAG = "--overwrite"
OVERWRITE_HELP = "replace the file the output flag names when it exists (a regular file only)"


class OutputFileError(CraspError):
    """An output path a command cannot write to; the message names the flag and what is accepted."""


def check_output_file(path: str | Path, flag: str, suffixes: tuple[str, ...] = (), overwrite: bool = False) -> Path:
    """`path` as a Path, if a file can be created there (its folder exists, nothing but a regular
    file is there, and that only with `overwrite`) with one of `suffixes` (any suffix if empty)."""
    path = Path(path)
    shown = f"{flag} {path}"
    _check_replaceable(path, shown, overwrite)
    if suffixes and path.suffix.lower() not in suffixes:
        found = (
            f"the extension {path.suffix} is not a format written here"
            if path.suffix
            else "the file name has no extension to choose the format"
        )
        raise OutputFileError(f"{shown}: {found}; accepted extensions: {', '.join(suffixes)}")
    folder = path.parent
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise OutputFileError(f"{shown}: the folder {folder} {problem}; create it first or write elsewhere")
    if not os.access(folder, os.W_OK):
        raise OutputFileError(f"{shown}: the folder {folder} is not writable")
    return path


def _check_replaceable(path: Path, shown: str, overwrite: bool) -> None:
    try:
        mode = os.lstat(path).st_mode  # the link itself, not what it points to
    except FileNotFoundError:
        return
    except OSError as error:
        raise OutputFileError(f"{shown}: cannot look at it ({error.strerror}); write elsewhere") from None
    if stat.S_ISDIR(mode):
        raise OutputFileError(f"{shown}: is a folder; give a file name inside it")
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file (a device, a fifo or a socket)"
        raise OutputFileError(
            f"{shown}: is {kind}; the lab writes only regular files and replaces nothing else: "
            "give the path of a new file"
        )
    if not overwrite:
        raise OutputFileError(f"{shown}: exists; give {OVERWRITE_FLAG} to replace it, or another path")


def write_output_file(path: Path, flag: str, write: Callable[[BinaryIO], object], overwrite: bool = False) -> None:
    """Write a file the user named (checked by check_output_file before the work) in one step,
    checking again right before it replaces anything: the work may have taken minutes."""
    _check_replaceable(Path(path), f"{flag} {path}", overwrite)
    write_in_one_step(Path(path), write)


def write_in_one_step(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary beside `path` and replace it: a kill leaves the old file or the new."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_in_one_step(path: Path, text: str) -> None:
    """write_in_one_step of a text (the lab's own files: search results, the verdict cache)."""
    write_in_one_step(path, lambda file: file.write(text.encode()))
