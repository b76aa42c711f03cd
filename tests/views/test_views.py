"""The views carry exactly the run's figures: counts add up, SLO verdicts follow the SLO, charts
are bounded in size, and the same inputs give byte-identical JSON."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.views.shape import downsample, histogram
from servesim.views.simulation import simulation_view, summary_view


def _run(slo: servesim.SLO | None = None) -> servesim.SimulationResult:
    trace = servesim.open_trace("bursty", num_requests=400, seed=3)
    cfg = servesim.EngineConfig(max_num_seqs=32, num_gpu_blocks=1500)
    return servesim.simulate(trace, cfg, slo=slo)


def test_histograms_count_every_sample_and_carry_the_slo() -> None:
    result = _run(servesim.SLO(ttft_ms=400, tpot_ms=40))
    view = simulation_view(result, bins=25)
    ttft = view.histogram("ttft_ms")
    assert sum(ttft.counts) == result.requests["ttft_ms"].notna().sum() == ttft.count
    assert len(ttft.edges) == len(ttft.counts) + 1 == 26
    assert ttft.slo == 400 and ttft.p99 == result.summary.ttft_ms.p99
    itl = view.histogram("itl_ms")  # pooled gaps, as many as the summary counted
    assert itl.count == result.summary.itl_ms.count
    assert view.histogram("tpot_ms").slo == 40 and view.histogram("e2e_ms").slo is None


def test_kpi_verdicts_compare_the_percentile_with_its_slo() -> None:
    result = _run()
    p99 = result.summary.ttft_ms.p99
    tight = summary_view(result.summary.model_copy(update={"slo": servesim.SLO(ttft_ms=p99 / 2)}))
    loose = summary_view(result.summary.model_copy(update={"slo": servesim.SLO(ttft_ms=p99 * 2)}))
    assert tight.kpi("ttft_ms_p99").verdict == "fail" and loose.kpi("ttft_ms_p99").verdict == "pass"
    assert summary_view(result.summary).kpi("ttft_ms_p99").verdict == "none"
    p50 = summary_view(result.summary, percentile="p50").kpi("ttft_ms_p50").value
    assert p50 == result.summary.ttft_ms.p50


def test_series_are_down_sampled_and_reference_the_limits() -> None:
    result = _run()
    view = simulation_view(result, max_points=100)
    running = view.chart("num_running")
    assert len(running.x) <= 100 and running.reference == 32
    assert max(running.y) == result.steps["num_running"].max()  # spikes survive down-sampling
    assert view.chart("num_tokens").reference == result.config.max_num_batched_tokens


def test_same_inputs_give_byte_identical_views() -> None:
    a = simulation_view(_run(servesim.SLO(ttft_ms=400))).model_dump_json()
    b = simulation_view(_run(servesim.SLO(ttft_ms=400))).model_dump_json()
    assert a == b


def test_no_traffic_says_so() -> None:
    empty = servesim.Trace.from_records([])
    view = simulation_view(servesim.simulate(empty))
    assert "no requests" in " ".join(view.text)
    assert all(row[1] is None for row in view.table("latency").rows)  # no fake 0.0 ms
    assert view.histogram("ttft_ms").count == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=3000), st.integers(2, 400))
def test_downsample_keeps_the_extremes_within_the_budget(ys: list[float], budget: int) -> None:
    x = np.arange(len(ys), dtype=np.float64)
    xs, out = downsample(x, np.asarray(ys), budget)
    assert len(out) <= max(budget, 2) or len(ys) <= budget
    assert min(out) == float(f"{min(ys):.6g}") and max(out) == float(f"{max(ys):.6g}")
    assert xs == sorted(xs)


def test_weighted_histogram_counts_the_weights() -> None:
    h = histogram("x", "x", np.array([1.0, 2.0, 3.0, np.nan]), "ms", bins=3, weights=np.array([1, 0, 5, 9]))
    assert h.count == 6 and sum(h.counts) == 6


def test_percentages_read_like_every_other_number_in_text_renderers() -> None:
    from servesim.views.format import fmt, kpi_value
    from servesim.views.model import Column, Kpi

    change = Column(key="d", label="change", kind="pct")
    assert fmt(1080.835, change) == "+108,083.5%"  # a TTFT that rose a thousandfold: separated
    assert fmt(-0.155, change) == "-15.5%"
    assert kpi_value(Kpi(key="hit", label="prefix hits", value=12.5, unit="%")) == "1,250.0%"
