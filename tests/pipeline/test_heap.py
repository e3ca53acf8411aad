"""A job keeps the memory it frees: repeated large tensors stop faulting pages in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tapmachine.pipeline import heap

GLIBC = heap._glibc() is not None

# A fresh process allocates, fills and frees a 64 MB tensor 40 times (as adaTAP's Gaussian node
# does each iteration) and prints the minor page faults of the last 20 passes (the heap takes a
# few passes to hold free blocks of the size).
_FAULTS = """
import resource, sys, torch
if sys.argv[1] == "keep":
    from tapmachine.pipeline.heap import keep_freed_memory
    assert keep_freed_memory()
for _ in range(20):
    torch.ones(2**24)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    torch.ones(2**24)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's; other C libraries are left alone")
def test_kept_memory_is_not_faulted_in_again():
    pages = 20 * 2**26 // 4096  # the 20 passes' pages
    plain, kept = _faults("plain"), _faults("keep")
    assert plain > 0.9 * pages  # glibc maps and unmaps each pass: every page faults again
    assert kept < 0.05 * pages  # kept: the first pass's pages are reused


def test_keep_freed_memory_says_whether_it_applied():
    assert heap.keep_freed_memory() is GLIBC
