"""The fast evaluator equals the slow reference on random programs and strings, node by node."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp import expr as E
from crasp.evaluate import evaluate
from crasp.fragment import fragment_of
from crasp.nexttoken import encode
from crasp.prefix_sums import keyed_prefix_sum
from crasp.program import print_program
from crasp.reference import reference_value
from crasp.syntax import parse

from tests.crasp_strategies import ALPHABET, programs, strings


def _assert_agree(program, batch):
    tokens = encode(program, batch)
    fast = evaluate(program, tokens, memory_budget=1 << 16)  # a small budget forces several chunks
    for definition in program.definitions:
        value = fast[definition.name]
        assert value.axes == tuple(sorted(definition.params))
        node = definition.use(*(E.Var(p) for p in definition.params))
        for b, string in enumerate(batch):
            for i in range(len(string)):
                for symbols in itertools.product(ALPHABET, repeat=len(definition.params)):
                    bindings = dict(zip(definition.params, symbols))
                    index = tuple(ALPHABET.index(bindings[a]) for a in value.axes)
                    got = value.array[(b, i) + index]
                    want = reference_value(program, string, node, i + 1, bindings)
                    assert got == want, (
                        f"{definition.name}{symbols} at position {i + 1} of {' '.join(string)}: "
                        f"fast {got}, reference {want}\n{print_program(program)}"
                    )


@settings(max_examples=120, deadline=None)
@given(programs(), st.lists(strings(), min_size=1, max_size=4))
def test_fast_evaluator_equals_reference(program, batch):
    _assert_agree(program, batch)


@settings(max_examples=120, deadline=None)
@given(programs())
def test_parse_of_print_is_the_same_program(program):
    assert parse(print_program(program)) == program


@settings(max_examples=60, deadline=None)
@given(programs())
def test_fragment_is_the_positional_operations_used(program):
    nodes = [n for d in program.definitions for n in E.walk(d.body)]
    fragment = fragment_of(program)
    assert fragment.local == any(isinstance(n, E.CountOf) and n.offset is not None for n in nodes)
    assert fragment.periodic == any(isinstance(n, E.Periodic) for n in nodes)
    assert fragment.predicts_generalization("ape")
    assert fragment.predicts_generalization("nope") == (not fragment.local and not fragment.periodic)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_keyed_prefix_sum_equals_its_definition(data):
    B, T = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9))
    draw_keys = st.lists(st.integers(-1, 3), min_size=B * T, max_size=B * T)
    keys = np.array(data.draw(draw_keys)).reshape(B, T)
    queries = np.array(data.draw(draw_keys)).reshape(B, T)
    values = np.array(data.draw(st.lists(st.integers(0, 5), min_size=B * T * 2, max_size=B * T * 2))).reshape(B, T, 2)
    got = keyed_prefix_sum(keys, values, queries)
    for b in range(B):
        for i in range(T):
            want = sum(
                (values[b, j] for j in range(i + 1) if keys[b, j] >= 0 and keys[b, j] == queries[b, i]),
                np.zeros(2, int),
            )
            assert (got[b, i] == want).all()


def test_counts_include_the_current_position_and_local_counts_look_exactly_c_back():
    program = parse("""
alphabet: a b
accept: top
n_a := #[j <= i] Q("a")
a_two_back := #[j <= i, j = i - 2] Q("a")
a_here := #[j <= i, j = i] Q("a")
top := true
""")
    values = evaluate(program, encode(program, [list("aabab")]))
    assert values["n_a"].array[0].tolist() == [1, 2, 2, 3, 3]
    assert values["a_two_back"].array[0].tolist() == [0, 0, 1, 1, 0]
    assert values["a_here"].array[0].tolist() == [1, 1, 0, 1, 0]


def test_padding_after_a_string_does_not_change_its_values():
    program = parse("""
alphabet: a b
accept: top
n_a := #[j <= i] Q("a")
prev_b := #[j <= i, j = i - 1] Q("b") >= 1
top := n_a >= 2 and prev_b
""")
    short, long = list("aba"), list("abaabb")
    both = evaluate(program, encode(program, [short, long]))
    alone = evaluate(program, encode(program, [short]))
    for name in program.names:
        assert (both[name].array[0, :3] == alone[name].array[0]).all()
