"""Witness programs: for each task that C-RASP can express, next-token programs that solve it.

Every program reads the task's from-scratch format `<bos> input <sep> answer <eos>` (retrieval:
`<bos> c_1 .. c_m <sep> q answer <eos>`) over the alphabet `<bos> <sep> <eos>` + the task's symbols,
and must predict every answer token and the final <eos>. A witness counts only once
`crasp.check` has verified it against the task's sampler and reference answer.

A task may have several witnesses; the smallest fragment among the verified ones decides the
prediction for each position encoding (crasp.prediction).
"""

from __future__ import annotations

from typing import Callable

from crasp.expr import MOD, Q, Var, all_, any_, count, family
from crasp.program import Program

from crasp.tasks.base import BOS_SYMBOL, EOS_SYMBOL, PROGRAM_SPECIALS, SEP_SYMBOL

s, t, u = Var("s"), Var("t"), Var("u")

# ---------------------------------------------------------------- shared definitions
prev = family("prev", ["t"], lambda t: count(Q(t), offset=1) >= 1)  # w_{i-1} = t   [local]
n_sep = count(Q(SEP_SYMBOL)).named("n_sep")
in_input = (n_sep == 0).named("in_input")  # <bos> and the input, before <sep>
up_to_sep = (in_input | Q(SEP_SYMBOL)).named("up_to_sep")
after_sep = (n_sep >= 1).named("after_sep")
# The answer region: <sep> itself and the answer tokens, which each predict the next one.
answering = (after_sep & ~Q(EOS_SYMBOL)).named("answering")
# Positions since <sep>: 1 at <sep>, 2 at the first answer token, ...
steps = count(after_sep).named("steps")
# Number of positions k <= i at which t has been seen: equals 2 exactly right after the first t.
since_first = family("since_first", ["t"], lambda t: count(count(Q(t)) >= 1))
# C-RASP[] replacement for prev[t] at the first occurrence: position i follows the first t.
follows_first = family("follows_first", ["t"], lambda t: since_first(t) == 2)
first = family("first", ["t"], lambda t: Q(t) & (count(Q(t)) == 1))
letter = family(
    "letter", ["s"], lambda s: ~(s.is_symbol(BOS_SYMBOL) | s.is_symbol(SEP_SYMBOL) | s.is_symbol(EOS_SYMBOL))
)


def _program(symbols, output_body: Callable[[Var], object], title: str) -> Program:
    output = family("O", ["s"], output_body)
    return Program.build(PROGRAM_SPECIALS + tuple(symbols), output=output, title=title)


# ---------------------------------------------------------------- retrieval
# The query q sits right after <sep>; its position predicts the answer, the answer predicts <eos>.
at_query = (steps == 2).named("at_query")
at_answer = (steps == 3).named("at_answer")


def retrieval_program(symbols, found: Callable[[Var], object], title: str) -> Program:
    """At the query, output the symbol s where `found(s)` holds; after the answer, <eos>."""
    return _program(symbols, lambda s: (at_query & found(s)) | (at_answer & s.is_symbol(EOS_SYMBOL)), title)


def unique_right(symbols) -> Program:
    """UR: the token after the occurrence of q (with APE: via the previous-token relation)."""
    right_of = family("right_of_query", ["s"], lambda s: any_(t, Q(t) & (count(Q(s) & prev(t) & in_input) >= 1)))
    return retrieval_program(symbols, right_of, "UR: the token right of the unique occurrence of the query")


def unique_left(symbols) -> Program:
    left_of = family("left_of_query", ["s"], lambda s: any_(t, Q(t) & (count(Q(t) & prev(s) & in_input) >= 1)))
    return retrieval_program(symbols, left_of, "UL: the token left of the unique occurrence of the query")


def first_right(symbols) -> Program:
    seen = family(
        "right_of_first",
        ["s"],
        lambda s: any_(t, Q(t) & (count(Q(s) & (count(first(t), offset=1) >= 1) & in_input) >= 1)),
    )
    return retrieval_program(symbols, seen, "NRFirst: the token right of the first occurrence of the query")


def first_left(symbols) -> Program:
    seen = family("left_of_first", ["s"], lambda s: any_(t, Q(t) & (count(first(t) & prev(s) & in_input) >= 1)))
    return retrieval_program(symbols, seen, "NLFirst: the token left of the first occurrence of the query")


def first_right_without_positions(symbols) -> Program:
    """UR and NRFirst in C-RASP[]: the position right after the first t is where t has been seen
    for exactly two positions (a nested count), so no local relation is needed."""
    seen = family("right_of_first", ["s"], lambda s: any_(t, Q(t) & (count(Q(s) & follows_first(t) & in_input) >= 1)))
    return retrieval_program(
        symbols, seen, "UR / NRFirst in C-RASP[]: right of the first occurrence via a nested count"
    )


# ---------------------------------------------------------------- copying (distinct tokens)
def _copy(
    symbols, successor: Callable[[Var], object], start: Callable[[Var], object], end_marker: str, title: str
) -> Program:
    """At <sep> output `start`; then the `successor` of the current token; when that is the
    `end_marker` (the token beyond the input), output <eos>."""
    next_token = family("next_in_input", ["s"], successor)
    return _program(
        symbols,
        lambda s: (
            (Q(SEP_SYMBOL) & start(s))
            | (answering & ~Q(SEP_SYMBOL) & next_token(s) & ~s.is_symbol(end_marker))
            | (answering & ~Q(SEP_SYMBOL) & next_token(end_marker) & s.is_symbol(EOS_SYMBOL))
        ),
        title,
    )


def copy_forward(symbols) -> Program:
    return _copy(
        symbols,
        lambda s: any_(t, Q(t) & (count(Q(s) & prev(t) & up_to_sep) >= 1)),
        lambda s: count(Q(s) & prev(BOS_SYMBOL)) >= 1,
        SEP_SYMBOL,
        "UF: after <sep>, the successor in the input of the current token",
    )


def copy_backward(symbols) -> Program:
    return _copy(
        symbols,
        lambda s: any_(t, Q(t) & (count(Q(t) & prev(s) & in_input) >= 1)),
        prev,
        BOS_SYMBOL,
        "UB: at <sep> the last input token, then the predecessor in the input of the current token",
    )


def copy_forward_without_positions(symbols) -> Program:
    return _copy(
        symbols,
        lambda s: any_(t, Q(t) & (count(Q(s) & follows_first(t) & up_to_sep) >= 1)),
        lambda s: count(Q(s) & follows_first(BOS_SYMBOL)) >= 1,
        SEP_SYMBOL,
        "UF in C-RASP[]: the successor of t is the symbol right after its first occurrence",
    )


def copy_backward_without_positions(symbols) -> Program:
    """At <sep>: the s whose first occurrence is right before it; then the s with t right after s."""
    return _copy(
        symbols,
        lambda s: any_(t, Q(t) & (count(Q(t) & follows_first(s) & in_input) >= 1)),
        lambda s: follows_first(s),
        BOS_SYMBOL,
        "UB in C-RASP[]: the predecessor of t is the s whose first occurrence t follows",
    )


# ---------------------------------------------------------------- counting tasks
def majority(symbols) -> Program:
    """Majority and binary majority: the input symbol counted most often (ties excluded by the task)."""
    seen = family("n", ["s"], lambda s: count(Q(s)))
    most = family("most_frequent", ["s"], lambda s: letter(s) & all_(u, seen(s) >= seen(u)))
    return _program(
        symbols,
        lambda s: (Q(SEP_SYMBOL) & most(s)) | (answering & ~Q(SEP_SYMBOL) & s.is_symbol(EOS_SYMBOL)),
        "Majority: at <sep>, the symbol whose count is at least every other count",
    )


def sort(symbols) -> Program:
    """The k-th answer token is the input symbol with exactly k - 1 smaller input symbols."""
    in_string = family("in_input_string", ["s"], lambda s: count(Q(s) & in_input) >= 1)
    smaller = family("smaller", ["s"], lambda s: count(in_input & ~Q(BOS_SYMBOL) & any_(t, Q(t) & t.precedes(s))))
    length = count(in_input & ~Q(BOS_SYMBOL)).named("input_length")
    emitted = (steps - 1).named("emitted")
    return _program(
        symbols,
        lambda s: (
            (answering & in_string(s) & letter(s) & (smaller(s) == emitted))
            | (answering & (emitted == length) & s.is_symbol(EOS_SYMBOL))
        ),
        "Sort: the next symbol is the one with as many smaller input symbols as were output",
    )


def binary_majority_interleave(symbols) -> Program:
    """String k (k = 1, 2, 3) sits at positions i = k + 1 (mod 3); answer step k outputs its majority."""

    def majority_of(residue: int):
        ones = count(Q("1") & MOD(3, residue) & in_input)
        zeros = count(Q("0") & MOD(3, residue) & in_input)
        return lambda s: (s.is_symbol("1") & (ones > zeros)) | (s.is_symbol("0") & (zeros > ones))

    strings = [majority_of(2), majority_of(0), majority_of(1)]
    return _program(
        symbols,
        lambda s: (
            (answering & (steps == 1) & strings[0](s))
            | (answering & (steps == 2) & strings[1](s))
            | (answering & (steps == 3) & strings[2](s))
            | (answering & (steps == 4) & s.is_symbol(EOS_SYMBOL))
        ),
        "Binary majority interleave: count ones and zeros on positions i = r (mod 3)",
    )


WITNESSES: dict[str, tuple[Callable[..., Program], ...]] = {
    "UR": (unique_right, first_right_without_positions),
    "UL": (unique_left,),
    "NRFirst": (first_right, first_right_without_positions),
    "NLFirst": (first_left,),
    "UF": (copy_forward, copy_forward_without_positions),
    "UB": (copy_backward, copy_backward_without_positions),
    "BinaryMajority": (majority,),
    "Majority": (majority,),
    "Sort": (sort,),
    "BinaryMajorityInterleave": (binary_majority_interleave,),
}
