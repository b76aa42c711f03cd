"""Weighted samples of millions of values (a run's pooled inter-token latencies), summarised in
little more memory than the sample itself.

A million-request run has about nine million steps, and each step's duration stands for as many
inter-token gaps as the requests it gave a token to. ``LatencyStats.of_positive_weights`` sorts
that sample once; the helpers here keep its temporaries to one sort order and chunks of
``CHUNK`` elements (no boolean-indexed copies of the whole sample, no cumulative sum of it), so
the summary's peak memory is the sample, its weights and the sort's order (``benchmarks/memory.py``).
Every figure is the one the whole-array expressions give: the same values in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Elements handled at a time by the chunked loops (8 MB of float64).
CHUNK = 1 << 20


def pooled_sample(
    durations_s: np.ndarray, weights: np.ndarray, gaps_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The steps with a positive weight (their durations, in ms) followed by the explicit gaps
    (in ms, weight 1): ``concatenate([durations_s[w > 0], gaps_s]) * 1e3`` and its weights,
    built a chunk at a time. The weights are int32 when they fit (a step's weight is at most
    its batch), half the memory of int64."""
    w = np.asarray(weights)
    d = np.asarray(durations_s, dtype=np.float64)  # a strided view of the step rows stays one
    gaps = np.asarray(gaps_s, dtype=np.float64)
    nk = sum(int(np.count_nonzero(w[lo : lo + CHUNK] > 0)) for lo in range(0, len(w), CHUNK))
    narrow = nk == 0 or int(w.max()) <= np.iinfo(np.int32).max
    values = np.empty(nk + len(gaps), dtype=np.float64)
    out_w = np.ones(nk + len(gaps), dtype=np.int32 if narrow else np.int64)
    at = 0
    for lo in range(0, len(w), CHUNK):
        wc = w[lo : lo + CHUNK]
        keep = wc > 0
        k = int(np.count_nonzero(keep))
        values[at : at + k] = d[lo : lo + CHUNK][keep]
        out_w[at : at + k] = wc[keep]
        at += k
    values[:nk] *= 1e3  # in place: the same products as ``durations[keep] * 1e3``
    values[nk:] = gaps * 1e3
    return values, out_w


def sort_weighted(v: np.ndarray, w: np.ndarray) -> None:
    """Sort ``v`` in place, stably, and permute ``w`` with it (``w`` in place too): equal to
    ``order = argsort(v, stable); v[:] = v[order]; w[:] = w[order]``, with one array of the
    sample's size (the order) besides them and a temporary of the weights' size."""
    order = np.argsort(v, kind="stable")
    w[:] = w[order]
    del order
    v.sort(kind="stable")  # the same stable order again: ``v[order]`` without a copy of v


def sorted_runs(
    durations_s: np.ndarray, weights: np.ndarray, gaps_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """``pooled_sample`` of one engine with its two parts (the steps', then the explicit gaps')
    each sorted stably with its weights (``sort_weighted``): (values, weights, length of the
    steps' part). ``merged_runs`` pools several engines' from these."""
    values, w = pooled_sample(durations_s, weights, gaps_s)
    nk = len(values) - len(gaps_s)
    sort_weighted(values[:nk], w[:nk])  # views: each part sorted in place
    sort_weighted(values[nk:], w[nk:])
    return values, w, nk


def merged_runs(runs: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The pooled sample of several engines (``pooled_sample`` of their steps concatenated, then
    of their gaps concatenated) from their ``sorted_runs``: every steps' part, then every gaps'
    part, each already sorted. ``sort_weighted`` then gives exactly what it gives on the pooled
    sample itself: a stable sort orders equal values by their position, and each part keeps
    its equal values in their order and its place among the parts. It costs less, though:
    the stable sort (timsort) finds the sorted parts and merges them, where on the pooled
    sample it sorts the fleet's whole ITL sample, a fleet's largest sort (8 replicas of 5,000
    requests: 45 ms for the fleet against 3 ms for a replica), which then repeated the work
    of each replica's own summary."""
    steps = [(v[:nk], w[:nk]) for v, w, nk in runs]
    gaps = [(v[nk:], w[nk:]) for v, w, nk in runs]
    return (
        np.concatenate([v for v, _ in steps + gaps]),
        np.concatenate([w for _, w in steps + gaps]),
    )


def first_above(w: np.ndarray, positions: Sequence[int]) -> dict[int, int]:
    """For each position p: the first index i with ``cumsum(w)[i] > p`` (that is
    ``searchsorted(cumsum(w), p, side="right")``), from the cumulative sum a chunk at a time.
    Every position must be below ``w.sum()``."""
    pending = sorted(set(positions))
    found: dict[int, int] = {}
    base = 0
    for lo in range(0, len(w), CHUNK):
        if not pending:
            break
        cum = np.cumsum(w[lo : lo + CHUNK], dtype=np.int64)
        cum += base
        while pending and pending[0] < int(cum[-1]):
            p = pending.pop(0)  # >= base: it was not below the previous chunk's total
            found[p] = lo + int(np.searchsorted(cum, p, side="right"))
        base = int(cum[-1])
    if pending:  # pragma: no cover - callers ask for positions below the total
        raise ValueError(f"positions {pending} are not below the weights' sum {base}")
    return found


__all__ = ["CHUNK", "first_above", "merged_runs", "pooled_sample", "sort_weighted", "sorted_runs"]
