"""The values of a program's nodes in the fast evaluator, and the array operations on them.

A node's value is an array of shape (B, T, V, ..., V), one trailing axis of size V (the alphabet
size) per free index variable of the node, named in `Value.axes`; any axis may have size 1 and
broadcast. A bool family over one index that holds for one symbol at most at each position (`Q(s)`,
`s = a`, UF's output) is a `OneHot` value instead: its key, (B, T), with the array built only for a
rule that reads one (crasp.onehot_keys). `align`, `joint` and `renamed` are written with the array's
own methods, so that they serve NumPy arrays here and JAX's in crasp.lowered_rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from crasp import onehot_keys


@dataclass(frozen=True)
class Value:
    array: np.ndarray  # (B or 1, T or 1, *[V or 1] * len(axes))
    axes: tuple[str, ...]  # index variable of each trailing axis, sorted

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    @property
    def rows(self) -> int:
        return self.array.shape[0]


class OneHot(Value):
    """A bool family over one index, true at each position for the symbol `key` names alone (none where
    key < 0): kept as the key (B or 1, T or 1); `array`, the (.., V) mask, is built for a rule that reads it."""

    def __init__(self, key: np.ndarray, name: str, V: int):
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "axes", (name,))
        object.__setattr__(self, "V", V)

    @cached_property
    def array(self) -> np.ndarray:
        return onehot_keys.dense(self.key, self.V)

    @property
    def nbytes(self) -> int:
        return self.key.nbytes + (self.__dict__["array"].nbytes if "array" in self.__dict__ else 0)

    @property
    def rows(self) -> int:
        return self.key.shape[0]


def align(value: Value, axes: tuple[str, ...]):
    """The value's array with trailing axes in the order `axes` (missing ones of size 1). Written
    with the array's own methods, so that it serves NumPy arrays here and JAX's in crasp.lowered."""
    array = value.array
    order = [value.axes.index(a) for a in axes if a in value.axes]
    if order != sorted(order):
        array = array.transpose((0, 1, *(2 + k for k in order)))
    shape = list(array.shape[:2])
    present = iter(array.shape[2:])
    for a in axes:
        shape.append(next(present) if a in value.axes else 1)
    return array.reshape(tuple(shape))


def joint(*values: Value) -> tuple[tuple[str, ...], list]:
    """The union of the values' index axes, sorted, and each value's array aligned to it."""
    axes = tuple(sorted(set().union(*(v.axes for v in values))))
    return axes, [align(v, axes) for v in values]


def shift_right(array: np.ndarray, offset: int, fill) -> np.ndarray:
    """Along the position axis: out[:, i] = array[:, i - offset], `fill` where i - offset < 0."""
    if offset == 0:
        return array
    out = np.full_like(array, fill)
    if offset < array.shape[1]:
        out[:, offset:] = array[:, :-offset]
    return out


def shift_left(array: np.ndarray, offset: int, fill) -> np.ndarray:
    """out[:, j] = array[:, j + offset]: the key of the position `offset` later."""
    if offset == 0:
        return array
    out = np.full_like(array, fill)
    if offset < array.shape[1]:
        out[:, :-offset] = array[:, offset:]
    return out


def select(array: np.ndarray, k: int, key_BxT: np.ndarray, V: int) -> np.ndarray:
    """The k-th trailing (symbol, size V or 1) axis of `array` taken at key (B, T) per position; 0 where key < 0."""
    axis = 2 + k
    array = np.broadcast_to(array, array.shape[:axis] + (V,) + array.shape[axis + 1 :])
    index = np.maximum(key_BxT, 0).reshape(key_BxT.shape + (1,) * (array.ndim - 2))
    picked = np.squeeze(np.take_along_axis(array, index, axis=axis), axis=axis)
    valid = (key_BxT >= 0).reshape(key_BxT.shape + (1,) * (picked.ndim - 2))
    return np.where(valid, picked, 0)


def renamed(value: Value, renames: dict[str, str]) -> Value:
    """A definition's value with its parameter axes named by the caller's indices, sorted; two parameters
    given the same index read the diagonal. A one-hot value keeps its key."""
    if not renames:
        return value
    if isinstance(value, OneHot):
        return OneHot(value.key, renames.get(value.axes[0], value.axes[0]), value.V)
    array, axes = value.array, [renames.get(a, a) for a in value.axes]
    while len(set(axes)) < len(axes):
        first = next(k for k, a in enumerate(axes) if axes.count(a) > 1)
        second = axes.index(axes[first], first + 1)
        array = array.diagonal(axis1=2 + first, axis2=2 + second)  # the diagonal's axis comes last
        axes = axes[:first] + axes[first + 1 : second] + axes[second + 1 :] + axes[first : first + 1]
    return Value(align(Value(array, tuple(axes)), tuple(sorted(axes))), tuple(sorted(axes)))
