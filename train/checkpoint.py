"""Checkpoints: any pytree of arrays plus a JSON-able dict, in one atomic .npz file.

Loading needs a template of the same structure (a freshly initialised state), so no pickled code
is ever executed. The file is written next to its place and moved there (crasplab.records.files), so a
process killed at any moment leaves either the old checkpoint or the new one, never a torn one.

Why not orbax-checkpoint: for the lab's models it is measured worse (benchmarks/checkpoint.py on
the 2-core machine: the quick model's save 8x and restore 5x slower, the paper model's 3.5x and
2x, and a folder of 11-12 files per checkpoint instead of one). Its strengths (sharded arrays,
asynchronous saves of large models) do not apply to models of 0.3M-10M values.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import jax
import numpy as np

from crasplab.errors import LabError
from crasplab.records.files import atomic_write


class CheckpointError(LabError, RuntimeError):
    """A checkpoint does not match the state it is loaded into."""


def save_checkpoint(path: Path, state, meta: dict) -> None:
    """Save a pytree of arrays plus a JSON-able `meta` dict."""
    arrays = _arrays(state, meta)
    atomic_write(path, lambda f: np.savez(f, **arrays))


def encode_checkpoint(state, meta: dict) -> bytes:
    """The bytes of a checkpoint file, compressed (zip's deflate): for a state of mostly zeros, as a
    compiled program's weights and their optimizer state at step 0 are, whose size is known before
    it is written (write it with write_encoded; load_checkpoint reads either kind)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **_arrays(state, meta))
    return buffer.getvalue()


def write_encoded(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def _arrays(state, meta: dict) -> dict[str, np.ndarray]:
    arrays = {f"leaf_{i:05d}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(state))}
    arrays["meta_json"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    arrays["structure"] = np.frombuffer(str(jax.tree.structure(state)).encode(), dtype=np.uint8)
    return arrays


UNREADABLE = (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile)


def _unreadable(path: Path, error: Exception) -> CheckpointError:
    # Our own writes are atomic, so this is a file damaged or cut short elsewhere (a full disk, a
    # copy that did not finish).
    return CheckpointError(
        f"{path}: not a readable checkpoint ({type(error).__name__}: {error}); expected the .npz file "
        "that training writes. To recover, delete it and run the same command again: that job then "
        "trains again from scratch (same seed, same result), or restore the file from a copy"
    )


def read_checkpoint_meta(path: Path) -> dict:
    """The `meta` dict alone (the arrays are not read): what a stack needs to know before it loads."""
    try:
        with np.load(path) as data:
            return json.loads(bytes(data["meta_json"]).decode())
    except UNREADABLE as error:
        raise _unreadable(path, error) from None


def load_checkpoint(path: Path, template):
    """(state, meta): the saved leaves placed into `template`'s structure. A file that is not a
    checkpoint is refused as unreadable; a checkpoint of another structure or shape (trained with
    other settings: another n_layers, d_model, optimizer) is refused as such, never as damaged."""
    try:
        with np.load(path) as data:
            saved_structure = bytes(data["structure"]).decode()
            meta = json.loads(bytes(data["meta_json"]).decode())
            if saved_structure != str(jax.tree.structure(template)):
                raise _other_settings(path, "a model or optimizer of another structure")
            template_leaves = jax.tree.leaves(template)
            leaves = [data[f"leaf_{i:05d}"] for i in range(len(template_leaves))]
    except UNREADABLE as error:
        raise _unreadable(path, error) from None
    for i, (saved, expected) in enumerate(zip(leaves, template_leaves)):
        if saved.shape != np.shape(expected):
            raise _other_settings(
                path, f"leaf {i} of shape {saved.shape}, where these settings make {np.shape(expected)}"
            )
    return jax.tree.unflatten(jax.tree.structure(template), leaves), meta


def count_saved_leaves(path: Path) -> int:
    """How many arrays of the state a checkpoint holds (read without loading them)."""
    try:
        with np.load(path) as data:
            return sum(name.startswith("leaf_") for name in data.files)
    except UNREADABLE as error:
        raise _unreadable(path, error) from None


def _other_settings(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path} holds {what}: it was trained with other settings (such as another n_layers or d_model) "
        "and is not damaged, so keep it. Load it with the settings it was trained with (its job.json), or "
        "give these settings another --out"
    )
