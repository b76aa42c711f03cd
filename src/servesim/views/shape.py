"""Shaping raw data for display: histograms with edges, down-sampled series, time bins.

Done once, on the producer's side, so a million-request run reaches a browser as a few hundred
points (and the same inputs give the same points).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from servesim.views.model import Histogram, Series

#: Points a series keeps at most (min/max of each bucket: spikes survive down-sampling).
MAX_POINTS = 600


def histogram(
    key: str,
    title: str,
    values: np.ndarray,
    unit: str | None,
    *,
    bins: int = 40,
    weights: np.ndarray | None = None,
    slo: float | None = None,
    help: str | None = None,
    percentiles: tuple[float | None, float | None, float | None] = (None, None, None),
    value_range: tuple[float, float] | None = None,
    label: str | None = None,
    count_label: str = "requests",
    reference: float | None = None,
    reference_label: str | None = None,
) -> Histogram:
    """A histogram of the finite values (weighted when ``weights`` is given); 1..``bins`` bins.
    ``value_range`` fixes the bins' span (two histograms drawn on the same bins)."""
    v = np.asarray(values, dtype=np.float64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    keep = np.isfinite(v) if w is None else np.isfinite(v) & (w > 0)
    v = v[keep]
    w = None if w is None else w[keep]
    if v.size == 0:
        return Histogram(
            key=key,
            title=title,
            unit=unit,
            edges=[],
            counts=[],
            count=0,
            slo=slo,
            help=help,
            label=label,
            count_label=count_label,
            reference=reference,
            reference_label=reference_label,
        )
    lo, hi = (float(v.min()), float(v.max())) if value_range is None else value_range
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9:  # one value (up to rounding): one narrow range
        hi = lo + max(abs(lo) * 1e-3, 1e-9)
    counts, edges = np.histogram(v, bins=max(1, bins), range=(lo, hi), weights=w)
    p50, p90, p99 = percentiles
    return Histogram(
        key=key,
        title=title,
        unit=unit,
        edges=[_r(x) for x in edges],
        counts=[round(float(c)) for c in counts],
        count=round(float(w.sum())) if w is not None else int(v.size),
        p50=p50,
        p90=p90,
        p99=p99,
        slo=slo,
        help=help,
        label=label,
        count_label=count_label,
        reference=reference,
        reference_label=reference_label,
    )


#: Values ``pooled_histogram`` bins at a time (a multiple of numpy's own 65,536-value blocks).
CHUNK = 1 << 20

#: One piece of a pooled sample: values, their integer weights (None: one each), a factor.
Part = tuple[np.ndarray, np.ndarray | None, float | None]


def pooled_histogram(
    key: str,
    title: str,
    parts: Sequence[Part],
    unit: str | None,
    *,
    bins: int = 40,
    value_range: tuple[float, float] | None = None,
    **labels: Any,
) -> Histogram:
    """``histogram`` of the concatenation of ``parts`` (each part's values times its factor,
    weighted when any part has weights), binned ``CHUNK`` values at a time: the same edges,
    counts and count (integer weights add up exactly in any grouping) without the concatenated
    sample or its filtered copy, which for a run of millions of steps are the views' peak
    memory. ``labels``: ``histogram``'s other fields (slo, help, percentiles, label, ...)."""
    weighted = any(w is not None for _, w, _ in parts)
    n, lo, hi = 0, math.inf, -math.inf
    for v, _ in _kept_chunks(parts, weighted):
        if v.size:
            n, lo, hi = n + v.size, min(lo, float(v.min())), max(hi, float(v.max()))
    if value_range is not None:
        lo, hi = value_range
    if n == 0:
        return histogram(key, title, np.empty(0), unit, bins=bins, **labels)
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9:  # as ``histogram``: one narrow range
        hi = lo + max(abs(lo) * 1e-3, 1e-9)
    edges = np.histogram_bin_edges(np.empty(0), bins=max(1, bins), range=(lo, hi))
    counts = np.zeros(len(edges) - 1)
    total = 0
    for v, w in _kept_chunks(parts, weighted):
        if v.size:
            counts += np.histogram(v, bins=len(counts), range=(lo, hi), weights=w)[0]
            total += int(w.sum()) if w is not None else v.size
    p50, p90, p99 = labels.pop("percentiles", (None, None, None))
    return Histogram(
        key=key,
        title=title,
        unit=unit,
        edges=[_r(x) for x in edges],
        counts=[round(float(c)) for c in counts],
        count=total,
        p50=p50,
        p90=p90,
        p99=p99,
        **labels,
    )


def _kept_chunks(parts: Sequence[Part], weighted: bool) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """The finite values (with a positive weight, when ``weighted``) of ``parts``, a chunk at a time."""
    for values, weights, factor in parts:
        for at in range(0, len(values), CHUNK):
            v = np.asarray(values[at : at + CHUNK], dtype=np.float64)
            if factor is not None:
                v = v * factor
            if not weighted:
                yield v[np.isfinite(v)], None
                continue
            w = np.ones(len(v)) if weights is None else np.asarray(weights[at : at + CHUNK], dtype=np.float64)
            keep = np.isfinite(v) & (w > 0)
            yield v[keep], w[keep]


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most ``max_points`` points: each of ``max_points // 2`` buckets keeps its min and max."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if not (y.dtype == np.float64 or (y.dtype.kind in "iub" and y.dtype.itemsize <= 4)):
        y = y.astype(np.float64)  # small integers compare and convert exactly: no float copy
    n = len(x)
    if n <= max_points:
        return [_r(a) for a in x], [_r(b) for b in y]
    buckets = max(1, max_points // 2)
    bounds = np.linspace(0, n, buckets + 1).astype(np.int64)
    idx: list[int] = []
    for a, b in itertools.pairwise(bounds.tolist()):
        if b <= a:
            continue
        seg = y[a:b]
        i, j = a + int(np.argmin(seg)), a + int(np.argmax(seg))
        idx.extend(sorted({i, j}))
    return [_r(x[i]) for i in idx], [_r(y[i]) for i in idx]


def time_binned(
    t: np.ndarray,
    values: np.ndarray,
    t0: float,
    t1: float,
    bins: int,
    how: str = "sum",
    *,
    plus: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Bin ``values`` at times ``t`` into ``bins`` equal bins over [t0, t1] (sum or mean per bin);
    returns the bins' left edges and the binned values. ``plus``: the times are ``t + plus``
    (steps' ends from their starts and durations), added a chunk at a time."""
    bins = max(1, bins)
    if t1 <= t0:
        t1 = t0 + 1.0
    edges = np.linspace(t0, t1, bins + 1)
    t = np.asarray(t, dtype=np.float64)
    values = np.asarray(values)
    # Integer values (a step's counts) add up exactly in any grouping: a chunk at a time, no
    # float copies of millions of steps. Other values are summed in one pass, in their order.
    step = CHUNK if values.dtype.kind in "iub" else max(1, len(t))
    total = np.zeros(bins)
    n = np.zeros(bins, dtype=np.int64)
    for at in range(0, len(t), step):
        tc = t[at : at + step] if plus is None else t[at : at + step] + plus[at : at + step]
        k = np.clip(((tc - t0) / (t1 - t0) * bins).astype(np.int64), 0, bins - 1)
        total += np.bincount(k, weights=np.asarray(values[at : at + step], dtype=np.float64), minlength=bins)
        if how == "mean":
            n += np.bincount(k, minlength=bins)
    if how == "mean":
        total = np.divide(total, n, out=np.zeros(bins), where=n > 0)
    return edges[:-1], total


def series(
    key: str,
    title: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    x_label: str = "time",
    x_unit: str | None = "s",
    y_label: str,
    y_unit: str | None = None,
    kind: str = "line",
    max_points: int = MAX_POINTS,
    reference: float | None = None,
    reference_label: str | None = None,
    help: str | None = None,
) -> Series:
    xs, ys = downsample(x, y, max_points)
    return Series.model_validate(
        {
            "key": key,
            "title": title,
            "x_label": x_label,
            "x_unit": x_unit,
            "y_label": y_label,
            "y_unit": y_unit,
            "x": xs,
            "y": ys,
            "kind": kind,
            "reference": reference,
            "reference_label": reference_label,
            "help": help,
        }
    )


def rounded(values: np.ndarray | list[float]) -> list[float]:
    """Values as the display data holds them (``_r``: 6 significant digits)."""
    return [_r(v) for v in np.asarray(values, dtype=np.float64)]


def _r(x: float) -> float:
    """Round for display data (6 significant digits): stable JSON, small payloads."""
    f = float(x)
    if not np.isfinite(f) or f == 0.0:
        return 0.0 if not np.isfinite(f) else f
    return float(f"{f:.6g}")


__all__ = [
    "CHUNK",
    "MAX_POINTS",
    "Part",
    "downsample",
    "histogram",
    "pooled_histogram",
    "rounded",
    "series",
    "time_binned",
]
