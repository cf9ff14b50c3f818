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
"""

from __future__ import annotations

from functools import reduce
from operator import or_
from typing import Callable

from crasp.expr import Q, Var, any_, count, family
from crasp.program import Program
from crasp.tasks.base import MAX_LENGTH
from crasp.witnesses import retrieval_program

SIDES = ("left", "right")
# The tasks a window program approximates, and the neighbour each retrieves.
SIDE_OF_TASK = {"NLLast": "left", "NRLast": "right"}
_t = Var("t")


def last_within_window(side: str, window: int) -> Callable[[tuple[str, ...]], Program]:
    """A maker (symbols -> Program) of the C-RASP[local] program that answers the `side`
    neighbour of the query's last occurrence among the last `window` context tokens (and
    predicts nothing when the query does not occur there)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    # The last context token has no right neighbour in the context, so "right" needs two tokens.
    smallest = 1 if side == "left" else 2
    if isinstance(window, bool) or not isinstance(window, int) or not smallest <= window <= MAX_LENGTH:
        raise ValueError(f"window must be an integer from {smallest} to {MAX_LENGTH} (the longest context a task "
                         f"samples) for side={side!r} (context tokens searched back from the last), got {window!r}")
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

    def make(symbols: tuple[str, ...]) -> Program:
        answer = family(f"{side}_of_last_within_{window}", ["s"], found)
        return retrieval_program(symbols, answer, f"N{side[0].upper()}Last within the last {window} context tokens: "
                                                  f"the {side} neighbour of the query's nearest occurrence there")

    return make
