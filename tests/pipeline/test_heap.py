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


# A job's exact enumeration (``tapmachine exact-curve``) under the kept heap: 256 chunks of
# 4,096 states, each with a few (4096, 784) float64 temporaries (26 MB). Prints the growth of
# the resident memory, in MB, from the first chunks to the end.
_ENUMERATION = """
import torch
from tapmachine.pipeline.heap import keep_freed_memory
assert keep_freed_memory()
from tapmachine.core.estimators import exact_log_partition
from tapmachine.core.machine import RBM
from tapmachine.core.priors import Bernoulli

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
f64 = torch.float64
W = 0.01 * torch.randn(784, 20, dtype=f64, generator=g)
m = RBM(W, Bernoulli(torch.zeros(784, dtype=f64)), Bernoulli(torch.zeros(20, dtype=f64)))
exact_log_partition(m, chunk=4096, max_units=20)  # warm: the heap holds a chunk's blocks
before = rss_mb()
exact_log_partition(m, chunk=4096, max_units=20)
print(rss_mb() - before)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's; other C libraries are left alone")
def test_enumeration_does_not_grow_a_kept_heap():
    """Small tensors kept across the chunks' large temporaries fragmented the kept heap: the
    paper run's exact curve of bmnist_h25 (2^25 states) grew to 21 GB and was killed."""
    out = subprocess.run(
        [sys.executable, "-c", _ENUMERATION], capture_output=True, text=True, check=True
    )
    assert float(out.stdout.split()[-1]) < 100.0  # a chunk's temporaries are ~100 MB
