"""The cost view: closed forms of $/1M tokens and requests per $ from a user-entered GPU price."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from conftest import run_job
from servesim.engine import SLO, EngineConfig, LinearStepTime, SimulationSummary, simulate
from servesim.traces import generate_trace, preset_spec
from servesim.views.cost import cost_view


def _summary() -> SimulationSummary:
    trace = generate_trace(preset_spec("default").model_copy(update={"num_requests": 100}))
    return simulate(trace, EngineConfig(), LinearStepTime(), slo=SLO(ttft_ms=1000)).summary


def test_cost_figures_follow_the_closed_forms() -> None:
    s = _summary()
    v = cost_view(s, gpus=4, usd_per_gpu_hour=2.5)
    usd_per_s = 4 * 2.5 / 3600
    assert v.kpi("usd_per_hour").value == pytest.approx(10.0)
    assert v.kpi("usd_per_m_output_tokens").value == pytest.approx(
        usd_per_s / s.output_token_throughput * 1e6
    )
    assert v.kpi("requests_per_usd").value == pytest.approx(s.request_throughput / usd_per_s)
    assert v.kpi("goodput_per_usd").value == pytest.approx(s.goodput / usd_per_s)
    doubled = cost_view(s, gpus=8, usd_per_gpu_hour=2.5)
    assert doubled.kpi("usd_per_m_total_tokens").value == pytest.approx(
        2 * v.kpi("usd_per_m_total_tokens").value
    )
    with pytest.raises(ValueError):
        cost_view(s, gpus=1, usd_per_gpu_hour=0)


def test_cost_endpoint(client: TestClient, trace_id: str) -> None:
    run = run_job(client, "/api/simulate", {"trace_id": trace_id, "replicas": 2})
    rid = run["job"]["id"]
    r = client.get(f"/api/runs/{rid}/cost?usd_per_gpu_hour=3")
    assert r.status_code == 200, r.text
    kpis = {k["key"]: k["value"] for k in r.json()["sections"][0]["kpis"]}
    assert kpis["usd_per_hour"] == pytest.approx(6.0)  # 2 replicas x TP 1 at 3 $/h
    assert client.get(f"/api/runs/{rid}/cost").status_code == 422  # the price is the user's, never a default
    assert client.get(f"/api/runs/{rid}/cost?usd_per_gpu_hour=-1").status_code == 422
