"""The command line, checked against golden files (program in, trace out) and on bad input."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.__main__ import main
from crasp.library import example_names, load_program
from crasp.nexttoken import check_teacher_forced, encode, generate
from crasp.syntax import parse

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
    bad.write_text("alphabet: a b\naccept: top\ntop := Q(\"a\") andd Q(\"b\")\n")
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
    result = check_teacher_forced(program, encode(program, [full, wrong]), np.array([len(prompt)] * 2),
                                  np.array([len(full)] * 2))
    assert result.correct[0] and result.correct[1] == (length == 1)
