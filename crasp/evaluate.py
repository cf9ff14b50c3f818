"""The fast evaluator: a program on a batch of strings at once, with numpy.

Strings are int arrays `tokens_BxT` of symbol ids in the program's alphabet, right-padded with -1
(every operation is causal, so padding after a string never changes its values).

A node's value is a `Value` (crasp.values): an array (B, T, V, ..., V) with one trailing axis per
free index variable, or a one-hot family kept as its key. Values are memoized per node over the DAG
by a `BatchEvaluator` (crasp.batch_evaluator, whose rewrites keep families over large alphabets
cheap; its counts are crasp.count_rules', its one-hot keys crasp.onehot_rules'), and the batch is
evaluated in chunks whose size is chosen from the memory the first chunk actually used. Prefix sums
along the positions are whole-row additions (crasp.prefix_sums). With chosen positions, `evaluate`
runs everything above the counts at those positions only (crasp.selected_positions): a
teacher-forced check reads few of them. `crasp.reference` is the independent slow evaluator the
tests compare this one against.

Counts are computed in the narrowest of int16, int32 and int64 that holds every count the program
can compute on strings of the batch's length (`count_dtype`: a count is at most the length, and
sums, differences, min, max and `? :` of counts are bounded from their operands). Counts in int64
(commit 3eed295, for constants up to 2**40) made every program pay twice the memory traffic of
int32, Majority's prefix counts 1.3x slower, although almost every program's counts fit in 16
bits. Where even int64 may not hold a sum (definitions each doubling the previous one), `+` and
`-` check it at every real position of every string and raise CraspRangeError instead of
wrapping around.
"""

from __future__ import annotations

import numpy as np

from crasp import expr as E
from crasp.batch_evaluator import COUNT_DTYPE, RULES, BatchEvaluator
from crasp.node_patterns import conjuncts
from crasp.prefix_sums import keyed_prefix_sum
from crasp.program import Program
from crasp.selected_positions import SelectedEvaluator
from crasp.trampoline import trampoline
from crasp.values import OneHot, Value, align, joint

# What callers import from here, wherever it is defined.
__all__ = [
    "COUNT_DTYPE",
    "COUNT_DTYPES",
    "DEFAULT_MEMORY_BUDGET",
    "RULES",
    "BatchEvaluator",
    "OneHot",
    "Value",
    "align",
    "conjuncts",
    "count_bound",
    "count_dtype",
    "evaluate",
    "joint",
    "keyed_prefix_sum",
]

COUNT_DTYPES = (np.int16, np.int32, np.int64)
DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of intermediate values per chunk


def count_bound(program: Program, length: int) -> int:
    """The largest magnitude any count of the program can take on a string of `length` positions."""
    bounds: dict[int, int] = {}
    for definition in program.definitions:  # dependency order: a use's body is bounded before it
        for node in E.walk(definition.body, into_definitions=False):
            if isinstance(node, E.CountOf):
                bounds[id(node)] = length if node.offset is None else 1
            elif isinstance(node, E.Number):
                bounds[id(node)] = abs(node.value)
            elif isinstance(node, E.Arith):
                left, right = bounds[id(node.left)], bounds[id(node.right)]
                bounds[id(node)] = left + right if node.op in "+-" else max(left, right)
            elif isinstance(node, E.Conditional):
                bounds[id(node)] = max(bounds[id(node.if_true)], bounds[id(node.if_false)])
            elif isinstance(node, E.NamedCount):
                bounds[id(node)] = bounds[id(node.body)]
    return max(bounds.values(), default=0)


def count_dtype(program: Program, length: int) -> type[np.signedinteger]:
    """The narrowest integer type that holds every count of the program on strings of `length`
    positions; int64 where none provably does (then `+` and `-` check for overflow)."""
    bound = count_bound(program, length)
    return next((t for t in COUNT_DTYPES if bound <= np.iinfo(t).max), np.int64)


def _memo_bytes(evaluator: BatchEvaluator) -> int:
    return sum(v.nbytes for v in evaluator.memo.values() if v.rows == evaluator.B)


def evaluate(
    program: Program,
    tokens_BxT: np.ndarray,
    names: list[str] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    positions_BxT: np.ndarray | None = None,
) -> dict[str, Value]:
    """Values of the named definitions (all, or `names`) on every string, with free parameters as axes.

    A family `f[p]` is returned with its parameter axes named by the parameters. With positions (a bool
    mask like tokens), only the values at those positions: arrays (positions, ...) in the order of
    np.nonzero(positions), evaluated there alone where the program allows (crasp.selected_positions)."""
    tokens_BxT = np.asarray(tokens_BxT)
    if tokens_BxT.ndim != 2:
        raise ValueError(f"tokens must be a (batch, positions) array of symbol ids, got shape {tokens_BxT.shape}")
    V = len(program.alphabet)
    if tokens_BxT.size and (tokens_BxT.max() >= V or tokens_BxT.min() < -1):
        raise ValueError(f"token ids must lie in 0..{V - 1} (the alphabet) or be -1 (padding)")
    if positions_BxT is not None and np.shape(positions_BxT) != tokens_BxT.shape:
        raise ValueError(
            f"positions must be a bool mask of the tokens' shape {tokens_BxT.shape}, got {np.shape(positions_BxT)}"
        )
    chosen = [program.definition(n) for n in (names or program.names)]
    # Values are memoized by node id: each definition's use is built once and kept alive throughout.
    uses = [(d, d.use(*(E.Var(p) for p in d.params)), tuple(sorted(d.params))) for d in chosen]
    # Each chunk's values are written into arrays for the whole batch (a concatenation of UF's output at
    # the positions a check reads, 231 MB for 10,000 strings, took a fifth of the check).
    results: dict[str, np.ndarray] = {}
    axes: dict[str, tuple[str, ...]] = {}
    rows = len(tokens_BxT) if positions_BxT is None else int(np.count_nonzero(positions_BxT))
    start, chunk, done = 0, min(8, max(1, len(tokens_BxT))), 0
    ids = program.symbol_ids()
    dtype = count_dtype(program, tokens_BxT.shape[1])
    while start < len(tokens_BxT):
        whole = BatchEvaluator(tokens_BxT[start : start + chunk], ids, first_string=start, count_dtype=dtype)
        chosen_BxT = None if positions_BxT is None else positions_BxT[start : start + chunk]
        evaluator = whole if chosen_BxT is None else SelectedEvaluator(whole, *np.nonzero(chosen_BxT))
        for d, use, params in uses:
            value = trampoline(evaluator.value(use, {}))
            key = None
            if isinstance(value, OneHot) and value.axes == params:  # written from its key, never as a mask
                key = np.broadcast_to(value.key, (evaluator.B, evaluator.T))
                key = key if positions_BxT is None else key[:, 0]
                shape, kind = key.shape + (V,), np.dtype(bool)
            else:
                value = evaluator.full(use, params)
                array = value.array if positions_BxT is None else value.array[:, 0]
                # Counts leave as int64 whatever type computed them: callers do arithmetic on them.
                shape, kind = array.shape, np.dtype(np.int64) if d.body.type == E.COUNT else array.dtype
            if d.name not in results:
                results[d.name] = np.empty((rows,) + shape[1:], kind)
            out = results[d.name][done : done + shape[0]]
            if key is None:
                out[...] = array
            else:
                out[...] = False
                hit = np.nonzero(key >= 0)
                out[hit + (key[hit],)] = True
            axes[d.name] = value.axes
        done += evaluator.B
        start += chunk
        # Size the next chunks from what this one really held: several times the memoized values.
        held = _memo_bytes(whole) + (_memo_bytes(evaluator) if evaluator is not whole else 0)
        per_string = 4 * held / max(whole.B, 1) + 1
        chunk = int(max(1, min(memory_budget // per_string, 4096)))
    return {d.name: Value(results.get(d.name, np.zeros((0,))), axes.get(d.name, ())) for d in chosen}
