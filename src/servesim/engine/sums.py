"""Sums of products whose last digit does not depend on the host.

``numpy.dot`` hands float64 vectors to BLAS, whose answer depends on its thread count (OpenBLAS
splits a dot product of more than 10,000 elements between its threads: a Ray worker, which runs
with ``OMP_NUM_THREADS=1``, or a host with another core count, sums in another order) and on the
CPU kernel it picked. Results built from such a sum differ in the last digit from machine to
machine and executor to executor. Here the products are IEEE-exact per element and the sum is
numpy's own pairwise summation, a fixed order, in bounded chunks combined by ``math.fsum``
(correctly rounded): the same bytes everywhere (invariant DET-2).
"""

from __future__ import annotations

import math

import numpy as np

from servesim.errors import InternalError

_CHUNK = 1 << 16  # elements per temporary product: bounded memory for runs of millions of steps


def sum_of_products(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a[i]·b[i] in float64 (integer weights too), independent of BLAS, threads and CPU."""
    if a.shape != b.shape or a.ndim != 1:
        raise InternalError(f"sum_of_products needs two vectors of one length, got {a.shape} and {b.shape}")

    def part(i: int) -> float:
        return float(np.sum(np.multiply(a[i : i + _CHUNK], b[i : i + _CHUNK], dtype=np.float64)))

    if a.size <= _CHUNK:
        return part(0)
    return math.fsum(part(i) for i in range(0, a.size, _CHUNK))
