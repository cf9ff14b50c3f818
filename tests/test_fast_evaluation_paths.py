"""The evaluator's fast paths equal its straightforward dense path, value for value; values at chosen
positions equal the whole evaluation's there.

Each fast path is switched off in turn (its rule answering "does not apply"), so the same program on
the same strings is evaluated once with it and once by dense evaluation; both must agree at every
position, for every symbol, at the edges of the narrow count types too. The slow reference evaluator
(crasp.reference) checks the fast path on short strings."""

from __future__ import annotations

import itertools
import operator
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp import expr as E
from crasp.check import to_program_ids
from crasp.compared_counts import COMPARISON_OPS, SEGMENTS_AT_ONCE, compared_count
from crasp.batch_evaluator import BatchEvaluator
from crasp.evaluate import count_dtype, evaluate
from crasp.nexttoken import check_teacher_forced, encode
from crasp.onehot_keys import dense, key_where_family_holds, or_keys, symbol_per_group
from crasp.prefix_sums import keyed_prefix_sum, prefix_sum
from crasp.program import Definition, Program, print_program
from crasp.reference import reference_value
from crasp.selected_positions import RANKS_ADDED_IN_TURN, SelectedEvaluator, counts_at
from crasp.tasks import get_task
from crasp.trampoline import trampoline
from crasp.values import OneHot, Value
from crasp.witnesses import copy_forward, majority

from tests.crasp_strategies import ALPHABET, bool_expr, onehot_factor, programs, strings

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq, "!=": operator.ne}


def _does_not_apply(self, *args):
    return None
    yield  # a generator, like the rule it stands in for


def _as_mask(self, key, name):
    return Value(dense(key, self.V), (name,))


# Each rewrite and what stands in for it switched off: a rule that does not apply, one-hot families as masks.
SWITCHED_OFF = {
    "_keyed_count": _does_not_apply,
    "_compared_count": _does_not_apply,
    "_bind_by_conjunct": _does_not_apply,
    "_monotone_reduction": _does_not_apply,
    "_onehot_count_compared": _does_not_apply,
    "_onehot_logic": lambda self, op, left, right: None,
    "onehot": _as_mask,
}


def _values_both_ways(rule: str, program: Program, batch: list[list[str]], positions=None):
    """The program's values with the evaluator's rule `rule` and with that rule switched off."""
    tokens = encode(program, batch)
    chosen = None if positions is None else positions(tokens)
    fast = evaluate(program, tokens, memory_budget=1 << 16, positions_BxT=chosen)  # a small budget: several chunks
    with mock.patch.object(BatchEvaluator, rule, SWITCHED_OFF[rule]):
        dense = evaluate(program, tokens, memory_budget=1 << 16, positions_BxT=chosen)
    return fast, dense


def _assert_equal_everywhere(fast, dense, program):
    for name in program.names:
        assert fast[name].axes == dense[name].axes
        assert np.array_equal(fast[name].array, dense[name].array), f"{name}\n{print_program(program)}"


# ---------------------------------------------------------------- every rewrite, on random programs
@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(sorted(SWITCHED_OFF)),
    programs(),
    st.lists(strings(max_size=10), min_size=1, max_size=4),
)
def test_each_rewrite_equals_dense_evaluation(rule, program, batch):
    _assert_equal_everywhere(*_values_both_ways(rule, program, batch), program)


# ---------------------------------------------------------------- prefix sums
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_prefix_sum_equals_numpys_cumsum_wrapping_alike(data):
    shape = (data.draw(st.integers(1, 3)), data.draw(st.integers(0, 40)))
    shape += tuple(data.draw(st.lists(st.integers(1, 4), max_size=2)))
    dtype = data.draw(st.sampled_from([np.int16, np.int32, np.int64]))
    big = int(np.iinfo(np.int16).max)  # sums of these wrap around in int16, as np.cumsum's do
    values = np.array(
        data.draw(st.lists(st.integers(-big, big), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    ).reshape(shape)
    got = prefix_sum(values, dtype)
    assert got.dtype == dtype
    assert np.array_equal(got, np.cumsum(values, axis=1, dtype=dtype))


def test_keyed_prefix_sum_in_int16_is_exact_where_the_whole_batch_would_wrap():
    # 300 strings of 200 positions: 60,000 ones in all, beyond int16, but at most 200 per string and key.
    rng = np.random.default_rng(0)
    keys, queries = rng.integers(-1, 3, (300, 200)), rng.integers(-1, 3, (300, 200))
    values = np.ones((300, 200, 2), bool)
    narrow = keyed_prefix_sum(keys, values, queries, np.int16)
    assert narrow.dtype == np.int16
    assert np.array_equal(narrow, keyed_prefix_sum(keys, values, queries, np.int64))
    assert narrow.max() > 50


# ---------------------------------------------------------------- compared counts
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compared_count_equals_its_definition(data):
    B, T, V = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 12)), data.draw(st.integers(1, 4))
    draw_keys = st.lists(st.integers(-1, V - 1), min_size=B * T, max_size=B * T)
    xkeys, ykeys, queries = (np.array(data.draw(draw_keys), np.int64).reshape(B, T) for _ in range(3))
    op = data.draw(st.sampled_from(COMPARISON_OPS))
    got = compared_count(xkeys, ykeys, queries, op, V)
    for b, i, s in itertools.product(range(B), range(T), range(V)):
        q = queries[b, i]
        want = 0
        if q >= 0:
            x = np.cumsum(xkeys[b] == s)
            y = np.cumsum(ykeys[b] == q)
            want = sum(OPS[op](x[j], y[j]) for j in range(i + 1))
        assert got[b, i, s] == want, (b, i, s)


@pytest.mark.parametrize("op", COMPARISON_OPS)
def test_compared_count_of_a_string_longer_than_a_batch_of_segments(op):
    T, V = 2 * SEGMENTS_AT_ONCE + 7, 3
    xkeys, ykeys, queries = np.random.default_rng(T).integers(-1, V, (3, 1, T))
    x = np.cumsum(xkeys[:, :, None] == np.arange(V), axis=1)  # (1, T, V)
    y = np.cumsum(ykeys[:, :, None] == np.arange(V), axis=1)
    dense = np.cumsum(OPS[op](x[:, :, :, None], y[:, :, None, :]), axis=1)  # (1, T, s, t)
    want = np.take_along_axis(dense, np.maximum(queries, 0)[:, :, None, None], axis=3)[..., 0]
    want[queries < 0] = 0
    assert np.array_equal(compared_count(xkeys, ykeys, queries, op, V), want)


def test_compared_count_refuses_an_unknown_comparison():
    keys = np.zeros((1, 2), np.int64)
    with pytest.raises(ValueError, match="op must be one of < <= > >= = !=, got '=='"):
        compared_count(keys, keys, keys, "==", 1)


@st.composite
def compared_count_programs(draw):
    """`d[p0] := any t: Q(t) and #[j <= i] (#[k <= j] X(s) op #[k <= j] Y(t)) op2 n`, s the parameter, an
    outer bound index or a symbol, X and Y one-hot in various ways, either side first, within arithmetic."""
    outer = draw(st.booleans())
    scope = ("p0", "u") if outer else ("p0",)
    s = draw(st.sampled_from(scope))
    x_side = E.CountOf(draw(onehot_factor(scope + ("t",), s)), None)
    y_side = E.CountOf(draw(onehot_factor(scope + ("t",), "t")), None)
    sides = (x_side, y_side) if draw(st.booleans()) else (y_side, x_side)
    nested = E.CountOf(E.Compare(draw(st.sampled_from(COMPARISON_OPS)), *sides), None)
    shifted = E.Arith("+", nested, E.Number(draw(st.integers(-2, 2))))
    test = E.Compare(draw(st.sampled_from(sorted(E.COMPARISONS))), shifted, E.Number(draw(st.integers(0, 3))))
    body = E.Quantified("any", E.Var("t"), E.And(E.Token(E.Var("t")), test))
    if outer:
        body = E.Quantified(draw(st.sampled_from(["any", "all"])), E.Var("u"), body)
    definitions = (Definition("nested", ("p0",), body), Definition("top", (), E.BoolConst(True)))
    return Program(ALPHABET, definitions, accept="top")


@settings(max_examples=150, deadline=None)
@given(compared_count_programs(), st.lists(strings(max_size=12), min_size=1, max_size=4))
def test_compared_counts_equal_the_dense_count(program, batch):
    _assert_equal_everywhere(*_values_both_ways("_compared_count", program, batch), program)


@settings(max_examples=60, deadline=None)
@given(compared_count_programs(), st.lists(strings(max_size=6), min_size=1, max_size=2))
def test_compared_counts_equal_the_reference(program, batch):
    values = evaluate(program, encode(program, batch))
    definition = program.definition("nested")
    for b, string in enumerate(batch):
        for i, symbol in itertools.product(range(len(string)), ALPHABET):
            want = reference_value(program, string, definition.use(symbol), i + 1, {})
            assert values["nested"].array[b, i, ALPHABET.index(symbol)] == want, print_program(program)


LENGTH = 400


@pytest.mark.parametrize("constant", [32767 - LENGTH, 32767 - LENGTH + 1, 2**31 - 1 - LENGTH, 2**31 - LENGTH])
def test_compared_counts_at_the_edge_of_the_narrow_count_types(constant):
    # The nested count reaches LENGTH on strings of LENGTH positions, so the bound of `count + constant`
    # is exactly the largest int16 or int32, or one past it: computed in the type, or in the next one.
    s, t = E.Var("p0"), E.Var("t")
    nested = E.CountOf(E.Compare("<", E.CountOf(E.Token(s), None), E.CountOf(E.Token(t), None)), None)
    shifted = E.Arith("+", nested, E.Number(constant))
    program = Program(
        ALPHABET,
        (
            Definition(
                "high", ("p0",), E.Quantified("any", t, E.And(E.Token(t), E.Compare(">", shifted, E.Number(constant))))
            ),
            Definition("top", (), E.BoolConst(True)),
        ),
        accept="top",
    )
    rng = np.random.default_rng(constant)
    batch = [list(rng.choice(ALPHABET, LENGTH, p=[0.6, 0.3, 0.1])) for _ in range(2)]
    fast, dense = _values_both_ways("_compared_count", program, batch)
    _assert_equal_everywhere(fast, dense, program)
    assert fast["high"].array.any() and not fast["high"].array.all()
    assert count_dtype(program, LENGTH) == next(
        t for t in (np.int16, np.int32, np.int64) if constant + LENGTH <= np.iinfo(t).max
    )


# ---------------------------------------------------------------- chosen positions
@settings(max_examples=150, deadline=None)
@given(programs(), st.lists(strings(max_size=10), min_size=1, max_size=4), st.data())
def test_values_at_chosen_positions_equal_the_whole_evaluation_there(program, batch, data):
    tokens = encode(program, batch)
    chosen = np.array(data.draw(st.lists(st.booleans(), min_size=tokens.size, max_size=tokens.size)))
    chosen = chosen.reshape(tokens.shape) & (tokens >= 0)
    whole = evaluate(program, tokens, memory_budget=1 << 16)
    at_chosen = evaluate(program, tokens, memory_budget=1 << 16, positions_BxT=chosen)
    for name in program.names:
        assert at_chosen[name].axes == whole[name].axes
        assert np.array_equal(at_chosen[name].array, whole[name].array[chosen]), f"{name}\n{print_program(program)}"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_counts_at_chosen_positions_equal_the_prefix_count_there(data):
    B, T, V = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 12)), data.draw(st.integers(1, 4))

    def draw_array(elements, size):
        return np.array(data.draw(st.lists(elements, min_size=size, max_size=size)), dtype=np.int64)

    keys = draw_array(st.integers(-1, V - 1), B * T).reshape(B, T)
    chosen = draw_array(st.booleans(), B * T).reshape(B, T).astype(bool)
    rows_b, rows_i = np.nonzero(chosen)
    counts = np.cumsum(keys[:, :, None] == np.arange(V), axis=1)
    assert np.array_equal(counts_at(keys, rows_b, rows_i, V, np.int16), counts[chosen])
    # Grouped: only the j whose group is the row's own count (a keyed count at chosen positions).
    groups = draw_array(st.integers(-1, 2), B * T).reshape(B, T)
    row_groups = draw_array(st.integers(-1, 2), len(rows_b))
    got = counts_at(keys, rows_b, rows_i, V, np.int16, groups, row_groups)
    for r, (b, i) in enumerate(zip(rows_b, rows_i)):
        same = (groups[b, : i + 1] == row_groups[r]) & (row_groups[r] >= 0)
        want = [int(((keys[b, : i + 1] == s) & same).sum()) for s in range(V)]
        assert got[r].tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_counts_at_of_groups_that_occur_once_equal_the_prefix_count_there_either_way(data):
    # Groups a permutation of the positions in each string (UF's distinct tokens), some dropped, one
    # group sometimes repeated: counted from a table of single occurrences, or sorted where one repeats.
    B, T, V = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 10)), data.draw(st.integers(1, 4))
    groups = np.array([data.draw(st.permutations(range(T))) for _ in range(B)])
    groups[np.array(data.draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).reshape(B, T)] = -1
    if T > 1 and data.draw(st.booleans()):
        groups[0, groups[0] == 0] = -1
        groups[0, :2] = 0
    keys = np.array(data.draw(st.lists(st.integers(-1, V - 1), min_size=B * T, max_size=B * T))).reshape(B, T)
    chosen = np.array(data.draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))).reshape(B, T)
    rows_b, rows_i = np.nonzero(chosen)
    row_groups = np.array(
        data.draw(st.lists(st.integers(-1, T - 1), min_size=len(rows_b), max_size=len(rows_b))), np.int64
    )
    want = [
        [int(((keys[b, : i + 1] == s) & (groups[b, : i + 1] == g) & (g >= 0)).sum()) for s in range(V)]
        for b, i, g in zip(rows_b, rows_i, row_groups)
    ]
    assert counts_at(keys, rows_b, rows_i, V, np.int16, groups, row_groups).tolist() == want
    with mock.patch("crasp.selected_positions.SINGLE_OCCURRENCE_TABLE", 0):
        assert counts_at(keys, rows_b, rows_i, V, np.int16, groups, row_groups).tolist() == want


@pytest.mark.parametrize("rows_per_string", [RANKS_ADDED_IN_TURN - 1, RANKS_ADDED_IN_TURN, 3 * RANKS_ADDED_IN_TURN])
def test_counts_at_many_positions_of_a_string_add_up_either_way(rows_per_string):
    keys = np.random.default_rng(rows_per_string).integers(-1, 3, (2, 3 * RANKS_ADDED_IN_TURN + 5))
    chosen = np.zeros(keys.shape, bool)
    chosen[:, -rows_per_string:] = True
    counts = np.cumsum(keys[:, :, None] == np.arange(3), axis=1)
    assert np.array_equal(counts_at(keys, *np.nonzero(chosen), 3, np.int16), counts[chosen])


def test_a_check_reads_only_the_answer_positions_and_names_the_first_wrong_one():
    task = get_task("Majority", alphabet_size=3)
    program = majority(task.symbols)
    examples = task.sample(np.random.default_rng(0), 40, 12)
    tokens = to_program_ids(examples.tokens, task.vocab, program)
    assert check_teacher_forced(program, tokens, examples.prompt_lengths, examples.lengths).correct.all()
    wrong = tokens.copy()
    last = examples.lengths - 1
    wrong[np.arange(40), last - 1] = program.symbol_ids()["<sep>"]  # each answer replaced by <sep>
    result = check_teacher_forced(program, wrong, examples.prompt_lengths, examples.lengths)
    assert not result.correct.any()
    assert [f.example for f in result.failures] == list(range(40))
    assert all(f.position == examples.prompt_lengths[f.example] for f in result.failures)


# ---------------------------------------------------------------- one-hot families kept as keys
MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


@st.composite
def onehot_factor_either_way_round(draw, scope, var):
    """onehot_factor, and `#[..] Q(t) >= 1` also as `1 <= #[..] Q(t)` (the same family)."""
    factor = draw(onehot_factor(scope, var))
    if isinstance(factor, E.Compare) and isinstance(factor.right, E.Number) and draw(st.booleans()):
        return E.Compare(MIRRORED[factor.op], factor.right, factor.left)
    return factor


@st.composite
def onehot_count_programs(draw):
    """`counted[p0] := [any t: Q(t) and] #[j <= i] (X(p0) [and Y(t)] [and M] [and F(p0)]) op n` with X, Y
    one-hot, M free of indices and F any family of p0, `0 op n` true or false; combined by `and` / `or`
    with one-hot and dense families of p0, and used at a literal symbol and at a bound index too."""
    s, t = E.Var("p0"), E.Var("t")
    keyed = draw(st.booleans())
    parts = [draw(onehot_factor_either_way_round(("p0", "t"), "p0"))]
    if keyed:
        parts.append(draw(onehot_factor_either_way_round(("p0", "t"), "t")))
    if draw(st.booleans()):
        parts.append(draw(bool_expr((), 1, ())))
    if draw(st.booleans()):  # a family of p0 that restricts X's key: `p0 < "c"`, `not Q(p0)`, ...
        parts.append(draw(bool_expr(("p0",), 1, ())))
    parts = draw(st.permutations(parts))
    body = parts[0]
    for part in parts[1:]:
        body = E.And(body, part)
    sides = (E.CountOf(body, None), E.Number(draw(st.integers(-1, 3))))
    if draw(st.booleans()):
        sides = sides[::-1]
    counted = E.Compare(draw(st.sampled_from(sorted(E.COMPARISONS))), *sides)
    if keyed:
        counted = E.Quantified("any", t, E.And(E.Token(t), counted))
    other = draw(
        st.sampled_from(
            [
                E.Token(s),
                E.SymbolRelation("=", s, "a"),
                E.Not(E.SymbolRelation("=", "b", s)),
                counted,
                E.Token(E.Var("u")),
            ]
        )
        | bool_expr(("p0",), 1, ())
    )
    pair = (counted, other) if draw(st.booleans()) else (other, counted)
    combined = E.And(*pair) if draw(st.booleans()) else E.Or(*pair)
    if "u" in combined.free:
        combined = E.Quantified(draw(st.sampled_from(["any", "all"])), E.Var("u"), combined)
    family = Definition("counted", ("p0",), counted)
    v = E.Var("v")
    definitions = (
        family,
        Definition("combined", ("p0",), combined),
        Definition("at_symbol", (), family.use(draw(st.sampled_from(ALPHABET)))),
        Definition("at_index", (), E.Quantified("any", v, E.And(E.Token(v), family.use(v)))),
        Definition("top", (), E.BoolConst(True)),
    )
    return Program(ALPHABET, definitions, accept="top")


def _some_positions(tokens):
    return (tokens >= 0) & (np.arange(tokens.size).reshape(tokens.shape) % 3 != 1)


@settings(max_examples=200, deadline=None)
@given(st.booleans(), onehot_count_programs(), st.lists(strings(max_size=12), max_size=4))
def test_onehot_counts_equal_the_dense_count(chosen, program, batch):
    positions = _some_positions if chosen else None
    _assert_equal_everywhere(*_values_both_ways("_onehot_count_compared", program, batch + [["a"]], positions), program)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["_onehot_logic", "onehot", "_bind_by_conjunct", "_keyed_count"]),
    st.booleans(),
    onehot_count_programs(),
    st.lists(strings(max_size=12), max_size=4),
)
def test_onehot_families_equal_their_masks(rule, chosen, program, batch):
    positions = _some_positions if chosen else None
    _assert_equal_everywhere(*_values_both_ways(rule, program, batch + [["a"]], positions), program)


@settings(max_examples=100, deadline=None)
@given(onehot_count_programs(), st.lists(strings(max_size=10), min_size=1, max_size=4))
def test_onehot_families_at_chosen_positions_equal_the_whole_evaluation_there(program, batch):
    tokens = encode(program, batch)
    whole = evaluate(program, tokens, memory_budget=1 << 16)
    with mock.patch.object(SelectedEvaluator, "keyed_counts", lambda self, code, weights, query: None):
        counted_over_strings = evaluate(program, tokens, memory_budget=1 << 16, positions_BxT=_some_positions(tokens))
    at_chosen = evaluate(program, tokens, memory_budget=1 << 16, positions_BxT=_some_positions(tokens))
    for name in program.names:
        want = whole[name].array[_some_positions(tokens)]
        assert np.array_equal(at_chosen[name].array, want), f"{name}\n{print_program(program)}"
        assert np.array_equal(counted_over_strings[name].array, want), f"{name}\n{print_program(program)}"


@settings(max_examples=60, deadline=None)
@given(onehot_count_programs(), st.lists(strings(max_size=6), min_size=1, max_size=2))
def test_onehot_families_equal_the_reference(program, batch):
    values = evaluate(program, encode(program, batch))
    for name in ("counted", "combined"):
        definition = program.definition(name)
        for b, string in enumerate(batch):
            for i, symbol in itertools.product(range(len(string)), ALPHABET):
                want = reference_value(program, string, definition.use(symbol), i + 1, {})
                assert values[name].array[b, i, ALPHABET.index(symbol)] == want, print_program(program)


def test_uf_output_is_kept_as_a_key_and_a_count_is_read_at_its_group():
    task = get_task("UF", alphabet_size=6)
    program = copy_forward(task.symbols)
    examples = task.sample(np.random.default_rng(0), 5, 4)
    tokens = to_program_ids(examples.tokens, task.vocab, program)
    evaluator = BatchEvaluator(tokens, program.symbol_ids(), count_dtype=np.int16)
    output = program.definition(program.output)
    value = trampoline(evaluator.value(output.use(E.Var("s")), {}))
    assert isinstance(value, OneHot)
    assert check_teacher_forced(program, tokens, examples.prompt_lengths, examples.lengths).correct.all()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_symbol_per_group_is_the_one_symbol_of_each_group_or_none(data):
    B, T, V, G = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 8)), data.draw(st.integers(1, 4)), 3

    def draw_keys(high):
        return np.array(data.draw(st.lists(st.integers(-1, high), min_size=B * T, max_size=B * T)), np.int64)

    keys, groups = draw_keys(V - 1).reshape(B, T), draw_keys(G - 1).reshape(B, T)
    grouped = data.draw(st.booleans())
    table = symbol_per_group(keys, groups if grouped else None, G if grouped else 1)
    seen = {}
    for b, j in itertools.product(range(B), range(T)):
        if keys[b, j] >= 0 and (not grouped or groups[b, j] >= 0):
            seen.setdefault((b, groups[b, j] if grouped else 0), set()).add(int(keys[b, j]))
    if any(len(symbols) > 1 for symbols in seen.values()):
        assert table is None
    else:
        want = np.full((B, G if grouped else 1), -1)
        for (b, g), (symbol,) in seen.items():
            want[b, g] = symbol
        assert np.array_equal(table, want)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_or_and_and_of_keys_equal_their_masks(data):
    V, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 6))
    left, right = (np.array(data.draw(st.lists(st.integers(-1, V - 1), min_size=n, max_size=n)))[None] for _ in "lr")
    union = dense(left, V) | dense(right, V)
    got = or_keys(left, right)
    if (union.sum(axis=2) > 1).any():
        assert got is None
    else:
        assert np.array_equal(dense(got, V), union)
    family = np.array(data.draw(st.lists(st.booleans(), min_size=n * V, max_size=n * V))).reshape(1, n, V)
    assert np.array_equal(dense(key_where_family_holds(left, family), V), dense(left, V) & family)


@pytest.mark.parametrize("kind", ["any", "all"])
def test_a_monotone_quantifier_over_a_family_that_ignores_its_argument(kind):
    # `any v: 0 < d0[v]` with `d0[p0] := 1`: d0's value has no axis for v (the monotone rule once looked for one).
    v, family = E.Var("v"), Definition("d0", ("p0",), E.Number(1))
    quantified = E.Quantified(kind, v, E.Compare("<", E.Number(0), family.use(v)))
    definitions = (family, Definition("d1", (), quantified), Definition("top", (), E.BoolConst(True)))
    program = Program(ALPHABET, definitions, accept="top")
    string = ["a", "b"]
    values = evaluate(program, encode(program, [string]))["d1"].array[0]
    assert values.tolist() == [reference_value(program, string, quantified, i + 1, {}) for i in range(2)] == [True] * 2
