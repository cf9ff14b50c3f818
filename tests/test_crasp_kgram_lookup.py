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
                if (m + step) - position <= lookup.window:
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
    window=st.integers(1, 30),
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


def test_a_window_over_the_training_strings_passes_forward_copying_to_twice_the_length_but_not_backward():
    """What the discrimination check finds at the lab's scale (L = 20): the (L+1)-gram lookup
    within 2L + 1 positions copies forward up to length 2L + 1 and no further, while backward its
    <eos> lies 2m + 1 back, out of reach past L."""
    for code, passes in (("NF", (True, False)), ("NB", (False, False))):
        request = Request(get_task(code), (1, 20), ((31, 41), (42, 50)), strings=200, training_samples=20)
        rows = [row for row in discriminate(request) if row.approximation.startswith("21-gram")]
        assert rows and all(row.exact_on_training for row in rows)
        best = tuple(max(row.scores[k].accuracy for row in rows) >= 0.9 for k in range(2))
        assert best == passes
        assert bins_discriminating(rows, request) == tuple(not p for p in passes)


@pytest.mark.parametrize("backward", [False, True])
def test_the_checked_lookups_include_one_exact_on_every_training_string(backward):
    names = [name for name, lookup in kgram_lookups(20, backward) if lookup.k == 21]
    assert names and all("window 41" in name or "window 20" in name for name in names)


def test_a_lookup_refuses_a_bound_out_of_range():
    with pytest.raises(ValueError, match="k must be an integer"):
        KGramLookup(0, 5, "last", False)
    with pytest.raises(ValueError, match="occurrence must be one of"):
        KGramLookup(1, 5, "nearest", False)
