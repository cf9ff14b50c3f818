"""Atomic files: checkpoints (any pytree of arrays) and JSON / JSON-lines results.

Checkpoints are .npz files of the pytree's leaves; loading needs a template of the same
structure (a freshly initialised state), so no pickled code is ever executed. Every write goes
to a temporary file in the same folder and is moved into place with os.replace, so a process
killed at any moment leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import jax
import numpy as np


_UMASK = os.umask(0)
os.umask(_UMASK)


class CheckpointError(RuntimeError):
    """A checkpoint does not match the state it is loaded into."""


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes the file private; results are meant to be shared
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, value) -> None:
    _atomic_write(path, lambda f: f.write((json.dumps(value, indent=2, sort_keys=True) + "\n").encode()))


def write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda f: f.write(text.encode()))


def write_jsonl(path: Path, records: list[dict]) -> None:
    _atomic_write(path, lambda f: f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()))


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a line torn by a killed writer is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(keepends=True), start=1):
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise CheckpointError(f"{path}:{number}: not a JSON record ({error.msg}); expected one JSON object "
                                  "per line as the lab writes them. Delete or repair that line") from None
    return records


def save_checkpoint(path: Path, state, meta: dict) -> None:
    """Save a pytree of arrays plus a JSON-able `meta` dict."""
    leaves = jax.tree.leaves(state)
    arrays = {f"leaf_{i:05d}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    arrays["meta_json"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    arrays["structure"] = np.frombuffer(str(jax.tree.structure(state)).encode(), dtype=np.uint8)
    _atomic_write(path, lambda f: np.savez(f, **arrays))


def load_checkpoint(path: Path, template):
    """(state, meta): the saved leaves placed into `template`'s structure."""
    try:
        with np.load(path) as data:
            saved_structure = bytes(data["structure"]).decode()
            template_leaves = jax.tree.leaves(template)
            leaves = [data[f"leaf_{i:05d}"] for i in range(len(template_leaves))]
            meta = json.loads(bytes(data["meta_json"]).decode())
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as error:
        # Our own writes are atomic, so this is a file damaged or cut short elsewhere (a full disk,
        # a copy that did not finish).
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(error).__name__}: {error}); expected the .npz file "
            "that training writes. To recover, delete it and run the same command again: that job then "
            "trains again from scratch (same seed, same result), or restore the file from a copy") from None
    if saved_structure != str(jax.tree.structure(template)):
        raise CheckpointError(f"{path}: the checkpoint was written for a different model or optimizer "
                              "structure; delete the run folder or use the settings it was made with")
    for i, (saved, expected) in enumerate(zip(leaves, template_leaves)):
        if saved.shape != np.shape(expected):
            raise CheckpointError(f"{path}: leaf {i} has shape {saved.shape}, the model expects "
                                  f"{np.shape(expected)}; delete the run folder or use its original settings")
    return jax.tree.unflatten(jax.tree.structure(template), leaves), meta
