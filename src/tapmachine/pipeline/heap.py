"""A job's C heap keeps the blocks it frees, for its next allocations of the same sizes.

glibc serves every allocation above its mmap threshold (which grows with use, to at most 32 MB
on 64-bit) by a fresh ``mmap`` and unmaps it on free, so a loop that allocates a tensor of that
size again takes a page fault, and a page zeroed by the kernel, for every 4 KiB of it, on every
pass. adaTAP's Gaussian node at Nh = 500 and batch 100 allocates about 0.4 GB of such tensors an
iteration (the (K, 784, 500) and (K, 500, 500) stacks): the faults took 17% of its CPU time, as
system time, and keeping the memory took an iteration from 1.80-1.86 s to 1.48-1.59 s of CPU on
one thread, its peak resident memory from 0.79 to 0.98-1.09 GB. The per-epoch evaluation's
(rows, N) float64 temporaries fault alike: TAP's log-likelihood of 5,000 real-MNIST rows at
rmnist_h100's epoch 1 took 19.5 s of CPU instead of 26.1 (4.6 s of it system time), the same
number to the last bit, at 1.35 GB of peak memory instead of 1.17.

``keep_freed_memory`` sets glibc's ``M_MMAP_MAX`` to 0 (every block from the heap) and its
``M_TRIM_THRESHOLD`` to 2 GiB (the free top of the heap is handed back only beyond that): the
reuse for which PyTorch's performance tuning guide suggests swapping in jemalloc or TCMalloc on
CPU. A job's resident memory then stays at its peak instead of falling between its peaks; the
peak is what its ``resources: mem_mb`` holds either way. Numbers are unchanged: only where
memory comes from changes.

The kept heap has one hazard: a loop that keeps small tensors from each pass while it frees
large ones pins the heap between those blocks, and they are not reused; the process then grows by
about a pass's temporaries each pass (an enumeration of 2^25 states grew to 21 GB). Such a loop
writes its per-pass results into a buffer allocated before it (``exact_log_partition``).
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

#: ``mallopt`` parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

#: The trim threshold: the largest value ``mallopt`` takes (its argument is a C int).
_NEVER_TRIM = 2**31 - 1


def _glibc():
    """The C library when it is glibc (it has ``gnu_get_libc_version``), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None
    return libc


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and keep what is freed (glibc only).

    Returns whether it was applied: False where the C library is not glibc (macOS, musl), whose
    allocators are left as they are.
    """
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))
