"""The calibration study's analysis scripts read what the task samplers wrote."""

from math import comb, sqrt
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.tasks import get_task
from experiments.calibration.last_occurrence_distance import DISTANCE_GROUPS, distances_from_end, strings_by_distance
from experiments.calibration.last_occurrence_window import SAMPLERS, window_agreement

ROOT = Path(__file__).resolve().parents[1]


@settings(max_examples=25, deadline=None)
@given(code=st.sampled_from(["NLLast", "NRLast"]), length=st.integers(3, 40), seed=st.integers(0, 2**16))
def test_distance_from_end_points_at_the_occurrence_whose_neighbour_is_the_answer(code, length, seed):
    """Counting back `distance` symbols from the end of the context lands on the last occurrence of
    the query, and its neighbour on the task's side is the answer: a misread token layout breaks it."""
    task = get_task(code)
    examples = task.sample(np.random.default_rng(seed), 20, length)
    step = -1 if code == "NLLast" else 1
    for tokens, prompt_length, distance in zip(
        examples.tokens, examples.prompt_lengths, distances_from_end(examples.tokens, examples.prompt_lengths)
    ):
        context, query = tokens[1 : prompt_length - 2], tokens[prompt_length - 1]
        position = len(context) - 1 - distance
        assert context[position] == query and query not in context[position + 1 :]
        assert context[position + step] == tokens[prompt_length]


@settings(max_examples=5, deadline=None)
@given(code=st.sampled_from(["NLLast", "NRLast"]), per_group=st.integers(1, 30))
def test_strings_by_distance_fill_every_group_with_strings_of_that_distance(code, per_group):
    """Each group holds exactly `per_group` strings, all at a distance inside the group's range:
    a string filed under the wrong group would blur the far-occurrence column."""
    groups = strings_by_distance(get_task(code), 40, per_group)
    assert len(groups) == len(DISTANCE_GROUPS)
    for (tokens_NxT, prompt_lengths_N, lengths_N), (lo, hi) in zip(groups, DISTANCE_GROUPS):
        assert len(tokens_NxT) == len(prompt_lengths_N) == len(lengths_N) == per_group
        distance_N = distances_from_end(tokens_NxT, prompt_lengths_N)
        assert np.all((distance_N >= lo) & (distance_N <= hi))


WINDOW = 20


def exact_window_agreement(sampler: str, length: int) -> float:
    """The probability that NLLast's window-20 program is right, from the sampler's definition: it
    is right exactly when the query occurs among the last WINDOW context tokens. Exactly twice:
    the two occurrences are a uniform 2-subset of the positions. i.i.d. over 5 symbols: fix the
    query symbol (by symmetry); its count c is Binomial(length, 1/5), weighted by c (the query is
    the token at a uniform context position) and kept for c >= 2, at a uniform c-subset."""
    outside = max(length - WINDOW, 0)
    if sampler == "the query exactly twice, 5 symbols":
        return 1 - comb(outside, 2) / comb(length, 2)
    weight_of_count = {c: comb(length, c) * 4 ** (length - c) * c for c in range(2, length + 1)}
    return sum(w * (1 - comb(outside, c) / comb(length, c)) for c, w in weight_of_count.items()) / sum(
        weight_of_count.values()
    )


@settings(max_examples=6, deadline=None)
@given(sampler=st.sampled_from(list(SAMPLERS)), length=st.sampled_from([10, 20, 25, 40, 80, 150]))
def test_the_exact_window_agreement_is_what_the_sampler_gives(sampler, length):
    """The closed form agrees with 2000 strings of the task's own sampler (seeded, so no flakes)
    within four standard errors, and where the whole context fits the window both give exactly 1:
    a closed form for another sampler (the two are 0.24-0.74 apart at lengths 40-150) fails."""
    sampled = window_agreement("NLLast", sampler, WINDOW, [length], samples=2000)[0]
    exact = exact_window_agreement(sampler, length)
    assert abs(sampled - exact) <= 4 * sqrt(exact * (1 - exact) / 2000) + 1e-12


def test_the_documented_window_table_holds_the_exact_agreement():
    """docs/interpreter.md's NLLast table (window 20, lengths 20 / 40 / 150): the exact values, not a sample's."""
    lines = (ROOT / "docs" / "interpreter.md").read_text().splitlines()
    start = lines.index("| sampler | window | length 20 | 40 | 150 |")
    rows = [line.strip("|").split(" | ") for line in lines[start + 2 : start + 2 + len(SAMPLERS)]]
    assert [row[0].strip() for row in rows] == list(SAMPLERS)
    for sampler, window, *cells in rows:
        assert int(window) == WINDOW
        assert [cell.strip() for cell in cells] == [
            f"{exact_window_agreement(sampler.strip(), n):.3f}" for n in (20, 40, 150)
        ]
