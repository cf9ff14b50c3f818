"""min, max and `? :` compiled (ramps): every definition in the residual stream equals crasp.evaluate.

Random count expressions over counts of a and b (averaged counts with NoPE, local counts j = i - c
with APE, and both mixed with APE, where a local count is divided by i), nested up to three deep,
on random strings: a ramp that is off by a sign, a wrong bound M in `? :` or a misplaced layer
changes some definition at some position.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.nexttoken import encode
from crasplab.compiler import compile_text
from crasplab.compiler.run import interpreter_definitions, output_table, probe_definitions

AVERAGED = ['#[j <= i] Q("a")', '#[j <= i] Q("b")', "#[j <= i] true", "2", "0"]
LOCAL = ['#[j <= i, j = i - 1] Q("a")', '#[j <= i, j = i - 2] Q("b")', '#[j <= i, j = i] Q("a")', "1", "3"]
CONDITIONS = ['Q("a")', 'not Q("b")', '#[j <= i] Q("a") > #[j <= i] Q("b")', "true"]


@st.composite
def counts(draw, terms, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(terms))
    left, right = draw(counts(terms, depth - 1)), draw(counts(terms, depth - 1))
    kind = draw(st.sampled_from(["min", "max", "?", "+", "-"]))
    if kind in ("min", "max"):
        return f"{kind}({left}, {right})"
    if kind == "?":
        return f"({draw(st.sampled_from(CONDITIONS))} ? {left} : {right})"
    return f"({left} {kind} {right})"


def agree(expression: str, threshold: int, pe: str, strings: list[list[str]]) -> None:
    text = f"alphabet: <bos> a b\naccept: test\nvalue := {expression}\ntest := value >= {threshold}\n"
    compiled = compile_text(text, "random.crasp", pe, max_length=64)
    ids = encode(compiled.program, [["<bos>", *s] for s in strings])
    real = ids >= 0
    probed, evaluated = probe_definitions(compiled, ids), interpreter_definitions(compiled, ids)
    for label in ("value", "test"):
        worst = np.abs(probed[label] - evaluated[label])[real].max()
        assert worst < 1e-3, f"{label} of {expression} is off by {worst}"
    table = output_table(compiled.model(), ids)[..., 0]  # the accepted Boolean, in every column
    assert (table == (evaluated["test"] > 0.5))[real].all()


strings = st.lists(st.lists(st.sampled_from("ab"), min_size=1, max_size=20), min_size=1, max_size=12)


@settings(max_examples=12, deadline=None)
@given(expression=counts(AVERAGED), threshold=st.integers(-3, 5), strings=strings)
def test_min_max_and_conditionals_of_counts_over_every_j(expression, threshold, strings):
    agree(expression, threshold, "nope", strings)


@settings(max_examples=8, deadline=None)
@given(expression=counts(LOCAL), threshold=st.integers(-1, 4), strings=strings)
def test_min_max_and_conditionals_of_local_counts(expression, threshold, strings):
    agree(expression, threshold, "ape", strings)


@settings(max_examples=8, deadline=None)
@given(expression=counts(AVERAGED + LOCAL), threshold=st.integers(-3, 5), strings=strings)
def test_counts_held_as_values_meet_counts_over_every_j_divided_by_i(expression, threshold, strings):
    agree(expression, threshold, "ape", strings)


def test_a_value_held_count_and_an_averaged_count_compare_at_every_position():
    # min(#a, a at i - 1 ? 3 : 0): the local side is 0 or 3, divided by i through [x >= 1..3]
    agree('min(#[j <= i] Q("a"), (#[j <= i, j = i - 1] Q("a") >= 1 ? 3 : 0))', 2, "ape", [list("aaaba"), list("ab")])
    agree('min(#[j <= i] Q("a"), (Q("a") ? 2 : 2))', 0, "nope", [["a"], list("ba")])


def test_a_conditional_between_constants_is_a_value_and_compares_as_one():
    agree('(Q("a") ? 3 : 1) + (Q("b") ? 1 : 0)', 3, "ape", [list("abba"), list("aab"), list("b")])
