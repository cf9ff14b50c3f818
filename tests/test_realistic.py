"""The realistic copying experiments' parts: the lorem-ipsum generator (deterministic, requested
token length, repeat structure), the alignment analysis (planted errors found at their reference
slots, ambiguity labels), and the git histories and prompts."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.incontext import lorem
from crasplab.incontext.alignment import END, ON_TRACK, START, ambiguous_tokens, analyze, edit_slots
from crasplab.incontext.directions import BACKWARD, FORWARD
from crasplab.incontext.git_history import COMMANDS, EXPLANATION, git_items, history

# Two stand-ins for a tokenizer: bytes (as a byte-level BPE without merges counts) and words.
COUNTS = {"bytes": lambda text: len(text.encode()), "words": lambda text: len(text.split())}


def _settings(seed=0, repeat_word=0.15, repeat_sentence=0.15, demonstrations=2):
    return lorem.LoremSettings(seed, demonstrations, 12, repeat_word, repeat_sentence)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    length=st.integers(1, 300),
    index=st.integers(0, 50),
    count=st.sampled_from(sorted(COUNTS)),
)
def test_a_paragraph_is_the_shortest_word_prefix_reaching_the_requested_tokens(seed, length, index, count):
    count_tokens = COUNTS[count]
    text, demos = _settings(seed).paragraphs(length, index, count_tokens)
    assert count_tokens(text) >= length and text.endswith(".")
    words = text.split()
    if len(words) > 1:
        shorter = " ".join(words[:-1]).rstrip(".") + "."
        assert count_tokens(shorter) < length
    assert len(demos) == 2 and all(count_tokens(demo) >= 12 for demo in demos)
    assert set(word.strip(".").lower() for word in words) <= set(lorem.LATIN_WORDS)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), length=st.integers(1, 200))
def test_paragraphs_are_fixed_by_the_seed_and_two_tokenizers_share_a_word_stream(seed, length):
    by_bytes = _settings(seed).paragraphs(length, 3, COUNTS["bytes"])
    assert by_bytes == _settings(seed).paragraphs(length, 3, COUNTS["bytes"])
    by_words = _settings(seed).paragraphs(length, 3, COUNTS["words"])[0]
    shorter, longer = sorted((by_bytes[0], by_words), key=len)
    assert longer.startswith(shorter[:-1])  # the shorter one's closing period may be added by the cut


def test_other_seeds_indices_and_lengths_give_other_paragraphs():
    first = _settings(0).paragraphs(100, 0, COUNTS["words"])[0]
    assert first != _settings(1).paragraphs(100, 0, COUNTS["words"])[0]
    assert first != _settings(0).paragraphs(100, 1, COUNTS["words"])[0]
    assert not _settings(0).paragraphs(101, 0, COUNTS["words"])[0].startswith(first[:-1])


def _stream(rng, repeat_word, repeat_sentence, sentences=400):
    stream = lorem.sentences(rng, repeat_word, repeat_sentence)
    return [next(stream) for _ in range(sentences)]


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7])
def test_the_share_of_repeated_sentences_follows_its_setting(rate):
    said = _stream(np.random.default_rng(1), 0.0, rate)
    repeats = sum(sentence in said[:k] for k, sentence in enumerate(said))
    assert repeats / len(said) == pytest.approx(rate, abs=0.06)


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7])
def test_the_share_of_repeated_words_follows_its_setting(rate):
    # 400 sentences run through the word list several times: count repeats only within each pass.
    words = [word for sentence in _stream(np.random.default_rng(2), rate, 0.0, sentences=25) for word in sentence]
    repeats = sum(word in words[:k] for k, word in enumerate(words))
    assert repeats / len(words) == pytest.approx(rate, abs=0.1)
    assert len(set(words)) < len(lorem.LATIN_WORDS)  # still inside the first pass through the list


def test_without_repeats_no_word_comes_twice_and_every_token_has_one_successor():
    text, _ = _settings(repeat_word=0.0, repeat_sentence=0.0).paragraphs(150, 0, COUNTS["words"])
    words = [word.strip(".").lower() for word in text.split()]
    assert len(words) == len(set(words)) and ambiguous_tokens(text.split()) == set()


def test_with_repeats_some_words_have_several_successors():
    text, _ = _settings(repeat_word=0.3, repeat_sentence=0.3).paragraphs(150, 0, COUNTS["words"])
    assert ambiguous_tokens(text.split())


def test_the_word_list_holds_distinct_lowercase_words():
    assert len(set(lorem.LATIN_WORDS)) == len(lorem.LATIN_WORDS) == 206
    assert all(re.fullmatch("[a-z]+", word) for word in lorem.LATIN_WORDS)


def test_prompts_ask_for_the_same_paragraph_in_both_directions():
    count = COUNTS["words"]
    forward = _settings().items(FORWARD, 40, 2, count)
    backward = _settings().items(BACKWARD, 40, 2, count)
    for ahead, behind in zip(forward, backward):
        assert ahead.reference.split() == behind.reference.split()[::-1]
        blocks = ahead.prompt.split("\n\n")
        assert blocks[0] == lorem.INSTRUCTIONS[False] and behind.prompt.split("\n\n")[0] == lorem.INSTRUCTIONS[True]
        assert len(blocks) == 2 + 2 and blocks[-1] == f"Text: {ahead.reference}\nAnswer:"
        for block in behind.prompt.split("\n\n")[1:-1]:
            text, answer = re.fullmatch(r"Text: (.*)\nAnswer: (.*)", block).groups()
            assert answer.split() == text.split()[::-1]


# Alignment ---------------------------------------------------------------------------------------


def test_ambiguity_labels_on_a_hand_made_reference():
    # successors: START -> a; a -> b, c; b -> a; c -> END
    assert ambiguous_tokens("abac") == {"a"}
    # "." is followed by "b" and by END; START is followed by "a" only
    assert ambiguous_tokens(["a", ".", "b", "."]) == {"."}
    assert ambiguous_tokens([]) == set() and ambiguous_tokens("aa") == {"a"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=30))
def test_ambiguity_matches_its_definition(reference):
    extended = [START, *reference, END]
    expected = {
        extended[i]
        for i in range(len(extended) - 1)
        for j in range(len(extended) - 1)
        if extended[i] == extended[j] and extended[i + 1] != extended[j + 1]
    }
    assert ambiguous_tokens(reference) == expected


def test_a_substitution_after_an_ambiguous_token_is_a_first_error_there():
    result = analyze("abac", "abab")  # slot 3 (c) follows "a", which is ambiguous
    assert result.first_errors == (3,) and result.first_errors_ambiguous == 1 and result.edits == 1
    assert (result.reached_ambiguous, result.reached_unambiguous) == (2, 2)  # the stop after the error is not reached
    result = analyze("abac", "abaxc")  # an insertion before c
    assert result.first_errors == (3,) and result.wrong == 1
    result = analyze("abac", "abacc")  # an insertion at the end: slot 4, after the unambiguous c
    assert result.first_errors == (4,) and result.first_errors_ambiguous == 0


def test_a_chance_match_in_a_derailed_copy_is_not_a_reached_transition():
    # Off the rails after "a b", the output matches the reference's "." at slot 3 by chance; the
    # slot after it is wrong but is not charged to ".", which has two successors.
    reference = list("abc.de.fg")
    assert edit_slots(reference, list("abx.yzwvu")) == [2, 4, 5, 6, 7, 8]
    result = analyze(reference, list("abx.yzwvu"))
    assert result.first_errors == (2,)  # only where the copy left the reference
    assert result.reached_ambiguous == 0 and result.reached_unambiguous == 3


PLANTS = st.sampled_from(["substitute", "insert", "delete"])


@settings(max_examples=100, deadline=None)
@given(length=st.integers(1, 60), data=st.data())
def test_planted_errors_are_found_at_their_reference_slots(length, data):
    # Distinct tokens and errors more than ON_TRACK slots apart: the planted edits are then the
    # only cheapest alignment, so their slots are fixed, and the copy is on track at each of them.
    reference = list(range(length))
    slots = sorted(data.draw(st.sets(st.integers(0, length), max_size=max(1, length // 4))))
    slots = [slot for k, slot in enumerate(slots) if k == 0 or slot - slots[k - 1] > ON_TRACK]
    kinds = {slot: data.draw(PLANTS if slot < length else st.just("insert")) for slot in slots}
    output = []
    for slot in range(length + 1):
        kind = kinds.get(slot)
        if kind == "insert":
            output.append(1000 + slot)
        if slot < length and kind != "delete":
            output.append(2000 + slot if kind == "substitute" else reference[slot])
    assert sorted(edit_slots(reference, output)) == slots
    result = analyze(reference, output)
    assert result.first_errors == tuple(slots) and result.edits == result.wrong == len(slots)
    assert result.exact == (not slots)
    assert result.reached_ambiguous == 0  # distinct tokens: every successor is unique
    derailed = {later for slot in slots for later in range(slot + 1, slot + ON_TRACK + 1) if later <= length}
    assert result.reached_unambiguous == length + 1 - len(derailed)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=40), st.lists(st.sampled_from("abcx"), max_size=40))
def test_every_transition_is_reached_or_follows_an_error(reference, output):
    result = analyze(reference, output)
    reached = result.reached_ambiguous + result.reached_unambiguous
    assert 1 <= reached <= result.slots and result.slots - reached <= ON_TRACK * result.wrong
    assert len(result.first_errors) <= result.wrong <= result.edits
    assert result.exact == (list(reference) == list(output))


# git ---------------------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), commits=st.integers(1, 60))
def test_histories_have_distinct_seven_hex_hashes(seed, commits):
    log = history(np.random.default_rng(seed), commits)
    assert len(log) == commits == len({commit.hash for commit in log})
    assert all(re.fullmatch("[0-9a-f]{7}", commit.hash) and commit.message for commit in log)


def test_revert_lists_the_log_in_order_and_cherry_pick_in_reverse_with_the_same_explanation():
    revert = git_items("revert", 6, 2, seed=5, examples=3, example_commits=4)
    pick = git_items("cherry-pick", 6, 2, seed=5, examples=3, example_commits=4)
    assert COMMANDS["revert"] is FORWARD and COMMANDS["cherry-pick"] is BACKWARD
    for forward, backward in zip(revert, pick):
        forward_blocks, backward_blocks = forward.prompt.split("\n\n"), backward.prompt.split("\n\n")
        assert forward_blocks[0] == backward_blocks[0] == EXPLANATION and len(forward_blocks) == 1 + 3 + 1
        for blocks, command in ((forward_blocks, "revert"), (backward_blocks, "cherry-pick")):
            for block in blocks[1:]:
                lines = block.split("\n")
                log = [line.split(" ", 1)[0] for line in lines[1:-2]]
                assert lines[0] == "History:" and lines[-2] == f"Command: git {command}"
                if block is not blocks[-1]:
                    answer = lines[-1].removeprefix("Hashes: ").split()
                    assert answer == (log if command == "revert" else log[::-1]) and len(log) == 4
        test_log = [line.split(" ", 1)[0] for line in forward_blocks[-1].split("\n")[1:-2]]
        assert forward.expected.split() == test_log == backward.expected.split()[::-1]
        assert forward_blocks[-1].endswith("Hashes:") and forward_blocks[1:-1] != backward_blocks[1:-1]
    assert revert == git_items("revert", 6, 2, seed=5, examples=3, example_commits=4)
    assert revert != git_items("revert", 6, 2, seed=6, examples=3, example_commits=4)


def test_the_paragraph_gap_resamples_prompts_and_needs_enough_of_them():
    from crasplab.reports.realistic import _paragraph_gap
    from crasplab.reports.statistics import MIN_CLUSTERS

    # One prompt reaches ambiguous transitions: a bootstrap over it would draw one value.
    few = [(9, 10, 0, 0)] * (MIN_CLUSTERS + 3) + [(9, 10, 3, 4)] * (MIN_CLUSTERS - 1)
    assert _paragraph_gap(few) is None
    enough = [(19, 20, 6, 10)] * MIN_CLUSTERS + [(18, 20, 9, 10)] * MIN_CLUSTERS
    entry = _paragraph_gap(enough)
    assert entry["value"] == pytest.approx(37 / 40 - 15 / 20) and entry["low"] <= entry["value"] <= entry["high"]
