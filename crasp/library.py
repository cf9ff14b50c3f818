"""The example programs that ship with the package (crasp/programs/*.crasp), and program files."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from crasp.program import CraspProgramError, Program
from crasp.source import ProgramSource
from crasp.syntax import read_program_file


def example_names() -> list[str]:
    return sorted(
        p.name[: -len(".crasp")] for p in resources.files("crasp.programs").iterdir() if p.name.endswith(".crasp")
    )


def load_source(name_or_path: str) -> ProgramSource:
    """A shipped example by name (`majority`), or a program file by path, read and checked."""
    if Path(name_or_path).exists():
        return ProgramSource.read(read_program_file(name_or_path), str(name_or_path))
    if name_or_path in example_names():
        text = resources.files("crasp.programs").joinpath(f"{name_or_path}.crasp").read_text()
        return ProgramSource.read(text, f"{name_or_path}.crasp")
    raise CraspProgramError(
        f"no program file {name_or_path!r} (expected a .crasp file), and no shipped example "
        f"of that name; examples: {', '.join(example_names())}"
    )


def load_program(name_or_path: str) -> Program:
    """The program of `load_source`; a generic one over only the symbols it lists."""
    return load_source(name_or_path).program()
