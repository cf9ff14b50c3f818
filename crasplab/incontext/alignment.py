"""Where a copy goes wrong: the output aligned to the reference token by token, each error placed
at a reference slot, and each slot's transition token labelled ambiguous or not.

A reference r_0 .. r_{n-1} has n + 1 slots: one per token and the stop after the last. Slot i is
wrong when the global alignment (Levenshtein: unit-cost substitution, insertion and deletion,
computed by rapidfuzz) substitutes or deletes r_i, or inserts output tokens just before it (for
slot n: after the last token). The transition token of slot i is the token before it: r_{i-1}, or
START for slot 0. A token is ambiguous when it has two or more distinct successors in
START r_0 .. r_{n-1} END: the token alone does not say what comes next, and a copy has to know
where in the text it is.

A transition is reached when the copy is on track there: the ON_TRACK slots before it are right
(at the start, all slots before it). An error at a reached transition is a first error, the
paper's transition error. The accuracy after ambiguous (unambiguous) tokens is the share of
reached transitions out of ambiguous (unambiguous) tokens whose slot is right.

Why several right slots and not one: an output that has gone off the rails still has scattered
tokens that the alignment matches by chance, mostly frequent ones such as ".", and frequent
tokens are the ambiguous ones. Counting the transition after each chance match would charge the
derailment to ambiguous tokens (on SmolLM2's forward copies: 0.67 after ambiguous tokens with one
right slot, 0.92 with three, 0.94 with five or eight).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

START, END = "<start>", "<end>"  # never equal to a token id
ON_TRACK = 3  # right slots before a transition that make it reached


def ambiguous_tokens(reference: Sequence[Hashable]) -> set:
    """The tokens of START + reference that have two or more distinct successors in
    START + reference + END."""
    successors = defaultdict(set)
    extended = [START, *reference, END]
    for token, successor in zip(extended, extended[1:]):
        successors[token].add(successor)
    return {token for token, following in successors.items() if len(following) > 1}


def edit_slots(reference: Sequence[Hashable], output: Sequence[Hashable]) -> list[int]:
    """The slot of every edit of the alignment, one per substituted, inserted or deleted token."""
    # rapidfuzz places an insertion before reference token src (src = n: at the end), and a
    # substitution or deletion at it: in each case the edit's slot is src.
    return [src for _, src, _ in Levenshtein.editops(reference, output).as_list()]


@dataclass(frozen=True)
class CopyAnalysis:
    slots: int  # len(reference) + 1
    wrong: int  # slots with an edit
    edits: int  # the edit distance: substituted, inserted and deleted tokens
    reached_ambiguous: int
    reached_unambiguous: int
    first_errors: tuple[int, ...]  # wrong slots at reached transitions
    first_errors_ambiguous: int  # how many of them follow an ambiguous token

    @property
    def exact(self) -> bool:
        return self.edits == 0


def analyze(reference: Sequence[Hashable], output: Sequence[Hashable]) -> CopyAnalysis:
    edits = edit_slots(reference, output)
    wrong = [False] * (len(reference) + 1)
    for slot in edits:
        wrong[slot] = True
    ambiguous = ambiguous_tokens(reference)
    reached = {True: 0, False: 0}
    first_errors, first_ambiguous = [], 0
    for slot, transition in enumerate([START, *reference]):
        if not any(wrong[max(0, slot - ON_TRACK) : slot]):
            reached[transition in ambiguous] += 1
            if wrong[slot]:
                first_errors.append(slot)
                first_ambiguous += transition in ambiguous
    return CopyAnalysis(
        slots=len(wrong),
        wrong=sum(wrong),
        edits=len(edits),
        reached_ambiguous=reached[True],
        reached_unambiguous=reached[False],
        first_errors=tuple(first_errors),
        first_errors_ambiguous=first_ambiguous,
    )
