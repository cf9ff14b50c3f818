"""Reading the commands out of docs/tutorial.md and docs/exercises/, and running them as a reader would.

Conventions of those documents (the tests fail on a block that breaks them):
- a ```console block holds commands, each on a line starting with `$ `, each followed by its
  printed output (stdout and stderr, as a terminal shows them) up to the next `$ ` line;
- a ```crasp block is a program the reader saves: the paragraph before it ends with its file
  name in backquotes and a colon, "... save it as `ur.crasp`:".
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from crasp.__main__ import main

REPOSITORY = Path(__file__).resolve().parent.parent
CRASP_COMMAND = "python -m crasp "
_BLOCK = re.compile(r"^```(?P<kind>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_FILE_NAME = re.compile(r"`([^`]+\.crasp)`:\s*$")


@dataclass(frozen=True)
class Command:
    command: str  # without the `$ `
    output: str  # as printed, ending with a newline
    line: int  # of the document, for messages


@dataclass(frozen=True)
class ConsoleBlock:
    start: int  # offsets of the block's body in the document
    end: int
    commands: list[Command]


def console_blocks(document: str) -> list[ConsoleBlock]:
    blocks = []
    for match in _BLOCK.finditer(document):
        if match.group("kind") != "console":
            continue
        first_line = document.count("\n", 0, match.start("body")) + 1
        commands: list[Command] = []
        for offset, line in enumerate(match.group("body").splitlines(keepends=True)):
            if line.startswith("$ "):
                commands.append(Command(line[2:].rstrip("\n"), "", first_line + offset))
            elif commands:
                last = commands[-1]
                commands[-1] = Command(last.command, last.output + line, last.line)
            else:
                raise AssertionError(f"line {first_line + offset}: a console block starts with `$ command`")
        blocks.append(ConsoleBlock(match.start("body"), match.end("body"), commands))
    return blocks


def program_files(document: str) -> dict[str, str]:
    """The ```crasp blocks, by the file name the paragraph before each gives."""
    files = {}
    for match in _BLOCK.finditer(document):
        if match.group("kind") != "crasp":
            continue
        before = document[: match.start()].rstrip("\n").splitlines()[-1]
        name = _FILE_NAME.search(before)
        line = document.count("\n", 0, match.start()) + 1
        assert name, f"line {line}: the paragraph before a ```crasp block ends with its file name: `NAME.crasp`:"
        assert name.group(1) not in files, f"line {line}: {name.group(1)} is shown twice"
        files[name.group(1)] = match.group("body")
    return files


WITNESS_PROGRESS = "verifying a witness of "


def run_crasp(command: str) -> tuple[int, str]:
    """`python -m crasp ...` in this process: its exit status and what it printed (stdout and
    stderr together, in order, as on a terminal)."""
    assert command.startswith(CRASP_COMMAND), command
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            status = main(shlex.split(command[len(CRASP_COMMAND) :]))
        except SystemExit as exit_:  # argparse's errors
            status = exit_.code
    # A cold verdict cache names each witness it verifies on stderr; a warm one prints nothing, so
    # what a document shows must not depend on which ran before it.
    lines = printed.getvalue().splitlines(keepends=True)
    return status, "".join(line for line in lines if not line.startswith(WITNESS_PROGRESS))


def with_outputs(document: str, outputs: dict[int, str]) -> str:
    """The document with the output of the command on each given line replaced."""
    pieces, at = [], 0
    for block in console_blocks(document):
        pieces.append(document[at : block.start])
        pieces.append("".join(f"$ {c.command}\n{outputs.get(c.line, c.output)}" for c in block.commands))
        at = block.end
    return "".join(pieces) + document[at:]
