"""The command line, checked against golden files (program in, trace out) and on bad input."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.__main__ import main
from crasp.approximations import last_within_window
from crasp.check import agreement_by_length
from crasp.library import example_names, load_program
from crasp.nexttoken import check_teacher_forced, encode, generate
from crasp.syntax import parse
from crasp.tasks import get_task

GOLDEN = Path(__file__).parent / "golden"
TRACES = {
    "unique_copy": "<bos> c a f b <sep> c a f b <eos>",
    "previous_token": "c a b a b",
    "majority": "<bos> c a c b <sep> c <eos>",
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_trace_matches_the_golden_file(name, capsys):
    assert main(["run", name, "--input", TRACES[name]]) == 0
    assert capsys.readouterr().out == (GOLDEN / f"{name}.trace").read_text()


def test_fragment_report_matches_the_golden_file(capsys):
    assert main(["fragment"]) == 0
    assert capsys.readouterr().out == (GOLDEN / "fragment.txt").read_text()


def test_shipped_examples_round_trip_through_the_printer():
    for name in example_names():
        program = load_program(name)
        assert parse(str(program)) == program


def test_bad_program_file_prints_the_located_error(tmp_path, capsys):
    bad = tmp_path / "bad.crasp"
    bad.write_text('alphabet: a b\naccept: top\ntop := Q("a") andd Q("b")\n')
    assert main(["run", str(bad), "--input", "a b"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:15: unexpected `andd` after a complete expression" in err
    assert main(["run", "no_such_program", "--input", "a"]) == 2
    assert "examples: majority, previous_token, unique_copy" in capsys.readouterr().err


@settings(max_examples=30, deadline=None)
@given(st.permutations("abcdefgh"), st.integers(1, 8))
def test_teacher_forced_check_agrees_with_generation(letters, length):
    program = load_program("unique_copy")
    source = list(letters[:length])
    prompt = ["<bos>", *source, "<sep>"]
    generated = generate(program, prompt, max_new_tokens=length + 2)
    assert generated == source + ["<eos>"]
    full = prompt + generated
    wrong = full.copy()
    wrong[-2] = "<eos>" if length > 1 else wrong[-2]
    result = check_teacher_forced(
        program, encode(program, [full, wrong]), np.array([len(prompt)] * 2), np.array([len(full)] * 2)
    )
    assert result.correct[0] and result.correct[1] == (length == 1)


ACCEPT_A = 'alphabet: a b\naccept: top\ntop := Q("a")\n'


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_unreadable_program_files_are_one_line_errors_naming_the_file(tmp_path, capsys):
    binary = tmp_path / "binary.crasp"
    binary.write_bytes(b"alphabet: a b\n\x00\xff\xfe")
    assert main(["run", str(binary), "--input", "a"]) == 2
    assert (
        f"{binary}:2:2: byte 0xff is not UTF-8 (is this a binary file?); expected a C-RASP program: "
        "a UTF-8 text file (.crasp)" in _one_line_error(capsys)
    )
    assert main(["run", str(tmp_path), "--input", "a"]) == 2
    assert f"cannot read program file {tmp_path}: Is a directory; expected a C-RASP program" in _one_line_error(capsys)
    missing = tmp_path / "missing.crasp"
    assert main(["run", str(missing), "--input", "a"]) == 2
    assert f"no program file '{missing}' (expected a .crasp file)" in _one_line_error(capsys)


def test_byte_order_mark_and_windows_line_endings_are_accepted(tmp_path, capsys):
    program = tmp_path / "windows.crasp"
    program.write_bytes(b"\xef\xbb\xbf" + ACCEPT_A.replace("\n", "\r\n").encode())
    assert main(["run", str(program), "--input", "b a"]) == 0
    assert capsys.readouterr().out.endswith("accepted (top at the last position): yes\n")


@pytest.mark.parametrize("given", ["", "   "])
def test_empty_input_is_an_error(tmp_path, capsys, given):
    program = tmp_path / "accept.crasp"
    program.write_text(ACCEPT_A)
    assert main(["run", str(program), "--input", given]) == 2
    assert (
        "the input is empty: a trace needs at least one symbol, separated by spaces, of the program's "
        "alphabet (a b)" in _one_line_error(capsys)
    )


def test_agreement_of_a_witness_is_complete_and_of_a_window_program_is_what_the_library_measures(capsys):
    solution = str(Path(__file__).parent / "exercises" / "10-unique-copy-backward.crasp")
    assert main(["agreement", "UB", "--program", solution, "--lengths", "5", "40", "--samples", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{solution} (C-RASP[])"
    assert lines[3:] == ["     5 | 100.0%", "    40 | 100.0%"]
    assert (
        main(["agreement", "NLLast", "--window", "4", "--lengths", "12", "30", "--samples", "200", "--seed", "3"]) == 0
    )
    printed = [row.split("|")[1].strip() for row in capsys.readouterr().out.splitlines()[3:]]
    task = get_task("NLLast")
    expected = agreement_by_length(task, last_within_window("left", 4)(task.symbols), [12, 30], 200, seed=3)
    assert printed == [f"{a:.1%}" for a in expected.values()] and max(expected.values()) < 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["agreement", "UF", "--window", "3"], "window programs exist for NLLast and NRLast"),
        (["agreement", "NRLast"], "give either --program FILE or --window W"),
        (["agreement", "NRLast", "--window", "1"], "window must be an integer from 2 to 16384"),
        (["agreement", "Dyck1", "--window", "3"], "is a language"),
        (["agreement", "NRLast", "--window", "3", "--lengths", "1"], "accepted lengths"),
    ],
)
def test_agreement_refuses_what_it_cannot_measure_and_says_why(argv, message, capsys):
    assert main(argv) == 2
    printed = capsys.readouterr()
    assert message in printed.err and printed.out == ""


# Output files and sizes a command refuses before it computes anything: the folder, the extension,
# a picture too wide to draw, a window longer than every context measured, a negative length or seed.
LONG_INPUT = " ".join(["a"] * 301)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["run", "majority", "--input", "a b", "--plot", "{tmp}/missing/trace.png"],
            "--plot {tmp}/missing/trace.png: the folder {tmp}/missing does not exist",
        ),
        (
            ["run", "majority", "--input", "a b", "--plot", "{tmp}/trace.xyz"],
            "the extension .xyz is not a format written here; accepted extensions: .png, .pdf, .svg",
        ),
        (["run", "majority", "--input", "a b", "--plot", "{tmp}"], "--plot {tmp}: is a folder"),
        (
            ["run", "majority", "--input", LONG_INPUT, "--plot", "{tmp}/trace.png"],
            "the input has 301 positions, and a picture shows at most 300",
        ),
        (["search", "UR", "--save", "{tmp}/missing/ur.crasp"], "--save {tmp}/missing/ur.crasp: the folder"),
        (
            ["agreement", "NLLast", "--window", "100000000"],
            "--window 100000000: longer than the longest of --lengths (150), where it already sees the whole context",
        ),
        (
            ["agreement", "NLLast", "--window", "3", "--lengths", "-5"],
            "cannot sample length=-5: inputs have at least one symbol; accepted lengths",
        ),
        (["agreement", "NLLast", "--window", "3", "--seed", "-1"], "--seed -1: accepted: an integer >= 0"),
    ],
)
def test_what_a_command_cannot_do_is_refused_before_any_work(argv, message, tmp_path, capsys):
    assert main([arg.format(tmp=tmp_path) for arg in argv]) == 2
    assert message.format(tmp=tmp_path) in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_plot_of_a_short_input_is_written(tmp_path, capsys):
    assert main(["run", "majority", "--input", "<bos> c a c b <sep>", "--plot", str(tmp_path / "trace.svg")]) == 0
    assert capsys.readouterr().out.endswith(f"picture: {tmp_path / 'trace.svg'}\n")
    assert (tmp_path / "trace.svg").read_text().startswith("<?xml")


# Modules no command but the lab's own may import: crasp is numpy alone, and jax costs seconds to load.
HEAVY = {"jax", "flax", "crasplab"}
RUN_AND_LIST_IMPORTS = """
import sys
from crasp.__main__ import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted({name.split(".")[0] for name in sys.modules} & %r))
"""


def command_in_a_fresh_process(argv: list[str]) -> tuple[str, list[str]]:
    """What `python -m crasp ARGV` prints, and which of HEAVY it imported."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_IMPORTS % (HEAVY,), *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *printed, imported = done.stdout.splitlines()
    return "\n".join(printed), eval(imported)


@pytest.mark.parametrize("argv", [["--help"], ["fragment"], ["run", "majority", "--input", "a b"]])
def test_a_command_of_crasp_imports_nothing_of_the_lab(argv):
    printed, imported = command_in_a_fresh_process(argv)
    assert imported == []
    if argv == ["--help"]:  # the lab's command is listed all the same
        assert "python -m crasp compile --help" in " ".join(printed.split())


def test_the_lab_command_is_loaded_when_it_is_the_command():
    printed, imported = command_in_a_fresh_process(["compile", "--help"])
    assert "--pe {ape,rope,nope}" in printed and "crasplab" in imported


def test_output_into_a_closed_pipe_ends_without_a_traceback():
    """`python -m crasp ... | head`: the reader goes away before the command has printed everything."""
    process = subprocess.Popen(
        [sys.executable, "-m", "crasp", "fragment"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # before the interpreter has even started: every write meets a closed pipe
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert error == ""
