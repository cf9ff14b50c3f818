"""Every class of user error gives the message a user can act on, at the right place."""

import pytest

from crasp import expr as E
from crasp.expr import CraspScopeError, CraspTypeError, Q, Var, count, family
from crasp.nexttoken import PredictionError, check_teacher_forced, encode, generate
from crasp.program import CraspProgramError, Definition, Program
from crasp.syntax import CraspSyntaxError, parse

HEADER = "alphabet: a b <sep>\naccept: top\n"


def _syntax_error(text: str) -> CraspSyntaxError:
    with pytest.raises(CraspSyntaxError) as caught:
        parse(text, "prog.crasp")
    return caught.value


def test_syntax_error_names_line_and_column_and_draws_a_caret():
    error = _syntax_error(HEADER + 'top := #[j <= i, j = i - 1 Q("a") >= 1\n')
    assert (error.line, error.column) == (3, 28)
    lines = str(error).splitlines()
    assert lines[0] == "prog.crasp:3:28: expected `]` to close the count's range, found `Q`"
    assert lines[1] == '  top := #[j <= i, j = i - 1 Q("a") >= 1'
    assert lines[2] == "  " + " " * 27 + "^"


@pytest.mark.parametrize(
    "body, column, message",
    [
        ('Q("a") + 1 >= 1', 15, 'the left operand of `+` `Q("a")` is a Boolean, but a Count is needed here'),
        ('#[j <= i] Q("a") and Q("b")', 25, '`and` needs two Booleans, but `#[j <= i] Q("a")` is a Count'),
        ('#[j <= i] (#[j <= i] Q("a")) >= 1', 8, 'the body of a count #[j <= i] `#[j <= i] Q("a")` is a Count'),
    ],
)
def test_type_errors_point_at_the_operation(body, column, message):
    error = _syntax_error(HEADER + f"top := {body}\n")
    assert (error.line, error.column) == (3, column)
    assert message in error.message


def test_undefined_name():
    error = _syntax_error(HEADER + "top := missing\n")
    assert "unknown name `missing`" in error.message and (error.line, error.column) == (3, 8)


def test_redefinition_points_at_the_second_definition():
    error = _syntax_error(HEADER + "top := true\ntop := false\n")
    assert error.line == 4 and "`top` is already defined at line 3" in error.message


def test_cycle_is_reported_with_its_path():
    error = _syntax_error(HEADER + "top := x\nx := y\ny := x\n")
    assert "definitions form a cycle: x -> y -> x" in error.message


def test_symbol_outside_the_alphabet():
    error = _syntax_error(HEADER + 'top := Q("z")\n')
    assert 'symbol "z" is not in the alphabet' in error.message and (error.line, error.column) == (3, 10)


def test_unbound_index_suggests_quoting():
    error = _syntax_error(HEADER + "top := Q(a)\n")
    assert "index `a` is not bound here" in error.message and 'literal symbol is quoted: "a"' in error.message


def test_family_argument_count_and_missing_output():
    error = _syntax_error(HEADER + "f[t] := Q(t)\ntop := f\n")
    assert "`f` takes 1 index argument(s) [t], got 0" in error.message
    error = _syntax_error("alphabet: a\nf := true\n")
    assert "missing `output: NAME`" in error.message


def test_output_must_be_a_family_over_one_symbol():
    error = _syntax_error("alphabet: a\noutput: top\ntop := true\n")
    assert "the output `top` must be a family over one symbol" in error.message


def test_dsl_type_errors_are_raised_where_the_node_is_built():
    with pytest.raises(CraspTypeError, match=r'`#\[j <= i\] Q\("a"\)` is used as a Boolean, but it is a Count'):
        Q("a") & count(Q("a"))
    with pytest.raises(CraspTypeError, match=r'`Q\("a"\)` is used as a Count'):
        count(Q("a")) + Q("a")
    with pytest.raises(CraspTypeError, match="no product of counts"):
        count(Q("a")) * count(Q("b"))
    with pytest.raises(CraspTypeError, match="not a Python truth value"):
        bool(count(Q("a")) > 1)


def test_dsl_scope_errors():
    with pytest.raises(CraspScopeError, match="not among its parameters"):
        family("f", [], lambda: Q(Var("t")))
    with pytest.raises(CraspScopeError, match="another quantifier over `t`"):
        E.any_(Var("t"), E.any_(Var("t"), Q(Var("t"))))
    with pytest.raises(CraspProgramError, match="outside the alphabet"):
        Program.build(["a"], accept=Q("b").named("top"))


def test_a_program_lists_every_definition_it_uses_before_its_use():
    uses_b = Q("b").named("b_here")
    with pytest.raises(
        CraspProgramError, match="`top` uses `b_here`, which is not one of the program's earlier definitions"
    ):
        Program(("a", "b"), (Definition("top", (), ~uses_b),), accept="top")


def test_zero_or_several_outputs_are_reported_with_position_and_outputs():
    program = parse('alphabet: a b <sep>\noutput: O\nO[s] := Q("<sep>") and not s = "<sep>"\n')
    with pytest.raises(PredictionError, match=r"at position 2 \('a'\) no output is true"):
        generate(program, ["<sep>", "a"], 3)
    result = check_teacher_forced(program, encode(program, [["<sep>", "a"]]), [1], [2])
    assert not result.correct[0]
    assert result.failures[0].describe() == "example 0, position 1: expected a, but outputs a, b are all true"


def test_a_wrong_next_token_reads_the_same_in_every_report():
    """check's counterexample, a failure's description and generate's refusal say what the outputs
    said in the same words."""
    from crasp.check import _next_token_problem
    from crasp.nexttoken import Failure, what_the_outputs_say

    assert what_the_outputs_say(()) == "no output is true"
    assert what_the_outputs_say(("a", "b")) == "outputs a, b are all true"
    wrong = Failure(example=0, position=2, expected="b", outputs=("a",))
    assert wrong.describe() == "example 0, position 2: expected b, but the program predicts a"
    assert _next_token_problem(wrong, ["<bos>", "a"]) == "position 2 (a): expected b next, but the program predicts a"
