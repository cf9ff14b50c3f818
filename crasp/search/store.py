"""Where the enumeration keeps what it found: categories, fingerprints, the values of kept
expressions (Store) and how each was built (Table)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crasp.search.grammar import BOOL, CLOSED, COUNT, S, ST, T


@dataclass(frozen=True)
class Category:
    """What an expression is: its type (Boolean or Count) and the indices it depends on (a bit set
    of S and T)."""

    type: str
    variables: int

    def __str__(self) -> str:
        return f"{self.type}[{ {CLOSED: '', S: 's', T: 't', ST: 's,t'}[self.variables] }]"


CATEGORIES = tuple(Category(kind, variables) for kind in (BOOL, COUNT) for variables in (CLOSED, S, T, ST))


_MULTIPLIERS = np.random.default_rng(20250101).integers(1, 2**63, size=(2, 1 << 16), dtype=np.uint64) | np.uint64(1)


def fingerprints(rows: np.ndarray, which: int = 0) -> np.ndarray:
    """A 64-bit hash of each row of a batch (any shape after the first axis); `which` picks one of
    two independent hash functions."""
    raw = np.ascontiguousarray(rows).reshape(len(rows), -1).view(np.uint8)
    padding = -raw.shape[1] % 8
    if padding:
        raw = np.concatenate([raw, np.zeros((len(raw), padding), np.uint8)], axis=1)
    words = raw.view(np.uint64)
    if words.shape[1] > _MULTIPLIERS.shape[1]:
        raise ValueError("the sample is too large for the fingerprint; use fewer or shorter strings")
    with np.errstate(over="ignore"):
        return (words * _MULTIPLIERS[which, : words.shape[1]]).sum(axis=1, dtype=np.uint64)


class Store:
    """The kept values of one category, one block per size, with an index from fingerprint to row.

    A row has shape (s axis, t axis, positions), an axis of size 1 for a variable the category
    lacks. Booleans are bit-packed along the positions (uint8), so that and, or, not, any and all
    work on eight positions per byte; counts are small integers. The size being enumerated grows
    in a buffer that doubles when full."""

    def __init__(self, category: Category, row_shape: tuple[int, ...], dtype):
        self.category = category
        self.row_shape = row_shape
        self.dtype = np.dtype(dtype)
        self.blocks: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}  # size -> first row, values, ids
        self.count = 0
        self.first_row: dict[int, int] = {}  # fingerprint -> row
        self.more_rows: dict[int, list[int]] = {}  # further rows with an equal fingerprint (different values)
        self._level_start = 0
        self._buffer = np.empty((0,) + row_shape, self.dtype)
        self._buffer_ids = np.empty(0, np.int64)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape)) * self.dtype.itemsize

    @property
    def kept_bytes(self) -> int:
        """Bytes of kept values (the growing buffer's unused end is never written, so never resident)."""
        current = (self.count - self._level_start) * self.row_bytes
        return current + sum(values.nbytes for _, values, _ in self.blocks.values())

    def level(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Values and behaviour ids of the kept expressions of this size."""
        if size not in self.blocks:
            return np.empty((0,) + self.row_shape, self.dtype), np.empty(0, np.int64)
        _, values, ids = self.blocks[size]
        return values, ids

    def finish_level(self, size: int) -> None:
        kept = self.count - self._level_start
        values, ids = self._buffer[:kept], self._buffer_ids[:kept]
        if 4 * kept < 3 * len(self._buffer):  # release a mostly empty buffer
            values, ids = values.copy(), ids.copy()
        self.blocks[size] = (self._level_start, values, ids)
        self._level_start = self.count
        self._buffer = np.empty((0,) + self.row_shape, self.dtype)
        self._buffer_ids = np.empty(0, np.int64)

    def fetch(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows),) + self.row_shape, self.dtype)
        current = rows >= self._level_start
        out[current] = self._buffer[rows[current] - self._level_start]
        if not current.all():
            for first, values, _ in self.blocks.values():
                here = (rows >= first) & (rows < first + len(values))
                out[here] = values[rows[here] - first]
        return out

    def _known(self, fingerprint: int, value: np.ndarray) -> bool:
        rows = np.array([self.first_row[fingerprint]] + self.more_rows.get(fingerprint, []))
        return bool((self.fetch(rows) == value).reshape(len(rows), -1).all(axis=1).any())

    def new_rows(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Indices into batch of the values not yet kept, each value once (its first occurrence),
        and the fingerprints of the batch."""
        flat = batch.reshape(len(batch), -1)
        prints = fingerprints(flat)
        rows = np.fromiter((self.first_row.get(h, -1) for h in prints.tolist()), np.int64, len(prints))
        hit = np.flatnonzero(rows >= 0)
        equal = (self.fetch(rows[hit]).reshape(len(hit), flat.shape[1]) == flat[hit]).all(axis=1)
        doubtful = set(hit[~equal].tolist())  # a fingerprint met with other values: decided one by one
        fresh = np.flatnonzero(rows < 0)
        _, first, inverse = np.unique(prints[fresh], return_index=True, return_inverse=True)
        representative = fresh[first][inverse]
        doubtful.update(fresh[~(flat[fresh] == flat[representative]).all(axis=1)].tolist())
        chosen = [int(k) for k in np.sort(fresh[first]) if int(k) not in doubtful]
        by_print: dict[int, list[int]] = {}
        for k in chosen:
            by_print.setdefault(int(prints[k]), []).append(k)
        for k in sorted(doubtful):  # rare: compare exactly with every kept or chosen value of that fingerprint
            h = int(prints[k])
            if h in self.first_row and self._known(h, batch[k]):
                continue
            if not any(np.array_equal(batch[k], batch[j]) for j in by_print.get(h, [])):
                by_print.setdefault(h, []).append(k)
        return np.array(sorted(k for ks in by_print.values() for k in ks), np.int64), prints

    def _reserve(self, extra: int) -> None:
        used = self.count - self._level_start
        if used + extra <= len(self._buffer):
            return
        capacity = max(64, 2 * len(self._buffer), used + extra)
        buffer = np.empty((capacity,) + self.row_shape, self.dtype)
        buffer[:used] = self._buffer[:used]
        ids = np.empty(capacity, np.int64)
        ids[:used] = self._buffer_ids[:used]
        self._buffer, self._buffer_ids = buffer, ids

    def add(self, values: np.ndarray, prints: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Keep new values (with their fingerprints) under the given behaviour ids; return their rows."""
        self._reserve(len(values))
        rows = np.arange(self.count, self.count + len(values))
        self._buffer[rows - self._level_start] = values
        self._buffer_ids[rows - self._level_start] = ids
        for h, row in zip(prints.tolist(), rows.tolist()):
            if h in self.first_row:
                self.more_rows.setdefault(h, []).append(row)
            else:
                self.first_row[h] = row
        self.count += len(values)
        return rows


class Table:
    """Every kept behaviour: how it is built (kind and three arguments: children's ids, an operator
    or offset index), its size, its category (index into CATEGORIES) and its row in that store."""

    def __init__(self):
        self.count = 0
        self.kind = np.empty(0, np.int8)
        self.args = np.empty((0, 3), np.int64)
        self.size = np.empty(0, np.int16)
        self.category = np.empty(0, np.int8)
        self.row = np.empty(0, np.int64)

    def __len__(self) -> int:
        return self.count

    def _grow(self, needed: int) -> None:
        if self.count + needed <= len(self.kind):
            return
        capacity = max(1024, 2 * len(self.kind), self.count + needed)
        for name in ("kind", "args", "size", "category", "row"):
            old = getattr(self, name)
            new = np.empty((capacity,) + old.shape[1:], old.dtype)
            new[: self.count] = old[: self.count]
            setattr(self, name, new)

    def add(self, kind: int, args: np.ndarray, size: int, category: Category, rows: np.ndarray) -> None:
        self._grow(len(rows))
        span = slice(self.count, self.count + len(rows))
        self.kind[span], self.args[span], self.size[span] = kind, args, size
        self.category[span], self.row[span] = CATEGORIES.index(category), rows
        self.count += len(rows)

    def describe(self, behaviour: int) -> tuple[int, tuple[int, int, int], Category]:
        return (
            int(self.kind[behaviour]),
            tuple(int(a) for a in self.args[behaviour]),
            CATEGORIES[self.category[behaviour]],
        )
