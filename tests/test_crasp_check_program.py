"""`crasp check NAME --program FILE` and what it rests on: alphabet-generic programs, languages,
shortest counterexamples, and the trace as a picture."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.__main__ import main
from crasp.check import check_language, check_program, program_for
from crasp.evaluate import evaluate
from crasp.expr import BOOL
from crasp.languages import LANGUAGES
from crasp.source import ProgramSource
from crasp.syntax import CraspSyntaxError, parse
from crasp.tasks import PROGRAM_SPECIALS, TASK_CODES, get_task

UNIQUE_RIGHT = """\
alphabet: <bos> <sep> <eos> ...
output: O
prev[t] := #[j <= i, j = i - 1] Q(t) >= 1
n_sep := #[j <= i] Q("<sep>")
steps := #[j <= i] (n_sep >= 1)
right_of[s] := any t: Q(t) and #[j <= i] (Q(s) and prev[t] and n_sep = 0) >= 1
O[s] := steps = 2 and right_of[s]
     or steps = 3 and s = "<eos>"
"""
SORT = """\
alphabet: <bos> <sep> <eos> ...
output: O
n_sep := #[j <= i] Q("<sep>")
input_letter := n_sep = 0 and not Q("<bos>")
present[s] := #[j <= i] (Q(s) and input_letter) >= 1
smaller[s] := #[j <= i] (input_letter and any t: Q(t) and t < s)
emitted := #[j <= i] (n_sep >= 1) - 1
length := #[j <= i] input_letter
answering := n_sep >= 1 and not Q("<eos>")
O[s] := answering and present[s] and smaller[s] = emitted
     or answering and emitted = length and s = "<eos>"
"""


def _source(text: str, name: str = "mine.crasp") -> ProgramSource:
    return ProgramSource.read(text, name)


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


# ---------------------------------------------------------------- alphabet-generic programs
@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["UR", "UL", "Majority", "Sort", "UF"]), st.integers(2, 200))
def test_a_generic_program_reads_the_task_symbols_in_the_task_order(code, size):
    task = get_task(code, alphabet_size=size)
    program = program_for(_source(UNIQUE_RIGHT), task)
    assert program.alphabet == PROGRAM_SPECIALS + task.symbols


@pytest.mark.parametrize("size", [5, 150])
def test_one_generic_program_solves_the_task_over_any_alphabet(size):
    report = check_program(_source(UNIQUE_RIGHT), get_task("UR", alphabet_size=size), samples_per_length=20)
    assert report.verified and report.witness.alphabet[3:] == get_task("UR", alphabet_size=size).symbols


def test_listing_a_symbol_the_task_lacks_is_an_error_at_that_symbol(tmp_path, capsys):
    program = tmp_path / "mine.crasp"
    program.write_text(UNIQUE_RIGHT.replace("<eos> ...", "<eos> a ..."))
    assert main(["check", "UR", "--program", str(program)]) == 2  # UR's 150 symbols are s0 .. s149
    err = _error(capsys)
    assert f"{program}:1:29: the program lists a, which task UR does not have; its symbols: <bos> <sep>" in err


def test_a_fixed_program_must_read_every_task_symbol(capsys):
    assert main(["check", "UF", "--program", "unique_copy"]) == 2  # a..h; UF has 150 symbols
    err = _error(capsys)
    assert (
        "unique_copy.crasp:5:11: the program reads only <bos> <sep> <eos> a b c .. h (11 symbols), but task UF "
        "also has s0 s1 s2 s3 s4 s5 .. s149 (150 symbols); end the alphabet line with `...`" in err
    )


@pytest.mark.parametrize(
    "alphabet, message, column",
    [
        ("a ... b", "`...` ends the alphabet line", 13),
        ("a b a ...", "symbol a is listed twice in the alphabet", 15),
        ("...", "list the symbols the program names before `...`, at least one", 11),
    ],
)
def test_bad_alphabet_lines_are_located(alphabet, message, column):
    with pytest.raises(CraspSyntaxError) as error:
        parse(f"alphabet: {alphabet}\naccept: top\ntop := true\n")
    assert message in error.value.message and (error.value.line, error.value.column) == (1, column)


def test_a_generic_program_quotes_only_the_symbols_it_lists():
    with pytest.raises(CraspSyntaxError) as error:
        parse('alphabet: a ...\naccept: top\ntop := Q("b")\n')
    assert 'symbol "b" is not listed in the alphabet line (a ...)' in error.value.message
    assert (error.value.line, error.value.column) == (3, 10)


def test_run_reads_sorted_input_symbols_or_the_task_order(tmp_path, capsys):
    program = tmp_path / "sort.crasp"
    program.write_text(SORT)
    string = "<bos> s10 s2 <sep>"  # s10 sorts before s2 as text; Sort's alphabet puts s2 first
    assert main(["run", str(program), "--input", string]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "s10"
    assert main(["run", str(program), "--input", string, "--task", "Sort"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "s2"


# ---------------------------------------------------------------- what check accepts
def test_the_program_kind_must_fit_the_task_or_language(tmp_path, capsys):
    language = tmp_path / "language.crasp"
    language.write_text('alphabet: a b\naccept: top\ntop := Q("a")\n')
    assert main(["check", "UR", "--program", str(language)]) == 2
    assert "is an acceptance program (`accept: NAME`" in _error(capsys)
    assert main(["check", "Dyck1", "--program", "unique_copy"]) == 2
    assert "is a next-token program (`output: O`" in _error(capsys)


@pytest.mark.parametrize("names", [[], ["UR", "UL"]])
def test_check_program_takes_exactly_one_name(names, capsys):
    assert main(["check", *names, "--program", "majority"]) == 2
    assert f"--program checks one program against one task or language; got {len(names)} names" in _error(capsys)


def test_checking_the_witnesses_of_a_language_points_to_program(capsys):
    assert main(["check", "Dyck1"]) == 2
    assert (
        "Dyck1 is a language: the lab has no witness for it; check your program against it with "
        "`python -m crasp check Dyck1 --program FILE`" in _error(capsys)
    )


def test_an_unknown_name_lists_tasks_and_languages(capsys):
    assert main(["check", "Dyck", "--program", "majority"]) == 2
    err = _error(capsys)
    assert "no task or language 'Dyck'; tasks: UL, UR, " in err and "; languages: EndsWithAB, ContainsAB, " in err


def test_language_names_are_not_task_codes():
    assert not set(LANGUAGES) & {name for code in TASK_CODES for name in (code, type(get_task(code)).__name__)}


# ---------------------------------------------------------------- languages
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(LANGUAGES)), st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_a_member_drawn_is_in_the_language(name, seed, length):
    language = LANGUAGES[name]
    member = language.member(np.random.default_rng(seed), length)
    assert member is None or (len(member) == length and language.contains(member))


@pytest.mark.parametrize("name", sorted(LANGUAGES))
@pytest.mark.parametrize("verdict", ["true", "false"])
def test_a_program_with_a_constant_verdict_fails_every_language(name, verdict):
    language = LANGUAGES[name]
    program = parse(f"alphabet: {' '.join(language.symbols)}\naccept: top\ntop := {verdict}\n")
    report = check_language(language, program, samples_per_length=9, lengths=(40,))
    assert not report.verified and len(report.failure.string) <= 2


@settings(max_examples=12, deadline=None)
@given(st.integers(-3, 3))
def test_the_counterexample_is_a_shortest_misjudged_string(margin):
    """`#a >= #b + margin` is StrictMajority exactly when margin = 1; otherwise every string
    shorter than the counterexample is judged right and the counterexample wrong."""
    language = LANGUAGES["StrictMajority"]
    program = parse(f'alphabet: a b\naccept: top\ntop := #[j <= i] Q("a") >= #[j <= i] Q("b") + {margin}\n')
    report = check_language(language, program, samples_per_length=9)
    assert report.verified == (margin == 1)
    if margin == 1:
        return

    def judged_right(string) -> bool:
        value = evaluate(program, np.array([[program.alphabet.index(s) for s in string]]))["top"].array
        return bool(value[0, -1]) == language.contains(string)

    shortest = report.failure.string
    assert not judged_right(shortest)
    assert all(judged_right(s) for n in range(1, len(shortest)) for s in itertools.product("ab", repeat=n))


def test_the_check_of_a_task_program_reports_the_counterexample_and_its_trace(tmp_path, capsys):
    program = tmp_path / "left.crasp"
    program.write_text(UNIQUE_RIGHT.replace("Q(s) and prev[t]", "Q(t) and prev[s]"))
    assert main(["check", "UR", "--program", str(program), "--samples", "10"]) == 1
    out = capsys.readouterr().out
    assert (
        "shortest counterexample:\n  <bos> a b <sep> a b <eos>\n  position 5 (a): expected b next, but the "
        "program predicts <bos>\n" in out
    )
    assert "\n=> next token |  none    none none  none   <bos>   <eos>  none\n" in out
    assert out.endswith("predicts    nothing: the program disagrees with the task\n")


# ---------------------------------------------------------------- the trace as a picture
def test_the_picture_fills_the_true_booleans_and_writes_the_counts(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.patches import Rectangle

    from matplotlib.colors import to_rgba

    from crasp.plot import FAMILY_COLOUR, TRUE_COLOUR, save_trace_plot, trace_figure

    program = parse(
        'alphabet: a b c\naccept: doubled\nn_a := #[j <= i] Q("a")\n'
        "prev[t] := #[j <= i, j = i - 1] Q(t) >= 1\ndoubled := any t: Q(t) and prev[t]\n"
    )
    symbols = "a a b c c a".split()
    axes = trace_figure(program, symbols).axes[0]
    filled = {
        tuple(map(int, p.get_gid().split(",")))
        for p in axes.patches
        if isinstance(p, Rectangle) and p.get_facecolor() in (to_rgba(TRUE_COLOUR), to_rgba(FAMILY_COLOUR))
    }
    values = evaluate(program, np.array([[program.alphabet.index(s) for s in symbols]]))
    expected = {
        (row, x)
        for row, d in enumerate(program.definitions)
        if d.body.type == BOOL
        for x in range(len(symbols))
        if values[d.name].array[0, x].any()
    }
    assert filled == expected and expected
    written = [t.get_text() for t in axes.texts]
    assert written[: len(symbols)] == [str(int(v)) for v in values["n_a"].array[0]]
    picture = tmp_path / "trace.png"
    save_trace_plot(program, symbols, picture)
    assert picture.read_bytes().startswith(b"\x89PNG")
