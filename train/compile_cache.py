"""Compiled steps kept on disk, so that a job does not compile what another job already did.

A job compiles its training step once per length bucket, and its evaluation once per test bin
(teacher forcing and KV-cache greedy decoding): about 24 s per job on one core of the 2-core
machine (benchmarks/compile_cache.py). Most of it repeats work another process has already
done: tasks with the same vocabulary and lengths (UL and UR, the four non-unique retrieval tasks,
UF and UB, NF and NB) compile identical programs, and so do other seeds and resumed runs. JAX's
persistent compilation cache stores each compiled program under a key made of the computation,
the compiler version and its flags; a hit loads the same executable, so no number changes.

The cache lives in the user's cache folder ($XDG_CACHE_HOME, else ~/.cache, then crasp-lab/xla),
which only this user can write: JAX runs whatever a cache entry holds. Set CRASP_LAB_XLA_CACHE
to another folder, or to "off" to compile everything afresh.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from crasplab.records.settings import SettingsError

CACHE_ENV = "CRASP_LAB_XLA_CACHE"
# Programs that compile faster than this are not worth a file (JAX's own helpers, tiny updates).
MIN_COMPILE_SECONDS = 0.5
MAX_CACHE_BYTES = 2 << 30  # least recently used entries go beyond this


def compile_cache_folder() -> Path | None:
    """Where compiled programs are kept (None: the cache is off)."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        folder = Path(chosen).expanduser()
        if folder.exists() and not folder.is_dir():
            raise SettingsError(
                f"{CACHE_ENV}={chosen} names a file, not a folder; give a folder (made if missing) for "
                "compiled programs, or 'off'"
            )
        return folder
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crasp-lab" / "xla"


def use_compile_cache() -> Path | None:
    """Point JAX's persistent compilation cache at `compile_cache_folder()`; process-wide and
    idempotent. Returns the folder, or None when the cache is off."""
    folder = compile_cache_folder()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
    return folder
