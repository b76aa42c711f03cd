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


def test_tokens_per_step_is_a_distribution_against_the_budget() -> None:
    result = _run()
    view = simulation_view(result, bins=32)
    budget = result.config.max_num_batched_tokens
    h = view.histogram("num_tokens")  # not a line over time (it reads as a wall at the budget)
    assert "num_tokens" not in [s.key for s in view.series]
    toks = result.steps["num_tokens"].to_numpy()
    assert h.count == sum(h.counts) == len(toks) and h.count_label == "steps"
    assert h.edges[0] == 0 and h.edges[-1] == max(budget, toks.max()) and h.reference == budget
    assert h.reference_label == f"max_num_batched_tokens {budget:,}"
    # each step counted in its bin: the closed form of the counts from the step records
    width = h.edges[-1] / 32
    expected = np.bincount(np.minimum((toks // width).astype(int), 31), minlength=32)
    assert h.counts == expected.tolist()
    assert (
        h.p50 == float(np.percentile(toks, 50))
        and f"mean {toks.mean():,.0f} of a {budget:,} budget" in h.title
    )


def test_latency_split_is_labelled_by_phase_with_p50_and_p99() -> None:
    result = _run()
    split = simulation_view(result).chart("latency_split")
    assert split.categories == ["queue", "prefill", "decode"] and split.name == "p50"
    assert [ln.label for ln in split.lines] == ["p99", "mean"]
    req = result.requests[result.requests["finish_s"].notna()]
    queue = (req["first_scheduled_s"] - req["arrival_s"]).to_numpy() * 1e3
    decode = (req["finish_s"] - req["first_token_s"]).to_numpy() * 1e3
    assert split.y[0] == round(float(np.percentile(queue, 50)), 3)
    assert split.lines[0].y[2] == round(float(np.percentile(decode, 99)), 3)
    assert split.lines[1].y[0] == round(float(queue.mean()), 3)
    # the queue phase is the summary's queue time (same requests, same definition)
    assert abs(split.lines[0].y[0] - result.summary.queue_ms.p99) < 1e-3
    assert all(p50 <= p99 for p50, p99 in zip(split.y, split.lines[0].y, strict=True))
    assert f"({len(req):,} finished)" in split.title


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
    assert "latency_split" not in [s.key for s in view.series]  # nothing finished: no empty bars


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
