"""k-gram lookups, the copying approximations of the discrimination check: checked against a
plain reading of their definition, and for the properties that decide what they can pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.approximations import OCCURRENCES, KGramLookup, kgram_lookups
from crasp.discrimination import Request, bins_discriminating, discriminate
from crasp.tasks import get_task


def reference(lookup: KGramLookup, inputs: list[int], answer: list[int]) -> bool:
    """The lookup on one string, step by step as its docstring says ("S" and "E": the input's
    ends; `answer` ends with "E" for <eos>)."""
    m = len(inputs)
    framed = ["S"] + (inputs[::-1] if lookup.backward else inputs) + ["E"]
    so_far = ["S"] + answer
    for step in range(1, len(answer) + 1):
        key = so_far[max(0, step - lookup.k) : step]
        found = []  # (distance back of the token read, that token)
        for end in range(len(key) - 1, m + 1):
            if framed[end - len(key) + 1 : end + 1] == key:
                read = end + 1
                position = m + 1 - read if lookup.backward else read
                if lookup.window is None or (m + step) - position <= lookup.window:
                    found.append(((m + step) - position, framed[read]))
        if not found:
            return False
        chosen = min(found) if lookup.occurrence == "last" else max(found)
        if chosen[1] != answer[step - 1]:
            return False
    return True


def _framed(examples, row: int) -> tuple[list[int], list]:
    m = int(examples.input_lengths[row])
    inputs = examples.tokens[row, 1 : 1 + m].tolist()
    answer = examples.tokens[row, examples.prompt_lengths[row] : examples.lengths[row] - 1].tolist() + ["E"]
    return inputs, answer


lookups = st.builds(
    KGramLookup,
    k=st.integers(1, 12),
    window=st.none() | st.integers(1, 30),
    occurrence=st.sampled_from(OCCURRENCES),
    backward=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(lookup=lookups, alphabet=st.integers(2, 6), length=st.integers(1, 14), seed=st.integers(0, 2**32 - 1))
def test_the_lookup_does_what_its_definition_says(lookup, alphabet, length, seed):
    task = get_task("NB" if lookup.backward else "NF", alphabet_size=alphabet)
    examples = task.sample(np.random.default_rng(seed), 8, length)
    right = lookup.correct(examples.tokens, examples.prompt_lengths, examples.lengths)
    assert right.tolist() == [reference(lookup, *_framed(examples, row)) for row in range(8)]


def _needed_window(length: int, backward: bool) -> int:
    """How far back copying reads: the input length forward; 2m + 1 backward (its <eos>)."""
    return 2 * length + 1 if backward else length


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 8),
    occurrence=st.sampled_from(OCCURRENCES),
    backward=st.booleans(),
    length=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_where_every_key_is_unique_the_lookup_copies_exactly(k, occurrence, backward, length, seed):
    """Over distinct tokens (UF, UB) every key occurs once in the input, so with a window that
    reaches what copying reads, every lookup answers the task's answer, at any k."""
    task = get_task("UB" if backward else "UF", alphabet_size=40)
    examples = task.sample(np.random.default_rng(seed), 20, length)
    lookup = KGramLookup(k, _needed_window(length, backward), occurrence, backward)
    assert lookup.correct(examples.tokens, examples.prompt_lengths, examples.lengths).all()
    # one step less of window, and the farthest read is out of reach on every string
    short = KGramLookup(k, _needed_window(length, backward) - 1, occurrence, backward) if length > 1 else None
    if short is not None:
        assert not short.correct(examples.tokens, examples.prompt_lengths, examples.lengths).any()


@settings(max_examples=40, deadline=None)
@given(
    occurrence=st.sampled_from(OCCURRENCES),
    backward=st.booleans(),
    alphabet=st.integers(2, 3),
    length=st.integers(1, 25),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_key_as_long_as_the_answer_is_anchored_at_its_start_and_repeats_cannot_mislead_it(
    occurrence, backward, alphabet, length, seed
):
    """With k > the input length the key always holds the answer's start, which occurs once:
    exact on inputs full of repeats; with k = 1, a window over the whole string and every token
    alike, it misses the end of every string longer than one token."""
    task = get_task("NB" if backward else "NF", alphabet_size=alphabet)
    examples = task.sample(np.random.default_rng(seed), 10, length)
    window = _needed_window(length, backward)
    anchored = KGramLookup(length + 1, window, occurrence, backward)
    assert anchored.correct(examples.tokens, examples.prompt_lengths, examples.lengths).all()
    if length > 1:
        tokens = examples.tokens.copy()
        symbol = tokens[0, 1]
        tokens[:, 1 : 1 + length] = symbol  # every input token alike, and so every answer token
        tokens[:, length + 2 : 2 * length + 2] = symbol
        assert anchored.correct(tokens, examples.prompt_lengths, examples.lengths).all()
        # (over the whole string: a window of exactly m forward would itself pick the right token)
        unigram = KGramLookup(1, 2 * length + 1, occurrence, backward)
        assert not unigram.correct(tokens, examples.prompt_lengths, examples.lengths).any()


@pytest.mark.parametrize("code", ["NF", "NB"])
def test_on_iid_strings_an_unwindowed_lookup_exact_on_training_copies_every_bin_so_none_discriminates(code):
    """The audit's finding (issue 59): the (L+1)-gram lookup at the first occurrence, with no window,
    is exact on the training lengths (its key holds the answer's start there) and copies i.i.d.
    strings over 5 symbols at any length, forward and backward: no copying bin of i.i.d. strings
    can tell copying from it. The check said the contrary while its windows stopped at 2L + 1."""
    request = Request(get_task(code), (1, 20), ((31, 41), (51, 64)), strings=100, training_samples=10)
    rows = [row for row in discriminate(request) if row.approximation.startswith("21-gram")]
    unwindowed = [row for row in rows if row.approximation.endswith("no window")]
    assert unwindowed and all(row.exact_on_training for row in rows)
    assert all(score.accuracy >= 0.95 for row in unwindowed for score in row.scores)
    assert bins_discriminating(rows, request) == (False, False)


@pytest.mark.parametrize("code", ["NF", "NB"])
def test_on_repeat_break_strings_every_lookup_exact_on_training_fails_beyond_twice_the_length(code):
    """The repeat-break sampler (a periodic stretch, then a break) is drawn so that every k-gram
    lookup with k <= L + 1, windowed or not, at the first or last occurrence, is misled: at
    lengths 31-40 after training at 1-20, every member of the family exact on the training lengths
    scores far below the threshold, and the bins discriminate."""
    task = get_task(code, repeat_break_from=21)
    request = Request(task, (1, 20), ((21, 30), (31, 40)), strings=100, training_samples=10)
    rows = discriminate(request)
    exact = [row for row in rows if row.exact_on_training]
    assert {row.approximation.split("-gram")[0] for row in exact} >= {"21", "12", "8"}
    assert max(row.scores[1].accuracy for row in exact) < 0.3
    assert bins_discriminating(rows, request) == (True, True)


@pytest.mark.parametrize("backward", [False, True])
def test_the_checked_family_holds_every_key_length_occurrence_and_window_including_none(backward):
    family = [lookup for _, lookup in kgram_lookups(20, backward)]
    needed = 41 if backward else 20
    assert {(lookup.k, lookup.window, lookup.occurrence) for lookup in family} == {
        (k, window, occurrence) for k in range(1, 22) for window in {needed, 41, None} for occurrence in OCCURRENCES
    }


def test_a_lookup_refuses_a_bound_out_of_range():
    with pytest.raises(ValueError, match="k must be an integer"):
        KGramLookup(0, 5, "last", False)
    with pytest.raises(ValueError, match="occurrence must be one of"):
        KGramLookup(1, 5, "nearest", False)
