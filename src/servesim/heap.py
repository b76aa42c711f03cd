"""Hand large freed blocks back to the operating system at once (glibc's malloc).

glibc serves a block under its mmap threshold from the heap, and the threshold rises (up to
32 MiB) each time a mapped block is freed. A million-request run builds and frees many arrays
of a few MB (one per request column, per chunk of records, per temporary of the summary and the
views): once the threshold has risen they come from the heap, and their freed pages stay in the
process's resident memory, behind live ones, until the heap's top is free (about 130 MB of the
peak of ``servesim simulate --json`` on 1M requests; ``benchmarks/memory.py``). A fixed
threshold maps every block of ``threshold`` bytes or more on its own, so freeing it unmaps it.
Smaller blocks and Python's own objects are unaffected. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``.
M_MMAP_THRESHOLD = -3

#: Blocks of this many bytes or more are mapped on their own (a 1M-row column is 8 MB).
MMAP_THRESHOLD = 1 << 20


def unmap_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for the rest of the process; True when
    the C library took it (glibc), False where there is no such setting (macOS, Windows, musl
    takes it and ignores it)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


__all__ = ["MMAP_THRESHOLD", "M_MMAP_THRESHOLD", "unmap_large_blocks"]
