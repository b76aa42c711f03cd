"""The cost view: closed forms of $/1M tokens and requests per $ from a user-entered GPU price."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from web_helpers import run_job

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


def test_a_cpu_tier_adds_its_host_memory_to_the_cost() -> None:
    """Issue 31.4: the CPU KV tier's host memory is priced beside the GPUs at servesim's stated
    assumption (perf.offload.HOST_MEMORY_USD_PER_GIB_HOUR), as the tuner's plan prices it; 0 GiB
    is the GPU-only cost, unchanged."""
    from servesim.perf.offload import HOST_MEMORY_USD_PER_GIB_HOUR

    s = _summary()
    plain = cost_view(s, gpus=2, usd_per_gpu_hour=2.5)
    tier = cost_view(s, gpus=2, usd_per_gpu_hour=2.5, host_memory_gib=64)
    assert plain == cost_view(s, gpus=2, usd_per_gpu_hour=2.5, host_memory_gib=0)
    usd_h = 2 * 2.5 + 64 * HOST_MEMORY_USD_PER_GIB_HOUR
    assert tier.kpi("usd_per_hour").value == pytest.approx(usd_h)
    assert tier.kpi("usd_per_m_output_tokens").value == pytest.approx(
        usd_h / 3600 / s.output_token_throughput * 1e6
    )
    assert "64 GiB of host memory" in tier.text[0] and "GiB" not in plain.text[0]


def test_the_cost_endpoint_prices_each_replicas_cpu_tier(client: TestClient, trace_id: str) -> None:
    from servesim.perf.offload import HOST_MEMORY_USD_PER_GIB_HOUR

    body = {"trace_id": trace_id, "replicas": 2, "engine": {"kv_offloading_size": 4}}
    rid = run_job(client, "/api/simulate", body)["job"]["id"]
    r = client.get(f"/api/runs/{rid}/cost?usd_per_gpu_hour=3")
    assert r.status_code == 200, r.text
    kpis = {k["key"]: k["value"] for k in r.json()["sections"][0]["kpis"]}
    assert kpis["usd_per_hour"] == pytest.approx(6.0 + 2 * 4 * HOST_MEMORY_USD_PER_GIB_HOUR)
