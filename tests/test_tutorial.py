"""docs/tutorial.md runs as written: the tutorial is the golden file of its own commands.

Every `python -m crasp` command in it runs here, in a folder holding the programs it tells the
reader to save, and must print exactly what the tutorial shows. After an intended change of
output, regenerate the outputs in place and review the diff:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_tutorial.py            # the crasp commands
    UPDATE_GOLDEN=1 .venv/bin/pytest -m slow tests/test_tutorial.py    # the training run too

The training command (experiments/length_gen.py, minutes on a CPU) runs only with `-m slow`. Its
printed table is deterministic for a seed on one machine, but JAX's floating point may differ on
another CPU, so the slow test compares the task, prediction, verdict and agreement columns
exactly and each accuracy within ACCURACY_TOLERANCE.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.teaching_harness import CRASP_COMMAND, REPOSITORY, console_blocks, program_files, run_crasp, with_outputs

TUTORIAL = REPOSITORY / "docs" / "tutorial.md"
TRAINING_COMMAND = "python experiments/length_gen.py "
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
ACCURACY_TOLERANCE = 0.05
# The line length_gen.py prints to stderr: its run folder and this run's wall time, which varies.
WALL_TIME_LINE = re.compile(r"^\S+: \d+ jobs?, wall time of this invocation [\d.]+ min$")


def _commands(document: str):
    return [command for block in console_blocks(document) for command in block.commands]


def _finish(document: str, outputs: dict[int, str], mismatches: list[str]) -> None:
    if UPDATE:
        TUTORIAL.write_text(with_outputs(document, outputs))
        return
    assert not mismatches, "\n".join(mismatches) + "\n(UPDATE_GOLDEN=1 rewrites the tutorial's outputs)"


def _difference(command, printed: str) -> str:
    diff = difflib.unified_diff(command.output.splitlines(), printed.splitlines(), "tutorial", "printed", lineterm="")
    return f"docs/tutorial.md:{command.line}: $ {command.command}\n" + "\n".join(diff)


def test_every_command_is_one_the_tests_run():
    for command in _commands(TUTORIAL.read_text()):
        assert command.command.startswith((CRASP_COMMAND, TRAINING_COMMAND)), (
            f"docs/tutorial.md:{command.line}: no test runs `{command.command}`"
        )


def test_rewriting_the_outputs_as_they_are_leaves_the_tutorial_unchanged():
    document = TUTORIAL.read_text()
    assert with_outputs(document, {}) == document
    first = _commands(document)[0]
    changed = with_outputs(document, {first.line: "new output\n"})
    pairs = [(c.command, c.output) for c in _commands(document)]
    assert [(c.command, c.output) for c in _commands(changed)] == [(first.command, "new output\n")] + pairs[1:]


def test_every_crasp_command_prints_what_the_tutorial_shows(tmp_path, monkeypatch):
    document = TUTORIAL.read_text()
    for name, text in program_files(document).items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outputs, mismatches = {}, []
    for command in _commands(document):
        if not command.command.startswith(CRASP_COMMAND):
            continue
        status, printed = run_crasp(command.command)
        outputs[command.line] = printed
        if printed != command.output:
            mismatches.append(_difference(command, printed))
        # A check that finds a counterexample exits with 1 (the tutorial says so), all else with 0.
        assert status == (1 if "\npredicts    nothing:" in printed else 0), command.command
        picture = re.search(r"--plot (\S+)", command.command)
        if picture:
            assert (tmp_path / picture.group(1)).read_bytes().startswith(b"\x89PNG")
    _finish(document, outputs, mismatches)


def _table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def _same_cell(shown: str, printed: str) -> bool:
    """Accuracies ("0.996", "1.000 (3-20)") within the tolerance; every other cell exactly."""
    number = re.compile(r"^(\d\.\d+)(.*)$")
    a, b = number.match(shown), number.match(printed)
    if a and b:
        return abs(float(a.group(1)) - float(b.group(1))) <= ACCURACY_TOLERANCE and a.group(2) == b.group(2)
    return shown == printed


@pytest.mark.slow
def test_the_training_run_prints_the_tutorial_table(tmp_path):
    document = TUTORIAL.read_text()
    [command] = [c for c in _commands(document) if c.command.startswith(TRAINING_COMMAND)]
    arguments = shlex.split(command.command)[2:]
    out = arguments.index("--out") + 1
    run_folder, arguments[out] = arguments[out], str(tmp_path / "run")  # fresh: an existing one would resume
    result = subprocess.run(
        [sys.executable, "experiments/length_gen.py", *arguments],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert result.returncode == 0, result.stderr
    [wall_time] = [line for line in result.stderr.splitlines() if WALL_TIME_LINE.match(line)]
    # As a terminal shows it: the stderr line first (length_gen.py prints it before the table).
    printed = f"\n{wall_time.replace(arguments[out], run_folder)}\n\n{result.stdout}"
    shown, got = _table_rows(command.output), _table_rows(result.stdout)
    assert {row[-1] for row in got[1:]} == {"yes", "NO"}, "the run shows one prediction confirmed and one not"
    same = len(shown) == len(got) and all(len(r) == len(s) and all(map(_same_cell, s, r)) for s, r in zip(shown, got))
    agreement = [line for line in result.stdout.splitlines() if line.startswith("agreement")]
    same = same and agreement == [line for line in command.output.splitlines() if line.startswith("agreement")]
    _finish(document, {command.line: printed}, [] if same else [_difference(command, printed)])
