"""The spread sampler of the non-unique retrieval tasks (occurrences="spread"): k uniform in
2..n//2, the retrieved occurrence at a uniform distance D from its end, the others beyond it;
(D, k) recovered from any batch by occurrence_cells; the paper's samplers unchanged; and the
official code's (NLLast without a last occurrence in the final slot, UL and UR over 5 symbols);
and the repeat-break sampler of copying with repeats."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.approximations import KGramLookup
from crasp.discrimination import task_with_sampler
from crasp.tasks import ParameterError, SamplerError, get_task
from crasp.tasks.copying import MAX_PERIOD, MAX_TAIL

CODES = ("NLFirst", "NRFirst", "NLLast", "NRLast")
# The end slot is excluded where the retrieved occurrence's answer would leave the context.
LOWEST_DISTANCE = {"NLFirst": 1, "NRFirst": 0, "NLLast": 0, "NRLast": 1}


def cell_by_hand(code: str, inputs: list[str], query: str) -> tuple[int, int]:
    """(D, k) read off the symbols: D counted from the start for "first", from the end for "last"."""
    places = [i for i, symbol in enumerate(inputs) if symbol == query]
    distance = places[0] if code.endswith("First") else len(inputs) - 1 - places[-1]
    return distance, len(places)


def chi_square_bound(degrees: int, z: float = 5.0) -> float:
    """The chi-square quantile at about 1 - 3e-7 (Wilson-Hilferty): a correct sampler exceeds it
    about once in three million runs."""
    return degrees * (1 - 2 / (9 * degrees) + z * np.sqrt(2 / (9 * degrees))) ** 3


def chi_square(observed: Counter, expected: dict) -> float:
    assert set(observed) <= set(expected), f"cells outside the support: {set(observed) - set(expected)}"
    return sum((observed.get(cell, 0) - e) ** 2 / e for cell, e in expected.items())


@settings(max_examples=60, deadline=None)
@given(
    code=st.sampled_from(CODES), alphabet=st.integers(2, 7), length=st.integers(4, 60), seed=st.integers(0, 2**32 - 1)
)
def test_spread_strings_are_task_strings_with_d_and_k_in_range(code, alphabet, length, seed):
    task = get_task(code, alphabet_size=alphabet, occurrences="spread")
    examples = task.sample(np.random.default_rng(seed), 8, length)
    distances, counts = task.occurrence_cells(examples)
    for row, (inputs, query) in enumerate(zip(examples.inputs, examples.queries)):
        assert task.answer(inputs, query) == examples.answers[row]  # the reference answer of the task
        d, k = cell_by_hand(code, inputs, query)
        assert (distances[row], counts[row]) == (d, k)
        assert 2 <= k <= length // 2 and LOWEST_DISTANCE[code] <= d <= length - k


@settings(max_examples=30, deadline=None)
@given(
    code=st.sampled_from(CODES),
    occurrences=st.sampled_from(["iid", (2, 2), (2, None)]),
    length=st.integers(5, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_occurrence_cells_read_any_sampler(code, occurrences, length, seed):
    task = get_task(code, occurrences=occurrences)
    examples = task.sample(np.random.default_rng(seed), 8, length)
    cells = list(zip(*task.occurrence_cells(examples)))
    assert cells == [cell_by_hand(code, inputs, query) for inputs, query in zip(examples.inputs, examples.queries)]


@pytest.mark.parametrize("code", CODES)
def test_k_is_uniform_and_d_is_uniform_given_k(code):
    length, n = 13, 30_000
    task = get_task(code, occurrences="spread")
    distances, counts = task.occurrence_cells(task.sample(np.random.default_rng(1), n, length))
    ks = range(2, length // 2 + 1)
    k_expected = {k: n / len(ks) for k in ks}
    assert chi_square(Counter(counts.tolist()), k_expected) < chi_square_bound(len(ks) - 1)
    lowest = LOWEST_DISTANCE[code]
    pair_expected = {(k, d): n / len(ks) / (length - k + 1 - lowest) for k in ks for d in range(lowest, length - k + 1)}
    observed = Counter(zip(counts.tolist(), distances.tolist()))
    assert chi_square(observed, pair_expected) < chi_square_bound(len(pair_expected) - 1)


def test_the_other_occurrences_are_uniform_beyond_the_retrieved_one():
    """NLLast with k = 3 at D = 0 on length 8: the other two sit on a uniform pair of the 7 slots before."""
    task = get_task("NLLast", occurrences="spread")
    examples = task.sample(np.random.default_rng(2), 40_000, 8)
    distances, counts = task.occurrence_cells(examples)
    pairs = Counter(
        tuple(i for i, s in enumerate(inputs[:-1]) if s == query)
        for inputs, query, d, k in zip(examples.inputs, examples.queries, distances, counts)
        if d == 0 and k == 3
    )
    expected = {(a, b): sum(pairs.values()) / 21 for a in range(7) for b in range(a + 1, 7)}
    assert chi_square(pairs, expected) < chi_square_bound(20)


def test_the_other_tokens_are_uniform_among_the_symbols_but_the_query():
    task = get_task("NRLast", occurrences="spread")
    examples = task.sample(np.random.default_rng(3), 20_000, 10)
    others = Counter(
        (task.symbols.index(s) - task.symbols.index(q)) % 5
        for inputs, q in zip(examples.inputs, examples.queries)
        for s in inputs
        if s != q
    )
    assert 0 not in others
    assert chi_square(others, {k: sum(others.values()) / 4 for k in range(1, 5)}) < chi_square_bound(3)


def test_the_paper_samplers_draw_what_they_drew_before_the_spread_sampler():
    """The committed runs depend on them: digest of their tokens, computed with the code of 553bd9f."""
    digest = hashlib.sha256()
    for code in CODES:
        for occurrences, adjacent in [
            ("iid", False),
            ("iid", True),
            ((2, 2), False),
            ((2, None), True),
            ((3, 7), False),
        ]:
            task = get_task(code, occurrences=occurrences, non_adjacent=adjacent)
            digest.update(task.sample(np.random.default_rng(7), 50, 40).tokens.tobytes())
    assert digest.hexdigest() == "545793b5994e69bddee8ba933a8e916e8cfa8988032187787f430b5024627a43"


@settings(max_examples=20, deadline=None)
@given(code=st.sampled_from(CODES), length=st.integers(3, 40), seed=st.integers(0, 2**32 - 1))
def test_the_official_sampler_keeps_both_last_occurrences_off_the_final_slot(code, length, seed):
    """As the official code draws them; for the "first" tasks it is the paper's i.i.d. sampler."""
    official = get_task(code, occurrences="official")
    examples = official.sample(np.random.default_rng(seed), 30, length)
    distances, counts = official.occurrence_cells(examples)
    assert (counts >= 2).all() and (distances >= LOWEST_DISTANCE[code] + (code == "NLLast")).all()
    if code.endswith("First") or code == "NRLast":
        same = get_task(code).sample(np.random.default_rng(seed), 30, length)
        assert (same.tokens == examples.tokens).all()


def test_the_spread_sampler_is_named_in_json_as_the_training_side_stores_it():
    task = get_task("NLLast", occurrences="spread")
    again = get_task("NLLast", **json.loads(json.dumps(task.params)))
    assert again == task and again.occurrences == "spread"


def test_what_the_spread_sampler_refuses():
    with pytest.raises(ParameterError, match="accepted with it: non_adjacent=False"):
        get_task("NRLast", occurrences="spread", non_adjacent=True)
    with pytest.raises(ParameterError, match='accepted: "iid", "official", "spread", or a pair'):
        get_task("NRLast", occurrences="far")
    with pytest.raises(SamplerError, match="the context has at least 4 tokens.*accepted lengths .*: 4 to 16384"):
        get_task("NLFirst", occurrences="spread").sample(np.random.default_rng(0), 1, 3)


@settings(max_examples=20, deadline=None)
@given(code=st.sampled_from(["UL", "UR"]), length=st.integers(2, 40), seed=st.integers(0, 2**32 - 1))
def test_the_official_sampler_draws_unique_retrieval_over_five_symbols_with_the_query_once(code, length, seed):
    """As the official code draws UL and UR (the library's default alphabet is 150 symbols)."""
    official = task_with_sampler(code, "official")
    examples = official.sample(np.random.default_rng(seed), 30, length)
    for inputs, query, answer in zip(examples.inputs, examples.queries, examples.answers):
        assert set(inputs) <= set(official.symbols) and len(official.symbols) == 5
        assert inputs.count(query) == 1
        assert answer == official.answer(inputs, query)


def _shape(string: list[int]) -> tuple[int, int] | None:
    """(period, stretch) of a repeat-break string in copy order: the longest periodic prefix
    (period <= MAX_PERIOD) followed by a token that breaks it; None if there is none."""
    for stretch in range(len(string) - 1, 0, -1):
        for period in range(1, min(MAX_PERIOD, stretch) + 1):
            prefix = string[:stretch]
            if all(prefix[i] == prefix[i - period] for i in range(period, stretch)):
                if string[stretch] != string[stretch - period]:
                    return period, stretch
    return None


@settings(max_examples=60, deadline=None)
@given(
    backward=st.booleans(),
    length=st.integers(2, 60),
    start=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_repeat_break_strings_hold_a_broken_period_from_their_length_on_and_mislead_every_long_lookup(
    backward, length, start, seed
):
    """Below `repeat_break_from` the sampler draws what the i.i.d. one draws, bit for bit; from
    it on, every input (in copy order) is a periodic stretch and a token that breaks the period,
    with at most MAX_TAIL tokens after it; and where the stretch holds k + period tokens, the
    k-gram lookup with no window answers wrong at the first occurrence (and, for the longest such
    key, at the last)."""
    code = "NB" if backward else "NF"
    shaped, plain = get_task(code, repeat_break_from=start), get_task(code)
    examples = shaped.sample(np.random.default_rng(seed), 12, length)
    if length < start:
        assert np.array_equal(examples.tokens, plain.sample(np.random.default_rng(seed), 12, length).tokens)
        return
    for row in range(12):
        inputs = examples.tokens[row, 1 : 1 + length].tolist()
        found = _shape(inputs[::-1] if backward else inputs)
        assert found is not None
        period, stretch = found
        assert length - 1 - stretch <= MAX_TAIL
        one = slice(row, row + 1)

        def right(k: int, occurrence: str) -> bool:
            lookup = KGramLookup(k, None, occurrence, backward)
            return lookup.correct(examples.tokens[one], examples.prompt_lengths[one], examples.lengths[one])[0]

        # The key before the break recurs `period` tokens earlier: its first occurrence reads the
        # period's token where the break stands.
        for k in sorted({1, (stretch - period + 1) // 2, stretch - period}) if stretch > period else ():
            assert not right(k, "first")
        # The key ending `period` before the break recurs last right before it, and reads the
        # break; an occurrence ending after the break would hold the break, where the key is periodic.
        tail = length - 1 - stretch
        if stretch - period >= period + tail + 1:
            assert not right(stretch - period, "last")
