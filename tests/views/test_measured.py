"""views.measured: statistics as vllm bench computes them, errors against the measurement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.views.measured import overlay_view, stat_of


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.1, 1e4), min_size=1, max_size=40),
    st.lists(st.integers(0, 5), min_size=40, max_size=40),
    st.sampled_from(["mean", "median", "std", "p50", "p90", "p99", "p99.9"]),
)
def test_a_weighted_sample_is_the_sample_repeated(values: list[float], weights: list[int], stat: str) -> None:
    w = np.asarray(weights[: len(values)])
    expanded = np.repeat(np.asarray(values), w)
    got = stat_of((np.asarray(values), w), stat)
    if expanded.size == 0:
        assert got is None
        return
    want = {
        "mean": expanded.mean(),
        "median": np.median(expanded),
        "std": expanded.std(),
    }.get(stat)
    if want is None:
        want = np.percentile(expanded, float(stat[1:]))
    assert got == pytest.approx(float(want), rel=1e-9, abs=1e-9)


def test_the_same_sample_on_both_sides_has_no_error() -> None:
    rng = np.random.default_rng(0)
    ttft = rng.gamma(2.0, 20.0, size=200)
    stats = {"ttft_ms": {s: float(stat_of((ttft, None), s) or 0) for s in ("mean", "median", "p99")}}
    view = overlay_view(stats, {"ttft_ms": ttft}, {"ttft_ms": (ttft, None)})
    table = view.table("measured_vs_simulated")
    assert [r[0] for r in table.rows] == ["TTFT mean", "TTFT median", "TTFT p99"]
    assert all(r[3] == pytest.approx(0.0, abs=1e-12) for r in table.rows)
    assert view.verdicts[0].status == "pass"
    m, s = view.histogram("ttft_ms.measured"), view.histogram("ttft_ms.simulated")
    assert m.edges == s.edges and m.counts == s.counts and m.count == 200


def test_a_simulation_twice_as_slow_is_plus_100_percent() -> None:
    ttft = np.linspace(10, 50, 101)
    stats = {"ttft_ms": {"mean": 30.0, "p99": float(np.percentile(ttft, 99))}}
    view = overlay_view(
        stats,
        {},
        {"ttft_ms": (ttft * 2, None)},
        measured_throughput={"request_throughput": 4.0},
        simulated_throughput={"request_throughput": 3.0},
    )
    rows = {r[0]: r for r in view.table("measured_vs_simulated").rows}
    assert rows["TTFT mean"][3] == pytest.approx(1.0) and rows["TTFT p99"][3] == pytest.approx(1.0)
    assert rows["request throughput (req/s)"][3] == pytest.approx(-0.25)
    assert view.kpi("ttft_ms_mean_error").value == pytest.approx(1.0)
    assert view.verdicts[0].status == "fail"
    # no per-request lists: the reported percentiles are drawn against the simulated ones
    assert view.histograms == []
    meas, sim = view.chart("ttft_ms.measured"), view.chart("ttft_ms.simulated")
    assert meas.x == sim.x == [99.0] and sim.y[0] == pytest.approx(2 * meas.y[0])
