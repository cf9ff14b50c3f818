"""Files the commands write (a trace picture, a program found by search): checked before any work
is done, so that a mistyped folder or extension costs nothing, and written in one step."""

from __future__ import annotations

import os
from pathlib import Path

from crasp.expr import CraspError


class OutputFileError(CraspError):
    """An output path a command cannot write to; the message names the flag and what is accepted."""


def check_output_file(path: str | Path, flag: str, suffixes: tuple[str, ...] = ()) -> Path:
    """`path` as a Path, if a file can be created there (its folder exists, it is no folder) with
    one of `suffixes` (any suffix if empty)."""
    path = Path(path)
    shown = f"{flag} {path}"
    if path.is_dir():
        raise OutputFileError(f"{shown}: is a folder; give a file name inside it")
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


def write_text_in_one_step(path: Path, text: str) -> None:
    """Write through a temporary beside `path` and replace it: a kill leaves the old file or the new."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
