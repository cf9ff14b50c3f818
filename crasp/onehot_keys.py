"""One-hot families kept as keys: `and`, `or` and counts of bool families over one index that hold for
at most one symbol per position.

A family f[s] that is true at position i for s = key(i) alone (no symbol where key(i) < 0) is stored
as the key, (B, T), instead of its (B, T, V) mask: UF's output and everything it is built from,
`#[j <= i] (Q(s) and prev[t] and up_to_sep) >= 1` with t the symbol at i, is one such family, and as
masks over its 153 symbols the histograms, comparisons, `and`s and `or`s of its check each covered
every symbol at every read position. The functions here compute on keys only; `crasp.evaluate`
decides when a value is one-hot and builds the mask where a rule needs one.
"""

from __future__ import annotations

import numpy as np


def and_keys(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """`f[s] and g[s]` of two one-hot families: true where both keys name the same symbol."""
    return np.where(left == right, left, -1)


def masked_key(key: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`f[s] and m` with m the same for every symbol (B or 1, T or 1)."""
    return np.where(mask, key, -1)


def key_where_family_holds(key: np.ndarray, family: np.ndarray) -> np.ndarray:
    """`f[s] and g[s]` with g a mask (B or 1, T or 1, V or 1): f's key where g holds for that symbol."""
    if family.shape[:2] == (1, 1):  # the same for every position (`"<eos>" < s`): a table of V
        return np.where(family[0, 0, np.maximum(key, 0) if family.shape[2] > 1 else 0], key, -1)
    shape = np.broadcast_shapes(key.shape, family.shape[:2])
    family = np.broadcast_to(family, shape + family.shape[2:])
    key = np.broadcast_to(key, shape)
    if family.shape[2] == 1:
        holds = family[:, :, 0]
    else:
        holds = np.take_along_axis(family, np.maximum(key, 0)[:, :, None], axis=2)[:, :, 0]
    return np.where(holds, key, -1)


def or_keys(left: np.ndarray, right: np.ndarray) -> np.ndarray | None:
    """`f[s] or g[s]` if it is one-hot on these strings (wherever both hold, for the same symbol); else None."""
    if not np.all((left < 0) | (right < 0) | (left == right)):
        return None
    return np.where(left >= 0, left, right)


def symbol_per_group(keys_BxT: np.ndarray, groups_BxT: np.ndarray | None, n_groups: int) -> np.ndarray | None:
    """table[b, g] = the symbol of every j of string b in group g (groups[b, j] = g, keys[b, j] >= 0), -1 for
    a group without any; None if some group holds two symbols. No groups: one per string (g = 0)."""
    B = len(keys_BxT)
    present = keys_BxT >= 0
    if groups_BxT is None:  # one symbol per string: its least and greatest keys agree (no list of positions)
        largest = np.iinfo(keys_BxT.dtype).max
        low = np.where(present, keys_BxT, largest).min(axis=1, initial=largest)
        high = keys_BxT.max(axis=1, initial=-1)
        return None if np.any((high >= 0) & (low != high)) else high.astype(np.int64)[:, None]
    present &= groups_BxT >= 0
    batch, position = np.nonzero(present)
    cells = batch * n_groups + groups_BxT[batch, position]
    symbols = keys_BxT[batch, position]
    table = np.full(B * n_groups, -1, np.int64)
    table[cells] = symbols  # one of the group's symbols (the last written): all of them if they agree
    if not np.array_equal(table[cells], symbols):
        return None
    return table.reshape(B, n_groups)


def dense(key: np.ndarray, V: int) -> np.ndarray:
    """The mask (B or 1, T or 1, V) of a one-hot family's key."""
    return key[:, :, None] == np.arange(V, dtype=key.dtype)  # in the key's type: no conversion per element
