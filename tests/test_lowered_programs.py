"""The lowered (jitted JAX) program equals the fast evaluator everywhere, and the reference evaluator at
every real position: on random programs and strings, at the limits of int32 and int64 counts, and on
every program the lab ships. Each program compiles once per shape, so the examples are few and small."""

from __future__ import annotations

import itertools
import subprocess
import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp import expr as E
from crasp.check import to_program_ids
from crasp.evaluate import count_dtype, evaluate
from crasp.expr import MAX_CONSTANT, CraspRangeError
from crasp.library import example_names, load_program
from crasp.lowered import lower
from crasp.nexttoken import encode
from crasp.program import Definition, Program, print_program
from crasp.reference import reference_value
from crasp.syntax import parse
from crasp.tasks import get_task
from crasp.witnesses import WITNESSES, copy_backward, copy_forward

from tests.crasp_strategies import ALPHABET, bool_expr, programs, strings

HEADER = "alphabet: a b\naccept: top\n"


def _assert_equal_to_evaluate(program, tokens, lowered_values, names=None):
    expected = evaluate(program, tokens, names)
    assert lowered_values.keys() == expected.keys()
    for name, want in expected.items():
        got = lowered_values[name]
        assert got.axes == want.axes and got.array.dtype == want.array.dtype, name
        assert np.array_equal(got.array, want.array), f"{name}\n{print_program(program)}"


def _assert_equal_to_reference(program, batch, values):
    """Every value at every real position (padding has no reference value) equals the reference's."""
    real = encode(program, batch) >= 0
    for definition in program.definitions:
        got, node = values[definition.name], definition.use(*(E.Var(p) for p in definition.params))
        want = np.zeros_like(got.array)
        for b, i in zip(*np.nonzero(real)):
            for index in itertools.product(range(len(ALPHABET)), repeat=len(got.axes)):
                bindings = {axis: ALPHABET[k] for axis, k in zip(got.axes, index)}
                want[(b, i) + index] = reference_value(program, batch[b], node, i + 1, bindings)
        wrong = np.argwhere((got.array != want) & real.reshape(real.shape + (1,) * len(got.axes)))
        assert not len(wrong), (
            f"{definition.name} differs at (string, position, symbols) {wrong[0]} of {batch}\n{print_program(program)}"
        )


# ---------------------------------------------------------------- random programs
@settings(max_examples=40, deadline=None)
@given(programs(), st.lists(strings(), min_size=1, max_size=5), st.sampled_from([1, 1 << 30]))
def test_lowered_program_equals_both_evaluators(program, batch, memory_budget):
    # A budget of one byte: one string per call, so the batch runs in several chunks, padded to none.
    tokens = encode(program, batch)
    values = lower(program, memory_budget=memory_budget)(tokens)
    _assert_equal_to_evaluate(program, tokens, values)  # padding -1 included
    _assert_equal_to_reference(program, batch, values)


@settings(max_examples=10, deadline=None)
@given(programs(), st.lists(strings(), min_size=1, max_size=3), st.data())
def test_chosen_names_alone_are_lowered(program, batch, data):
    names = data.draw(st.lists(st.sampled_from(program.names), min_size=1, max_size=2, unique=True))
    tokens = encode(program, batch)
    _assert_equal_to_evaluate(program, tokens, lower(program, names)(tokens), names)


t = E.Var("t")
prev = E.family("prev", ["p"], lambda p: E.count(E.Q(p), offset=1) >= 1)
a_seen_twice = E.family("a_seen_twice", ["p"], lambda p: E.Q(p) & (E.count(E.Q("a")) >= 2))
again = E.family("again", ["p"], lambda p: E.Q(p) & prev(p))  # two keys: where they agree
# Conjuncts one-hot in t by their structure alone: each binds t to a key instead of a (B, T, V) table.
ONE_HOT_IN_T = [
    E.Q(t),
    t.is_symbol("a"),
    E.SymbolRelation("=", "b", t),
    E.Q(t) & prev(t),
    prev(t) & E.Q("a"),
    E.Q("b") & E.Q(t),
    E.count(E.Q(t) & E.Q("b"), offset=1) >= 1,  # a key where a condition free of t holds
    E.count(again(t), offset=1) >= 1,
    E.count(E.Q(t), offset=2) == 1,
    a_seen_twice(t),
]


def _program_of(bodies: dict[str, E.Expr]) -> Program:
    """A program over ALPHABET defining the families above and then `bodies`."""
    used = [Definition(f.__name__, ("p",), f(E.Var("p")).body) for f in (prev, a_seen_twice, again)]
    defined = [Definition(name, (), body) for name, body in bodies.items()]
    return Program(ALPHABET, (*used, *defined, Definition("top", (), E.TRUE)), accept="top")


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ONE_HOT_IN_T), bool_expr(("t",), 2, ()), st.lists(strings(), min_size=1, max_size=4))
def test_every_one_hot_conjunct_binds_its_index_exactly(key, rest, batch):
    program = _program_of({"bound": E.any_(t, key & rest), "counted": E.any_(t, key & (E.count(E.Q(t) & rest) >= 2))})
    tokens = encode(program, batch)
    values = lower(program)(tokens)
    _assert_equal_to_evaluate(program, tokens, values)
    _assert_equal_to_reference(program, batch, values)


def _values_made(program: Program, names: list[str] | None = None, shape=(2, 9)) -> list:
    """Every value the lowering of the named definitions makes on strings of `shape` (traced, not compiled)."""
    lowered, made = lower(program, names), []
    jax.eval_shape(
        lambda tokens: made.append(lowered.lowering_of(tokens, np.int32)[0]), jax.ShapeDtypeStruct(shape, np.int32)
    )
    return list(made[0].memo.values())


@pytest.mark.parametrize("key", ONE_HOT_IN_T, ids=E.show)
def test_a_one_hot_conjunct_makes_no_table_over_the_alphabet(key):
    program = _program_of({"bound": E.any_(t, key & ~prev(t))})  # the rest has no one-hot conjunct of its own
    assert all(value.axes == () for value in _values_made(program, ["bound"]))


@pytest.mark.parametrize("make", [copy_forward, copy_backward])
def test_a_count_keyed_by_the_previous_symbol_makes_no_table_over_two_alphabets(make):
    # UF's `any t: Q(t) and #[j <= i] (Q(s) and prev[t] ...) >= 1`: counted densely, (B, T, V, V).
    program = make(get_task("UF").symbols)
    assert max(len(value.axes) for value in _values_made(program)) == 1


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_keyed_prefix_sum_equals_its_definition(data):
    from crasp.lowered_arrays import keyed_prefix_sum

    B, T, groups = 2, 8, data.draw(st.integers(1, 4))  # few shapes, each compiled once
    draw_keys = st.lists(st.integers(-1, groups - 1), min_size=B * T, max_size=B * T)
    keys, queries = (np.array(data.draw(draw_keys), np.int32).reshape(B, T) for _ in range(2))
    values = np.array(data.draw(st.lists(st.integers(0, 5), min_size=B * T * 2, max_size=B * T * 2))).reshape(B, T, 2)
    got = np.asarray(jax.jit(keyed_prefix_sum, static_argnums=(3, 4))(keys, values, queries, groups, np.int32))
    for b, i in itertools.product(range(B), range(T)):
        matching = [values[b, j] for j in range(i + 1) if queries[b, i] >= 0 and keys[b, j] == queries[b, i]]
        assert (got[b, i] == sum(matching, np.zeros(2, int))).all(), (b, i)


def test_one_compiled_shape_serves_batches_of_several_sizes():
    program = parse(HEADER + 'top := #[j <= i] Q("a") > #[j <= i] Q("b")\n')
    lowered = lower(program)
    for batch in ([list("ab")], [list("ab")] * 3, [list("ba")] * 4):
        _assert_equal_to_evaluate(program, encode(program, batch), lowered(encode(program, batch)))
    assert set(lowered.wrapping) == {(1, 2), (4, 2)}  # the shapes traced: 3 strings run padded to 4


# ---------------------------------------------------------------- the limits of int counts
INT16_MAX, INT32_MAX = int(np.iinfo(np.int16).max), int(np.iinfo(np.int32).max)


@pytest.mark.parametrize(
    "constant, dtype",
    [
        (INT16_MAX - 5, np.int16),
        (INT16_MAX - 4, np.int32),
        (INT32_MAX - 5, np.int32),
        (INT32_MAX - 4, np.int64),
        (INT32_MAX, np.int64),
        (MAX_CONSTANT, np.int64),
    ],
)
def test_counts_at_the_edges_of_int16_and_int32_are_exact(constant, dtype):
    # 5 positions: constant + 5 is the largest count; one past a type's edge, the next type computes.
    string = list("abbab")
    program = parse(HEADER + f'n := #[j <= i] Q("a") + {constant}\ntop := n > {constant}\n')
    tokens = encode(program, [string])
    values = lower(program)(tokens)
    _assert_equal_to_evaluate(program, tokens, values)
    assert values["n"].array[0].tolist() == [constant + k for k in (1, 1, 1, 2, 2)]
    assert values["top"].array.all()
    assert count_dtype(program, len(string)) is dtype


def test_a_sum_beyond_int64_is_an_error_not_a_wrapped_value():
    # d0 = 2**40 - 1 + (number of a's so far), doubled 23 times: beyond int64 once an `a` is seen.
    lines = [f'd0 := {MAX_CONSTANT - 1} + #[j <= i] Q("a")'] + [f"d{k} := d{k - 1} + d{k - 1}" for k in range(1, 24)]
    program = parse(HEADER + "\n".join(lines) + "\ntop := d23 > 0\n")
    strings_ = [["b"]] * 9 + [["b", "a"]]
    lowered = lower(program, memory_budget=1)  # one string per call: the error names the batch's string
    with pytest.raises(
        CraspRangeError,
        match=r"`d22 \+ d22` leaves the exact range of counts, -2\*\*63 .. 2\*\*63 - 1, at position 2 of string 9",
    ):
        lowered(encode(program, strings_))
    assert lowered(encode(program, strings_[:9]))["top"].array.all()


def test_a_subtraction_at_the_low_edge_of_int64_is_exact_and_one_past_it_is_refused():
    # -(2**40) * 2**23 = -2**63 exactly (in range); subtracting one more count of `a` leaves the range.
    lines = [f"d0 := 0 - {MAX_CONSTANT}"] + [f"d{k} := d{k - 1} + d{k - 1}" for k in range(1, 24)]
    program = parse(HEADER + "\n".join(lines) + '\nlow := d23 - #[j <= i] Q("a")\ntop := low < 0\n')
    assert lower(program)(encode(program, [["b", "b"]]))["low"].array.tolist() == [[-(2**63)] * 2]
    with pytest.raises(CraspRangeError, match=r"`d23 - #\[j <= i\] Q\(\"a\"\)` leaves .* at position 2 of string 0"):
        lower(program)(encode(program, [["b", "a"]]))


def test_programs_deeper_than_pythons_recursion_limit_lower():
    body, chain = '#[j <= i] Q("a") >= 2', ['d0 := #[j <= i] Q("b")']
    for k in range(1, 1200):
        body = f'(not ({body} and Q("b")) or Q("a"))'
        chain.append(f'd{k} := d{k - 1} + #[j <= i] Q("a")')
    program = parse(HEADER + "\n".join(chain) + f"\nnested := {body}\ntop := nested and d1199 >= 3\n")
    tokens = encode(program, [list("abbab"), list("ba")])
    _assert_equal_to_evaluate(program, tokens, lower(program, ["top"])(tokens), ["top"])


# ---------------------------------------------------------------- every shipped program
WITNESS_CASES = [(code, make) for code, makers in WITNESSES.items() for make in makers]


@pytest.mark.parametrize("code, make", WITNESS_CASES, ids=[f"{c}-{m.__name__}" for c, m in WITNESS_CASES])
def test_every_witness_lowers_to_the_evaluators_values(code, make):
    task = get_task(code)
    program = make(task.symbols)
    length = max(task.min_length(), 6)
    examples = task.sample(np.random.default_rng(0), 3, length)
    tokens = to_program_ids(examples.tokens, task.vocab, program)
    tokens[0, int(examples.lengths[0]) - 2 :] = -1  # a shorter string: padding inside the batch
    _assert_equal_to_evaluate(program, tokens, lower(program)(tokens))


@pytest.mark.parametrize("name", example_names())
def test_every_example_program_lowers_to_the_evaluators_values(name):
    program = load_program(name)
    tokens = np.random.default_rng(1).integers(-1, len(program.alphabet), size=(4, 12))
    _assert_equal_to_evaluate(program, tokens, lower(program)(tokens))


# ---------------------------------------------------------------- the edges of the call
def test_bad_tokens_are_refused_as_the_evaluator_refuses_them():
    program = parse(HEADER + 'top := Q("a")\n')
    lowered = lower(program)
    with pytest.raises(ValueError, match=r"token ids must lie in 0\.\.1 \(the alphabet\) or be -1 \(padding\)"):
        lowered(np.array([[0, 2]]))
    with pytest.raises(
        ValueError, match=r"tokens must be a \(batch, positions\) array of symbol ids, got shape \(3,\)"
    ):
        lowered(np.array([0, 1, 0]))


def test_an_empty_batch_and_empty_strings_give_what_the_evaluator_gives():
    program = parse(HEADER + 'top := #[j <= i] Q("a") > 0\n')
    for shape in ((0, 3), (2, 0)):
        tokens = np.zeros(shape, np.int64)
        _assert_equal_to_evaluate(program, tokens, lower(program)(tokens))


def test_lowering_a_module_imports_no_jax_until_a_program_is_lowered():
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, crasp.lowered; print('jax' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.stdout.strip() == "False", imported.stderr[-2000:]
