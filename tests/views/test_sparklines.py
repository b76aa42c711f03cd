"""KPI sparklines: each tile's figure over time, consistent with the run's own totals."""

from __future__ import annotations

import pytest

import servesim
from servesim.views.simulation import kpis
from servesim.views.sparklines import kpi_sparklines


@pytest.fixture(scope="module")
def result() -> servesim.SimulationResult:
    trace = servesim.open_trace("bursty", num_requests=300, seed=5)
    return servesim.simulate(trace, servesim.EngineConfig(max_num_seqs=16), slo=servesim.SLO(ttft_ms=300))


def test_every_tile_has_a_sparkline(result: servesim.SimulationResult) -> None:
    lines = kpi_sparklines(result)
    for p in ("p50", "p90", "p95", "p99"):
        assert {k.key for k in kpis(result.summary, p)} <= set(lines)
    assert all(len(s.x) == len(s.y) and 0 < len(s.x) <= 24 for s in lines.values())


def test_one_bin_is_the_whole_run(result: servesim.SimulationResult) -> None:
    one = kpi_sparklines(result, bins=1)
    s = result.summary
    assert one["ttft_ms_p99"].y == [pytest.approx(s.ttft_ms.p99, rel=1e-6)]
    assert one["e2e_ms_p50"].y == [pytest.approx(s.e2e_ms.p50, rel=1e-6)]
    assert one["good_fraction"].y == [pytest.approx(s.num_good / s.num_finished, rel=1e-3)]


def test_throughput_bins_add_up_to_the_finished_requests(result: servesim.SimulationResult) -> None:
    lines = kpi_sparklines(result, bins=20)
    st = result.steps
    width = float((st["start_s"] + st["duration_s"]).iloc[-1] - st["start_s"].iloc[0]) / 20
    assert sum(lines["request_throughput"].y) * width == pytest.approx(result.summary.num_finished, rel=1e-3)
    assert "goodput" not in kpi_sparklines(servesim.simulate(servesim.open_trace("bursty", num_requests=50)))
