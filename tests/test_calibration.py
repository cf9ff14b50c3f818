"""The calibration study's analysis scripts read what the task samplers wrote."""

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
    for tokens, prompt_length, distance in zip(examples.tokens, examples.prompt_lengths,
                                               distances_from_end(examples.tokens, examples.prompt_lengths)):
        context, query = tokens[1:prompt_length - 2], tokens[prompt_length - 1]
        position = len(context) - 1 - distance
        assert context[position] == query and query not in context[position + 1:]
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


def test_the_readme_window_table_is_what_last_occurrence_window_prints():
    """The README's NLLast table (window 20, lengths 20 / 40 / 150, 500 strings) recomputed."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| sampler | window | length 20 | 40 | 150 |")
    rows = [line.strip("|").split(" | ") for line in lines[start + 2:start + 2 + len(SAMPLERS)]]
    assert [row[0].strip() for row in rows] == list(SAMPLERS)
    for sampler, window, *cells in rows:
        agreement = window_agreement("NLLast", sampler.strip(), int(window), [20, 40, 150], samples=500)
        assert [cell.strip() for cell in cells] == [f"{a:.2f}" for a in agreement]
