"""train.allocator: memory a step frees stays in the heap for the next step; large blocks on huge pages (glibc only)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import subprocess
import sys

import pytest

from crasplab.train.allocator import HUGE_PAGE_TUNABLE, with_huge_page_blocks

HEAP_AFTER_FREE = """
import ctypes, ctypes.util, sys
from crasplab.train.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
                )]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_freed_memory()
# A step's temporaries in miniature: 32 MB in 1 MB blocks (above glibc's default mmap threshold, so
# mapped separately by default) and 32 MB in 32 KB blocks (from the heap, trimmed on free by default)
# The pointers go into an array made beforehand: a Python list growing between the mallocs could
# land at the top of the heap and keep glibc from trimming it, whichever mode runs.
blocks = (ctypes.c_void_p * (32 + 1024))()
for k in range(len(blocks)):
    blocks[k] = libc.malloc(1 << 20 if k < 32 else 32 << 10)
for k in reversed(range(len(blocks))):
    libc.free(blocks[k])
print(libc.mallinfo2().arena)
"""


def heap_bytes_after_free(mode: str) -> int:
    result = subprocess.run([sys.executable, "-c", HEAP_AFTER_FREE, mode], capture_output=True, text=True, check=True)
    return int(result.stdout)


needs_glibc = pytest.mark.skipif(
    not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2"), reason="needs glibc >= 2.33"
)


@needs_glibc
@pytest.mark.machine_dependent
def test_freed_heap_is_kept_only_with_the_setting():
    kept, default = heap_bytes_after_free("keep"), heap_bytes_after_free("default")
    assert kept >= 64 << 20, f"the heap shrank to {kept} bytes although the setting asks glibc to keep it"
    assert default < 16 << 20, (
        f"without the setting glibc kept {default} bytes: the test no longer shows the difference"
    )


# Touch a 256 MB block (65,536 pages of 4 kB) and print the page faults it took.
FAULTS_TOUCHING_A_LARGE_BLOCK = """
import ctypes, ctypes.util, resource
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ctypes.memset(libc.malloc(256 << 20), 1, 256 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
TRANSPARENT_HUGE_PAGES = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")


@needs_glibc
@pytest.mark.machine_dependent
@pytest.mark.skipif(
    not TRANSPARENT_HUGE_PAGES.exists() or "[never]" in TRANSPARENT_HUGE_PAGES.read_text(),
    reason="the kernel gives no transparent huge pages",
)
def test_a_child_given_the_tunable_maps_large_blocks_on_huge_pages():
    result = subprocess.run(
        [sys.executable, "-c", FAULTS_TOUCHING_A_LARGE_BLOCK],
        capture_output=True,
        text=True,
        check=True,
        env=with_huge_page_blocks(dict(os.environ)),
    )
    faults = int(result.stdout)
    assert faults < 4096, f"touching 256 MB took {faults} page faults: the block is on 4 kB pages, not 2 MB ones"


def test_the_tunable_joins_those_already_set():
    env = with_huge_page_blocks({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0", "HOME": "/x"})
    assert env["GLIBC_TUNABLES"].split(":") == ["glibc.malloc.arena_max=2", HUGE_PAGE_TUNABLE]
    assert env["HOME"] == "/x"
    assert with_huge_page_blocks({})["GLIBC_TUNABLES"] == HUGE_PAGE_TUNABLE


# A script as the experiments use the restart: a line before it (printed once per start), then its
# arguments, the tunables it runs under and the page faults of touching a large block.
RESTARTING_SCRIPT = (
    """
import os, sys
print("started", flush=True)
from crasplab.train.allocator import restart_with_huge_page_blocks
restart_with_huge_page_blocks()
print(sys.argv[1:], os.environ.get("GLIBC_TUNABLES"))
"""
    + FAULTS_TOUCHING_A_LARGE_BLOCK
)


def run_restarting_script(tmp_path, tunables: str) -> list[str]:
    script = tmp_path / "experiment.py"
    script.write_text(RESTARTING_SCRIPT)
    env = dict(os.environ, GLIBC_TUNABLES=tunables)
    result = subprocess.run(
        [sys.executable, str(script), "--tasks", "UF"], capture_output=True, text=True, check=True, env=env
    )
    return result.stdout.splitlines()


@needs_glibc
@pytest.mark.machine_dependent
@pytest.mark.skipif(
    not TRANSPARENT_HUGE_PAGES.exists() or "[never]" in TRANSPARENT_HUGE_PAGES.read_text(),
    reason="the kernel gives no transparent huge pages",
)
def test_a_script_restarts_once_with_huge_pages_and_its_arguments(tmp_path):
    started_1, started_2, arguments, faults = run_restarting_script(tmp_path, "glibc.malloc.arena_max=4")
    assert (started_1, started_2) == ("started", "started"), "the script did not start exactly twice"
    assert arguments == f"['--tasks', 'UF'] glibc.malloc.arena_max=4:{HUGE_PAGE_TUNABLE}"
    assert int(faults) < 4096, f"touching 256 MB took {faults} page faults after the restart: no huge pages"


def test_a_script_told_not_to_use_huge_pages_is_not_restarted(tmp_path):
    started, arguments, _ = run_restarting_script(tmp_path, "glibc.malloc.hugetlb=0")
    assert started == "started"
    assert arguments == "['--tasks', 'UF'] glibc.malloc.hugetlb=0"
