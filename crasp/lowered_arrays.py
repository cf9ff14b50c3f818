"""Array operations on the values of crasp.lowered_rules, in JAX: (B, T, V, ..., V) arrays whose
trailing axes are named by index variables, shifted along positions, and summed by key.

`keyed_prefix_sum` is the sorted formulation of a count keyed by a symbol bound at i (crasp.prefix_sums
sorts with NumPy the same way): each string's positions are sorted by (key, position), summed in one
running sum, and a position reads its key's part of it by two binary searches, so a count such as
UF's `#[j <= i] (Q(s) and prev[t])`, t bound to the symbol at i, costs (B, T, V) where counting it
densely over t and s costs (B, T, V, V).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from crasp.values import Value


def shifted(array, offset: int, fill, later: bool):
    """Along positions: out[:, i] = array[:, i - offset] if `later`, else array[:, i + offset]; `fill`
    where that position lies outside the string. Offsets reach 2**40: never pad by more than T."""
    T = array.shape[1]
    step = min(offset, T)
    if step == 0:
        return array
    filler = jnp.full((array.shape[0], step) + array.shape[2:], fill, array.dtype)
    if later:
        return jnp.concatenate([filler, array[:, : T - step]], axis=1)
    return jnp.concatenate([array[:, step:], filler], axis=1)


def reduced(value: Value, name: str, reduce) -> Value:
    """The value with the axis of index `name` reduced by `reduce` (jnp.any, all, max or min); the same
    value for every symbol (an axis of size 1, or none) reduces to itself."""
    if name not in value.axes:
        return value
    axis, rest = 2 + value.axes.index(name), tuple(a for a in value.axes if a != name)
    if value.array.shape[axis] == 1:
        return Value(jnp.squeeze(value.array, axis), rest)
    return Value(reduce(value.array, axis=axis), rest)


def prefix_sum(array, dtype):
    """jnp.cumsum(array, axis=1, dtype=dtype) as an associative scan: 1.7x (int32) to 4x (int16) faster
    than jnp.cumsum on a CPU (`benchmarks/lowered.py --parts`), and log T steps deep on a GPU."""
    return jax.lax.associative_scan(jnp.add, array.astype(dtype), axis=1)


def keyed_prefix_sum(keys_BxT, values, queries_BxT, groups: int, dtype):
    """out[b, i] = sum of values[b, j] over j <= i with keys[b, j] == queries[b, i], for keys and queries in
    0 .. groups - 1 (a key < 0 matches nothing; a query < 0 sums nothing). values: (B, T, ...)."""
    B, T = keys_BxT.shape
    position = jnp.arange(T, dtype=jnp.int32)
    codes = jnp.where(keys_BxT >= 0, keys_BxT, groups) * T + position  # sorted: by key, then position
    order = jnp.argsort(codes, axis=1)
    codes = jnp.take_along_axis(codes, order, axis=1)
    rest = values.shape[2:]
    ordered = jnp.take_along_axis(values, order.reshape((B, T) + (1,) * len(rest)), axis=1)
    running = prefix_sum(ordered, dtype)
    running = jnp.concatenate([jnp.zeros((B, 1) + rest, dtype), running], axis=1)  # row 0: before any
    # A query q at i reads the occurrences of q up to i: sorted rows [first, last) of its string.
    queries = jnp.where(queries_BxT >= 0, queries_BxT, -1) * T
    last = jax.vmap(partial(jnp.searchsorted, side="right"))(codes, queries + position)
    first = jax.vmap(partial(jnp.searchsorted, side="left"))(codes, queries)
    reach = (B, T) + (1,) * len(rest)
    return jnp.take_along_axis(running, last.reshape(reach), axis=1) - jnp.take_along_axis(
        running, first.reshape(reach), axis=1
    )
