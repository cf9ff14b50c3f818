"""Counting a comparison of two prefix counts, `#[j <= i] (#[k <= j] X(s) op #[k <= j] Y(t))`, in linear memory.

The shape is that of the nested-count witnesses found by search for UF and UB (crasp/search_results.json):
`any t: Q(t) and 2 = #[j <= i] (#[j <= i] Q(s) < #[j <= i] Q(t))`, with t bound to the symbol at i and s
free. Counted densely, the body is a (B, T, V, V) array (every s against every t at every j) and its
prefix sum costs T * V * V per string: 1-3 GB and most of a cold `crasp tasks` over 153 symbols.

Both inner counts are prefix counts of one-hot bodies (`X(s)` true at j for s = xkey(j) only), so
each is a non-decreasing step function of j. Between two consecutive occurrences of t the right side
is a constant k, and the j of such a segment where `X_s(j) op k` holds form one interval, bounded by
the k-th and (k+1)-th occurrences of s (a non-decreasing count is below k exactly before its k-th
step). So a segment costs V per string, whatever its length, and a position's count is the sum over
the segments of t = query(i) completed before i, kept as a running sum per (string, t), plus its
own unfinished segment: (occurrences + symbols) * V per string in all, the size of a one-hot count.
"""

from __future__ import annotations

import numpy as np

from crasp.prefix_sums import last_occurrence, prefix_sum, sorted_occurrences

COMPARISON_OPS = ("<", "<=", ">", ">=", "=", "!=")
SEGMENTS_AT_ONCE = 1 << 14


def _occurrence_table(keys_BxT: np.ndarray, V: int) -> np.ndarray:
    """table[b, k, s] = the position of the k-th occurrence of s in string b, k >= 1; table[b, 0, s] = 0
    and T past the last occurrence (so `position < table[b, k, s]` says the count of s is still below k).
    Symbols last: a segment reads one row of V positions (a column of a long string's table would
    miss the cache at every symbol)."""
    B, T = keys_BxT.shape
    _, batch, position, rank = sorted_occurrences(keys_BxT, V)
    table = np.full((B, int(rank.max(initial=0)) + 2, V), T, np.int64)
    table[:, 0, :] = 0
    table[batch, rank, keys_BxT[batch, position]] = position
    return table


def _interval_length(start: np.ndarray, stop: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """|[start, stop) intersected with [low, high)|."""
    return np.maximum(np.minimum(stop, high) - np.maximum(start, low), 0)


def _segment_counts(table, batch, start, stop, k, op: str, T: int) -> np.ndarray:
    """For each segment n (positions start[n] .. stop[n] - 1 of string batch[n], where the right side
    is k[n]): how many of its positions have `X_s op k[n]`, for every s, shape (segments, V).

    Computed SEGMENTS_AT_ONCE segments at a time: the temporaries of a 10^6-token string's segments
    over all symbols (88 MB each) made it 68x slower than a tenth of them, out of cache."""
    out = np.empty((len(batch), table.shape[2]), np.int64)
    for first in range(0, len(batch), SEGMENTS_AT_ONCE):
        part = slice(first, first + SEGMENTS_AT_ONCE)
        out[part] = _segment_counts_of(table, batch[part], start[part], stop[part], k[part], op, T)
    return out


def _segment_counts_of(table, batch, start, stop, k, op: str, T: int) -> np.ndarray:
    last = table.shape[1] - 1
    reached_k = table[batch, np.minimum(k, last)]  # the first position where X_s >= k
    passed_k = table[batch, np.minimum(k + 1, last)]  # the first position where X_s > k
    start, stop = start[:, None], stop[:, None]
    if op == "<":
        return _interval_length(start, stop, 0, reached_k)
    if op == "<=":
        return _interval_length(start, stop, 0, passed_k)
    if op == ">":
        return _interval_length(start, stop, passed_k, T)
    if op == ">=":
        return _interval_length(start, stop, reached_k, T)
    equal = _interval_length(start, stop, reached_k, passed_k)
    return equal if op == "=" else np.maximum(stop - start, 0) - equal


def compared_count(
    xkeys_BxT: np.ndarray, ykeys_BxT: np.ndarray, queries_BxT: np.ndarray, op: str, V: int, dtype=np.int64
) -> np.ndarray:
    """out[b, i, s] = #{j <= i : X_s(j) op Y_q(j)} with q = queries[b, i] (0 where q < 0), where
    X_s(j) = #{k <= j : xkeys[b, k] = s} and Y_q(j) = #{k <= j : ykeys[b, k] = q}; keys < 0 match no symbol."""
    if op not in COMPARISON_OPS:
        raise ValueError(f"op must be one of {' '.join(COMPARISON_OPS)}, got {op!r}")
    B, T = xkeys_BxT.shape
    table = _occurrence_table(xkeys_BxT, V)
    # The segments of each (string, t) completed at each occurrence of t: [previous occurrence, this one).
    codes, batch, position, rank = sorted_occurrences(ykeys_BxT, V)
    previous = np.where(rank > 1, np.r_[0, position[:-1]], 0)
    completed = _segment_counts(table, batch, previous, position, rank - 1, op, T)
    running = prefix_sum(completed[None], np.int64)[0]
    # Each position: the segments of its query completed before it, then its own unfinished segment.
    found, hit = last_occurrence(codes, queries_BxT, V)
    every_batch, every_position = np.repeat(np.arange(B), T), np.tile(np.arange(T), B)
    seen = np.where(hit, rank[found], 0) if len(codes) else np.zeros(B * T, np.int64)
    since = np.where(hit, position[found], 0) if len(codes) else np.zeros(B * T, np.int64)
    out = _segment_counts(table, every_batch, since, every_position + 1, seen, op, T)
    if len(codes):
        before = found[hit] - rank[found[hit]]  # the last occurrence of the group before this one's
        out[hit] += running[found[hit]] - np.where((before >= 0)[:, None], running[np.maximum(before, 0)], 0)
    out[queries_BxT.ravel() < 0] = 0
    return out.reshape(B, T, V).astype(dtype)
