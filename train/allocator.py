"""Keep the memory one compiled step frees for the next step, instead of returning it to the OS.

A training step of the quick model (batch 64 x 43 tokens) needs tens of MB of temporaries. With
glibc's default settings the large ones are mapped fresh from the OS on every step and unmapped
at its end, and the heap is trimmed back after the small ones: the next step page-faults all of
that memory in again (13,000 page faults and 1.7 ms of kernel time per step, single-threaded).
Keeping it brings the faults down to a few hundred and the step from about 76 ms to about 51 ms
(`python benchmarks/train_step.py`, column "defaults"). Torch does not suffer from this: its
allocator caches blocks.

Keeping memory costs nothing that is not already in use: the heap holds on to what a step
touched, and the pad below is address space until something writes to it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# glibc malloc.h parameters
M_TRIM_THRESHOLD = -1  # free memory at the top of the heap kept before returning any of it
M_TOP_PAD = -2  # extra heap requested with each growth
M_MMAP_MAX = -4  # how many blocks may be mapped separately; 0: every block comes from the heap

SETTINGS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))


def keep_freed_memory() -> bool:
    """Tell glibc to serve every block from the heap and keep up to 1 GiB of it free for reuse;
    True if it took the settings.

    Process-wide and idempotent. False where the C library is not glibc (macOS, musl): those
    allocators have their own policies, and training runs as before, only without this gain."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return all(mallopt(parameter, value) == 1 for parameter, value in SETTINGS)
