"""Bounded-window programs for retrieval at the last occurrence (NLLast, NRLast).

No C-RASP[pos] program retrieves the neighbour of the query's last occurrence at every length
(the impossibility is in crasp.tasks.literature). Yet the program that searches for the query
only among the last `window` context tokens is in C-RASP[local]: it answers right exactly when
the last occurrence lies among those tokens. So what a test at longer lengths can show depends
on the sampler. Over an i.i.d. context of a few symbols the last occurrence stays a few
positions from the end at every length, and a window program, like a model that learned one,
keeps its accuracy on longer inputs; when the query occurs a fixed number of times anywhere in
the context, the distance grows with the length and the window program's accuracy falls.
`crasp.check.agreement_by_length` measures it on a task's sampler.

For every task predicted not to generalize, the bounded programs here are exact on every string
up to a length L and need no more than L to be exact there, so a model trained at lengths up to L
may have learned one of them instead of the task (crasp.discrimination scores them on test bins):
- last_within_window(side, L) and last_within_window_or_count(side, L) for NLLast and NRLast:
  the second also answers at the c-th occurrence, for each count c <= L, when the query is not
  among the last L tokens, so it is exact on every string up to length 2L (a last occurrence
  at distance >= L leaves at most L occurrences);
- copy_up_to_length(L, backward) for NF, NB and repeat copy: the answer token read at the
  distance that the input length (forward) or the step (backward) fixes, for inputs up to L;
- parity_up_to_count(L): the parity of the number of ones, for counts up to L.

Copying has bounded approximations of another kind, which a copying head can learn:
KGramLookup answers each token with the input token that follows (forward) or precedes
(backward) an occurrence of the answer's last k tokens, among occurrences within w positions
back or anywhere in the input (no window); with the first or the last such occurrence. Windowed,
it reads tokens at most w back: C-RASP[local] (one comparison of k tokens per distance up to w).
Without a window it is C-RASP[local] too: the key is k local comparisons at each input position,
and "the first occurrence" is the nested count "= 1" of the lab's UF witness (crasp.witnesses);
"the last" counts the occurrences after it. Either way its program would hold a term per symbol,
distance and key position, so it is computed in numpy instead (`correct`), not as a Program.
docs/discrimination.md says why these families are the ones a reviewer would try first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Callable

import numpy as np

from crasp.expr import Q, Var, any_, count, family
from crasp.program import Program
from crasp.tasks.base import BOS_SYMBOL, EOS_ID, EOS_SYMBOL, MAX_LENGTH, SEP_SYMBOL
from crasp.witnesses import _program, answering, in_input, prev, retrieval_program, steps

SIDES = ("left", "right")
# The tasks a window program approximates, and the neighbour each retrieves.
SIDE_OF_TASK = {"NLLast": "left", "NRLast": "right"}
_s, _t, _u = Var("s"), Var("t"), Var("u")
Maker = Callable[[tuple[str, ...]], Program]


def _check_bound(name: str, value, smallest: int, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not smallest <= value <= MAX_LENGTH:
        raise ValueError(
            f"{name} must be an integer from {smallest} to {MAX_LENGTH} (the longest input a task "
            f"samples) ({meaning}), got {value!r}"
        )


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")


def last_within_window(side: str, window: int) -> Maker:
    """A maker (symbols -> Program) of the C-RASP[local] program that answers the `side`
    neighbour of the query's last occurrence among the last `window` context tokens (and
    predicts nothing when the query does not occur there)."""
    window_answer = _window_answer(side, window)
    title = (
        f"N{side[0].upper()}Last within the last {window} context tokens: the {side} neighbour of the query's "
        "nearest occurrence there"
    )
    return lambda symbols: retrieval_program(symbols, window_answer, title)


def last_within_window_or_count(side: str, bound: int) -> Maker:
    """The window program of `bound` tokens, and where the query is not among them, the `side`
    neighbour of its c-th occurrence when it occurs c <= bound times (C-RASP[local])."""
    window_answer = _window_answer(side, bound)
    in_window = any_(_u, window_answer(_u)).named(f"query_within_last_{bound}")
    by_count = family(
        f"{side}_of_occurrence_counted_up_to_{bound}",
        ["s"],
        lambda s: any_(_t, Q(_t) & reduce(or_, [_at_occurrence(side, c)(s, _t) for c in range(1, bound + 1)])),
    )
    answer = family(
        f"{side}_of_last_within_{bound}_or_counted", ["s"], lambda s: window_answer(s) | (~in_window & by_count(s))
    )
    title = (
        f"N{side[0].upper()}Last within the last {bound} context tokens, else at the c-th occurrence for "
        f"c <= {bound}: the {side} neighbour"
    )
    return lambda symbols: retrieval_program(symbols, answer, title)


def _at_occurrence(side: str, c: int):
    """family [s, t]: at the query t (its (c+1)-th token t, counting itself), s is the `side`
    neighbour of the c-th occurrence of t in the context."""
    if side == "left":
        neighbour = lambda s, t: Q(t) & (count(Q(t)) == c) & prev(s)  # noqa: E731
    else:  # the position after the c-th t: c tokens t strictly before it
        neighbour = lambda s, t: (  # noqa: E731
            Q(s)
            & prev(t)
            & (
                (Q(t) & (count(Q(t)) == c + 1))  # noqa: E731
                | (~Q(t) & (count(Q(t)) == c))
            )
        )
    return family(
        f"{side}_of_occurrence_{c}",
        ["s", "t"],
        lambda s, t: (count(Q(t)) == c + 1) & (count(neighbour(s, t) & in_input) >= 1),
    )


def _window_answer(side: str, window: int):
    _check_side(side)
    # The last context token has no right neighbour in the context, so "right" needs two tokens.
    smallest = 1 if side == "left" else 2
    _check_bound("window", window, smallest, f"context tokens searched back from the last, side={side!r}")
    # At the query position i (the query q is w_i, <sep> is w_{i-1}), the context token d places
    # before the last one is w_{i-2-d}; its left neighbour is w_{i-3-d}, its right one w_{i-1-d}.
    answer_offset = 3 if side == "left" else 1

    def query_at(d: int):
        return count(Q(_t), offset=2 + d) >= 1

    def found(s: Var):
        # "No occurrence nearer than d" is shared from one distance to the next, so the program
        # grows linearly with the window, not quadratically.
        alternatives, none_nearer = [], None
        for d in range(window):
            here = query_at(d) if none_nearer is None else none_nearer & query_at(d)
            if d >= smallest - 1:
                alternatives.append(here & (count(Q(s), offset=answer_offset + d) >= 1))
            none_nearer = ~query_at(d) if none_nearer is None else none_nearer & ~query_at(d)
        return any_(_t, Q(_t) & reduce(or_, alternatives))

    return family(f"{side}_of_last_within_{window}", ["s"], found)


def copy_up_to_length(bound: int, backward: bool) -> Maker:
    """Copying with repeats, right on every input of length <= bound (C-RASP[local]): forward,
    the k-th answer token sits exactly m positions back for an input of length m, so one local
    count per m <= bound; backward, at answer step r it sits 2r - 1 positions back, one local
    count per r <= bound. Beyond the bound it predicts nothing."""
    _check_bound("bound", bound, 1, "the longest input copied")
    length = count(in_input & ~Q(BOS_SYMBOL)).named("input_length")
    if backward:
        pairs = [(steps == r, r) for r in range(1, bound + 1)]
    else:
        pairs = [((length == m) & (steps <= m), m) for m in range(1, bound + 1)]
    token = family(
        f"copied_up_to_{bound}",
        ["s"],
        lambda s: reduce(
            or_,
            [when & (count(Q(s), offset=2 * distance - 1 if backward else distance) >= 1) for when, distance in pairs],
        ),
    )
    done = (steps == length + 1).named("copied_all")
    title = (
        f"copy backward, by the answer step, for the first {bound} answer tokens"
        if backward
        else f"copy forward, by the input length, for inputs of at most {bound} tokens"
    )
    return lambda symbols: _program(
        symbols, lambda s: answering & ((~done & token(s)) | (done & s.is_symbol(EOS_SYMBOL))), title
    )


def parity_up_to_count(bound: int) -> Maker:
    """Parity, right whenever the input holds at most `bound` ones: the count compared with each
    constant up to the bound (C-RASP[])."""
    _check_bound("bound", bound, 1, "the largest number of ones told apart")
    ones = count(Q("1") & in_input).named("ones")
    odd = reduce(or_, [ones == c for c in range(1, bound + 1, 2)]).named(f"odd_up_to_{bound}")
    even = reduce(or_, [ones == c for c in range(0, bound + 1, 2)]).named(f"even_up_to_{bound}")
    return lambda symbols: _program(
        symbols,
        lambda s: (
            (Q(SEP_SYMBOL) & ((s.is_symbol("1") & odd) | (s.is_symbol("0") & even)))
            | (answering & ~Q(SEP_SYMBOL) & s.is_symbol(EOS_SYMBOL))
        ),
        f"parity of the number of ones, when it is at most {bound}",
    )


OCCURRENCES = ("first", "last")
NO_ANSWER = -1  # KGramLookup.answers where no occurrence of the key is found
# The input's ends in the lookup's aligned view (below): where the answer starts and where it ends.
_START, _END = -1, -2


@dataclass(frozen=True)
class KGramLookup:
    """Copy by looking up the answer's last k tokens in the input, within a window.

    The lookup reads the input in copy order (reversed when `backward`), framed by its two ends:
    the answer's start stands for the input's start (<bos>, or <sep> backward) and the input's
    far end for <eos>. At answer step r the key is the answer's last k tokens, counting its start
    as one (so for r <= k the key is the whole answer so far, anchored at the start). The
    lookup finds the key's occurrences in the framed input whose next token (in copy order) lies
    at most `window` positions before the current one in the whole string, and answers that next
    token from the `occurrence` nearest the current position ("last") or farthest from it
    ("first"); with none, it answers nothing (wrong).

    So it is right at every step where the right occurrence is within the window and no other
    occurrence of the key there, nearer (last) or farther (first), is followed by another token.
    """

    k: int
    window: int | None  # None: every occurrence in the input, however far back
    occurrence: str
    backward: bool

    def __post_init__(self):
        _check_bound("k", self.k, 1, "tokens of the key, the answer's start counted as one")
        if self.window is not None:
            _check_bound("window", self.window, 1, "positions looked back (or None: no window)")
        if self.occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {self.occurrence!r}")

    def text(self) -> str:
        direction = "precedes" if self.backward else "follows"
        where = "in the input" if self.window is None else f"within {self.window} positions back"
        return (
            f"answer the input token that {direction} the {self.occurrence} occurrence of the answer's last "
            f"{self.k} tokens {where}"
        )

    def correct(self, tokens: np.ndarray, prompt_lengths: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """One bool per string (<bos> input <sep> answer <eos>, right-padded): the lookup, fed the
        right answer so far at each step, answers every answer token and the final <eos>."""
        tokens, prompt_lengths, lengths = np.asarray(tokens), np.asarray(prompt_lengths), np.asarray(lengths)
        answered = self.answers(tokens, prompt_lengths, lengths)
        steps = np.arange(answered.shape[1])[None, :]
        at = np.minimum(prompt_lengths[:, None] + steps, tokens.shape[1] - 1)
        targets = np.take_along_axis(tokens, at, axis=1)
        return ((answered == targets) | (steps >= (lengths - prompt_lengths)[:, None])).all(axis=1)

    def answers(self, tokens: np.ndarray, prompt_lengths: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The token id the lookup answers at each answer step (the final <eos> included), fed the
        right answer so far: [strings, longest answer], NO_ANSWER where no occurrence is found and
        after a string's answer ends."""
        tokens, prompt_lengths, lengths = np.asarray(tokens), np.asarray(prompt_lengths), np.asarray(lengths)
        answered = np.full((len(tokens), int((lengths - prompt_lengths).max(initial=0))), NO_ANSWER, dtype=np.int64)
        shapes = np.stack([prompt_lengths, lengths - prompt_lengths], axis=1)
        for prompt, answer in {tuple(shape) for shape in shapes.tolist()}:
            rows = np.flatnonzero((prompt_lengths == prompt) & (lengths - prompt_lengths == answer))
            answered[rows, :answer] = self._answers_of_group(tokens[rows], prompt - 2, answer)
        return answered

    def _answers_of_group(self, tokens: np.ndarray, m: int, answer: int) -> np.ndarray:
        """Strings of one input length m and one answer length (its <eos> included)."""
        n = len(tokens)
        inputs = tokens[:, 1 : 1 + m]
        ends = np.full((n, 1), _START), np.full((n, 1), _END)
        framed = np.concatenate([ends[0], inputs[:, ::-1] if self.backward else inputs, ends[1]], axis=1)
        targets = tokens[:, m + 2 : m + 2 + answer].astype(np.int64)
        targets = np.where(targets == EOS_ID, _END, targets)
        so_far = np.concatenate([ends[0], targets], axis=1)  # the answer's start, then its tokens
        # Where the token after a key ending at framed index j (in copy order) sits in the string.
        read = np.arange(1, m + 2)
        position = (m + 1 - read) if self.backward else read
        answered = np.full((n, answer), NO_ANSWER, dtype=np.int64)
        for step in range(1, answer + 1):
            size = min(self.k, step)
            ends_at = np.arange(size - 1, m + 1)  # key end j: its next token framed[j + 1] exists
            match = np.ones((n, len(ends_at)), dtype=bool)
            for back in range(size):
                match &= framed[:, ends_at - back] == so_far[:, [step - 1 - back]]
            distance = (m + step) - position[ends_at]  # the current position is m + step
            if self.window is not None:
                match &= (distance <= self.window)[None, :]
            nearness = np.where(match, -distance[None, :] if self.occurrence == "last" else distance[None, :], -np.inf)
            chosen = ends_at[np.argmax(nearness, axis=1)]
            token = framed[np.arange(n), chosen + 1]
            answered[:, step - 1] = np.where(match.any(axis=1), np.where(token == _END, EOS_ID, token), NO_ANSWER)
        return answered


def kgram_lookups(bound: int, backward: bool) -> tuple[tuple[str, KGramLookup], ...]:
    """The lookups the discrimination check scores for copying trained up to length `bound` (L),
    a family complete for what the check claims: every key length k from 1 to L + 1 (L + 1 holds
    the whole answer so far at every training length, anchored at its start, so no repeat in a
    training input can mislead it; a longer key reads nothing more there), the first and the last
    occurrence, each with the window the training lengths need (L forward; 2L + 1 backward, where
    step r reads 2r - 1 back), with 2L + 1 (the farthest any two positions of a training string lie
    apart) and with no window at all. Which members are exact on the training lengths, the check
    verifies; only those can keep a bin from discriminating."""
    windows = sorted({2 * bound + 1 if backward else bound, 2 * bound + 1}) + [None]
    lookups = []
    for k in range(1, bound + 2):
        for window in windows:
            for occurrence in OCCURRENCES:
                where = "no window" if window is None else f"window {window}"
                name = f"{k}-gram lookup, {occurrence} occurrence, {where}"
                lookups.append((name, KGramLookup(k, window, occurrence, backward)))
    return tuple(lookups)


# Each copying task -> bound -> its k-gram lookups (numpy, scored like the programs below).
LOOKUP_APPROXIMATIONS: dict[str, Callable[[int], tuple[tuple[str, KGramLookup], ...]]] = {
    "NF": lambda bound: kgram_lookups(bound, backward=False),
    "NB": lambda bound: kgram_lookups(bound, backward=True),
}

# Each task predicted not to generalize -> (name, bound -> maker) of its bounded approximations.
BOUNDED_APPROXIMATIONS: dict[str, tuple[tuple[str, Callable[[int], Maker]], ...]] = {
    **{
        code: (
            ("window", lambda bound, side=side: last_within_window(side, bound)),
            ("window or count", lambda bound, side=side: last_within_window_or_count(side, bound)),
        )
        for code, side in SIDE_OF_TASK.items()
    },
    "NF": (("copy by length", lambda bound: copy_up_to_length(bound, backward=False)),),
    "RepeatCopy": (("copy by length", lambda bound: copy_up_to_length(bound, backward=False)),),
    "NB": (("copy by step", lambda bound: copy_up_to_length(bound, backward=True)),),
    "Parity": (("count up to L", parity_up_to_count),),
}
