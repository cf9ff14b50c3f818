"""`python -m crasp compile PROGRAM --task LANGUAGE`: the accepted Boolean at the last position
scored against membership, beside the interpreter, on crasp check's strings of each length."""

from crasp.__main__ import main

ENDS_WITH_B = 'alphabet: a b c\naccept: last_b\nlast_b := Q("b")\n'


def scores(capsys, program: str, tmp_path) -> list[tuple[int, int, int, int]]:
    """(length, strings, compiled right, interpreter right) per printed row."""
    out = tmp_path / "out"
    code = main(
        ["compile", program, "--pe", "ape", "--task", "EndsWithAB", "--lengths", "2", "7", "40"]
        + ["--samples", "30", "--max-length", "64", "--out", str(out)]
    )
    assert code == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.count("|") == 4]
    assert not (out / "config.json").exists()  # a language has no length_gen job folder
    return [tuple(int(cell) for cell in row[:4]) for row in rows[1:]]


def test_the_right_program_is_right_on_every_string(capsys, tmp_path):
    assert scores(capsys, "previous_token", tmp_path) == [(n, 30, 30, 30) for n in (2, 7, 40)]


def test_a_wrong_program_is_scored_against_membership_not_against_the_interpreter(capsys, tmp_path):
    program = tmp_path / "ends_with_b.crasp"
    program.write_text(ENDS_WITH_B)
    # "ends in b" accepts the strings that end in "c b" or "b b" too: wrong on some, the same ones.
    for length, strings, compiled, interpreter in scores(capsys, str(program), tmp_path):
        assert compiled == interpreter < strings, length
