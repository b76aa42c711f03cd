"""Memory around a big run: large freed blocks handed back to the operating system at once
(glibc's malloc), and the cyclic garbage collector paused while a run allocates (``gc_paused``).

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
import gc
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off meanwhile (as it was after). An engine, a fleet, a live
    run and their summaries make no reference cycles: reference counting frees what they
    allocate (after one, ``gc.collect`` finds no garbage, offload tiers included; a cycle would
    wait for the next collection after). Left on, the collections their millions of small
    allocations trigger find nothing, yet each traverses every object alive then: as much as the
    simulation itself for one engine, and more the more replicas a fleet holds (8 replicas of
    5,000 requests spent 94 ms of 1.2 s CPU in them, one full collection of the heap 57 ms)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["MMAP_THRESHOLD", "M_MMAP_THRESHOLD", "gc_paused", "unmap_large_blocks"]
