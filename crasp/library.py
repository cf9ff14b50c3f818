"""The example programs that ship with the package (crasp/programs/*.crasp)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from crasp.program import CraspProgramError, Program
from crasp.syntax import parse, parse_file


def example_names() -> list[str]:
    return sorted(p.name[:-len(".crasp")] for p in resources.files("crasp.programs").iterdir()
                  if p.name.endswith(".crasp"))


def load_program(name_or_path: str) -> Program:
    """A shipped example by name (`majority`), or a program file by path."""
    if Path(name_or_path).exists():
        return parse_file(name_or_path)
    if name_or_path in example_names():
        text = resources.files("crasp.programs").joinpath(f"{name_or_path}.crasp").read_text()
        return parse(text, f"{name_or_path}.crasp")
    raise CraspProgramError(f"no program file {name_or_path!r} (expected a .crasp file), and no shipped example "
                            f"of that name; examples: {', '.join(example_names())}")
