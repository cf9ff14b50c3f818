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

Larger steps need one more thing, which only a child process can be given: XLA runs a step off
the main thread, and glibc serves such threads from heaps of at most 64 MB, mapping any larger
block from the OS (whatever M_MMAP_MAX says) and unmapping it on free. The paper model's step
(batch 64 x 103 tokens) takes its 855 MB of temporaries as one such block, so it page-faulted all
of it in again on every step: 219,000 faults and 0.35 s of kernel time, the step 1.41 s
single-threaded. `with_huge_page_blocks` sets glibc's tunable that backs mapped blocks with
transparent huge pages (2 MB instead of 4 kB): about 660 faults, the step 1.03 s. (Sending every
thread to one heap instead removes the faults too, but the threads then queue for that heap's
lock: the quick step was 5-20% slower.) glibc reads its tunables when a process starts, hence
an environment for a child rather than a call like `keep_freed_memory`, and, for the experiments
that compute in their own process (fine-tuning, a pretrained model answering prompts),
`restart_with_huge_page_blocks`, which starts the script again with the tunable set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys

# glibc malloc.h parameters
M_TRIM_THRESHOLD = -1  # free memory at the top of the heap kept before returning any of it
M_TOP_PAD = -2  # extra heap requested with each growth
M_MMAP_MAX = -4  # how many blocks may be mapped separately; 0: every block comes from the heap

SETTINGS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))

# Ignored by other C libraries, and by the kernel where transparent huge pages are off ("never").
HUGE_PAGE_SETTING = "glibc.malloc.hugetlb="
HUGE_PAGE_TUNABLE = HUGE_PAGE_SETTING + "1"


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


def with_huge_page_blocks(env: dict[str, str]) -> dict[str, str]:
    """A copy of `env` for a child process whose glibc backs the blocks it maps from the OS with
    transparent huge pages (kept beside any tunables `env` already sets)."""
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t and not t.startswith(HUGE_PAGE_SETTING)]
    return dict(env, GLIBC_TUNABLES=":".join([*tunables, HUGE_PAGE_TUNABLE]))


def restart_with_huge_page_blocks() -> None:
    """Replace this process by a fresh run of the same command line whose glibc backs mapped
    blocks with huge pages (`with_huge_page_blocks`); call it first thing under
    `if __name__ == "__main__"`, before anything has run that a second start would repeat.

    Does nothing where the C library is not glibc, or where GLIBC_TUNABLES already says anything
    about huge pages: the restarted process, or a user who chose otherwise (hugetlb=0)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "").split(":")
    if platform.libc_ver()[0] != "glibc" or any(t.startswith(HUGE_PAGE_SETTING) for t in tunables):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], with_huge_page_blocks(dict(os.environ)))
