"""Window programs for the last-occurrence tasks: right exactly when the last occurrence is near the end."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.approximations import SIDE_OF_TASK as SIDE
from crasp.approximations import last_within_window
from crasp.check import agreement_by_length, correct_answers
from crasp.fragment import fragment_of
from crasp.tasks import SamplerError, get_task


def last_occurrence_distance(inputs: list[str], query: str) -> int:
    """How many context tokens follow the query's last occurrence (0: it is the last token)."""
    return len(inputs) - 1 - max(i for i, symbol in enumerate(inputs) if symbol == query)


@settings(max_examples=40, deadline=None)
@given(
    code=st.sampled_from(sorted(SIDE)),
    occurrences=st.sampled_from(["iid", (2, 2), (2, None)]),
    alphabet=st.integers(3, 7),
    length=st.integers(3, 45),
    window=st.integers(2, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_window_program_is_right_exactly_when_the_last_occurrence_is_inside_the_window(
    code, occurrences, alphabet, length, window, seed
):
    task = get_task(code, alphabet_size=alphabet, occurrences=occurrences)
    examples = task.sample(np.random.default_rng(seed), 6, length)
    correct_N = correct_answers(task, last_within_window(SIDE[code], window)(task.symbols), examples)
    query_symbols = [task.vocab[q] for q in examples.tokens[np.arange(6), examples.prompt_lengths - 1]]
    inside_N = [
        last_occurrence_distance(inputs, query) < window for inputs, query in zip(examples.inputs, query_symbols)
    ]
    assert correct_N.tolist() == inside_N


@pytest.mark.parametrize("code", sorted(SIDE))
def test_a_window_as_long_as_the_training_strings_fits_every_training_length(code):
    """Why a model trained on lengths 1-20 may have learned the window program instead of the task."""
    task = get_task(code)
    program = last_within_window(SIDE[code], 20)(task.symbols)
    lengths = range(task.min_length(), 21)
    assert set(agreement_by_length(task, program, lengths, samples_per_length=30).values()) == {1.0}
    assert fragment_of(program).name == "C-RASP[local]"


def test_on_the_iid_sampler_the_window_keeps_its_accuracy_and_with_two_occurrences_it_falls():
    """The finding of experiments/calibration/last_occurrence_window.py, at two lengths."""
    iid, two = get_task("NLLast"), get_task("NLLast", occurrences=(2, 2))
    program = last_within_window("left", 20)(iid.symbols)
    on_iid = agreement_by_length(iid, program, [40, 150], samples_per_length=300)
    on_two = agreement_by_length(two, program, [40, 150], samples_per_length=300)
    assert min(on_iid.values()) > 0.95
    assert on_two[40] < 0.9 and on_two[150] < 0.4


@pytest.mark.parametrize(
    "side, window, message",
    [
        ("up", 3, "side must be one of"),
        ("left", 0, "window must be"),
        ("right", 1, "window must be an integer from 2 to 16384"),
        ("right", 2.5, "window must be"),
    ],
)
def test_bad_window_arguments_say_what_is_accepted(side, window, message):
    with pytest.raises(ValueError, match=message):
        last_within_window(side, window)


def test_a_length_the_sampler_cannot_produce_is_refused_with_the_accepted_lengths():
    task = get_task("NLLast")
    with pytest.raises(SamplerError, match="accepted lengths"):
        agreement_by_length(task, last_within_window("left", 3)(task.symbols), [1])
