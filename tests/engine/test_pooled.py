"""The pooled ITL summary (``servesim.engine.pooled``) gives the figures of the whole-array
computation it replaced, to the last bit, whatever the chunk size: the same weighted sample
sorted stably, the same mean summed in that order, the same percentiles. The reference here is
that computation written out (and, for percentiles, ``numpy.percentile`` of the expanded sample)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from servesim.engine import pooled
from servesim.engine.results import PERCENTILES, LatencyStats, itl_stats
from servesim.engine.sums import sum_of_products


def whole_array_itl(durations_s: np.ndarray, weights: np.ndarray, gaps_s: np.ndarray) -> LatencyStats:
    """The summary as it was computed before chunking: filter, concatenate, argsort, cumsum."""
    keep = weights > 0
    v = np.concatenate([durations_s[keep] * 1e3, gaps_s * 1e3])
    w = np.concatenate([weights[keep].astype(np.int64), np.ones(len(gaps_s), dtype=np.int64)])
    total = int(w.sum())
    if total == 0:
        return LatencyStats()
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    ps = []
    for q in PERCENTILES:
        pos = (total - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, total - 1)
        vlo = float(v[int(np.searchsorted(cum, lo, side="right"))])
        vhi = float(v[int(np.searchsorted(cum, hi, side="right"))])
        ps.append(vlo + (vhi - vlo) * (pos - lo))
    mean = sum_of_products(v, w) / total
    return LatencyStats(count=total, mean=mean, p50=ps[0], p90=ps[1], p95=ps[2], p99=ps[3], max=float(v[-1]))


samples = st.tuples(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 6)), max_size=300),  # (duration ticks, weight)
    st.lists(st.integers(0, 60), max_size=20),  # explicit gaps, in ticks
    st.sampled_from([1, 2, 3, 7, 64, 1 << 20]),  # chunk size
)


@settings(max_examples=examples(200), deadline=None)
@given(samples)
def test_the_chunked_summary_equals_the_whole_array_one(
    case: tuple[list[tuple[int, int]], list[int], int],
) -> None:
    steps, gap_ticks, chunk = case
    # Few distinct durations (ties: the stable order decides which weight sits where) at 0.1 ms steps.
    d = np.asarray([t for t, _ in steps], dtype=np.float64) * 1e-4
    w = np.asarray([k for _, k in steps], dtype=np.int64)
    gaps = np.asarray(gap_ticks, dtype=np.float64) * 1e-4
    expected = whole_array_itl(d, w, gaps)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pooled, "CHUNK", chunk)
        got = itl_stats(d, w, gaps)
    assert got.model_dump() == expected.model_dump()  # exact: no tolerance


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 5)), min_size=1, max_size=200),
    st.sampled_from([1, 3, 16]),
)
def test_weighted_percentiles_are_numpys_of_the_expanded_sample(
    pairs: list[tuple[int, int]], chunk: int
) -> None:
    v = np.asarray([a for a, _ in pairs], dtype=np.float64) / 8  # exact in binary: no rounding in repeat
    w = np.asarray([b for _, b in pairs], dtype=np.int32)
    expanded = np.repeat(v, w)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pooled, "CHUNK", chunk)
        got = LatencyStats.of_positive_weights(v.copy(), w.copy())
    want = np.percentile(expanded, PERCENTILES)
    assert [got.p50, got.p90, got.p95, got.p99] == pytest.approx(list(want), rel=1e-12, abs=1e-12)
    assert got.count == len(expanded) and got.max == expanded.max()
    assert got.mean == pytest.approx(expanded.mean(), rel=1e-12)


def test_first_above_is_searchsorted_of_the_cumulative_sum() -> None:
    rng = np.random.default_rng(3)
    w = rng.integers(0, 5, 1000).astype(np.int32)
    cum = np.cumsum(w)
    positions = sorted({int(p) for p in rng.integers(0, int(cum[-1]), 40)})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pooled, "CHUNK", 37)
        found = pooled.first_above(w, positions)
    assert found == {p: int(np.searchsorted(cum, p, side="right")) for p in positions}


def test_weights_too_large_for_int32_stay_int64() -> None:
    v, w = pooled.pooled_sample(np.array([0.01, 0.02]), np.array([2**31, 1]), np.array([0.005]))
    assert w.dtype == np.int64 and w.tolist() == [2**31, 1, 1]
    assert v.tolist() == [10.0, 20.0, 5.0]


engines = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(1, 12), st.integers(0, 4)), max_size=80),  # steps (ticks, weight)
        st.lists(st.integers(0, 12), max_size=8),  # explicit gaps, in ticks
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=examples(200), deadline=None)
@given(engines)
def test_merged_sorted_runs_sort_as_the_pooled_sample_of_the_engines(
    parts: list[tuple[list[tuple[int, int]], list[int]]],
) -> None:
    """A fleet's pooled ITL from each engine's ``sorted_runs`` (``merged_runs``), once sorted, is
    the pooled sample of the engines' concatenated steps and gaps sorted, value for value and
    weight for weight (few distinct values: many ties, whose order decides the weights')."""
    ds = [np.asarray([t for t, _ in s], dtype=np.float64) * 1e-4 for s, _ in parts]
    ws = [np.asarray([k for _, k in s], dtype=np.int64) for s, _ in parts]
    gs = [np.asarray(g, dtype=np.float64) * 1e-4 for _, g in parts]
    v, w = pooled.pooled_sample(np.concatenate(ds), np.concatenate(ws), np.concatenate(gs))
    pooled.sort_weighted(v, w)
    runs = [pooled.sorted_runs(d, k, g) for d, k, g in zip(ds, ws, gs, strict=True)]
    mv, mw = pooled.merged_runs(runs)
    pooled.sort_weighted(mv, mw)
    assert mv.tolist() == v.tolist() and mw.tolist() == w.tolist()
    expected = whole_array_itl(np.concatenate(ds), np.concatenate(ws), np.concatenate(gs))
    got = LatencyStats.of_positive_weights(*pooled.merged_runs(runs))
    assert got.model_dump() == expected.model_dump()
