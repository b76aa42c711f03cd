"""Measured vs simulated: upload a vllm bench serve result, validate it, overlay servesim's run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_sample import bench_result
from fastapi.testclient import TestClient
from web_helpers import run_job, section


def upload(client: TestClient, data: Any, name: str = "bench.json") -> Any:
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return client.post(f"/api/bench?name={name}", content=body, headers={"content-type": "application/json"})


def test_upload_then_overlay_gives_paired_histograms_and_errors(client: TestClient) -> None:
    data = bench_result(60)
    r = upload(client, data)
    assert r.status_code == 201, r.text
    bench = r.json()
    assert bench["summary"]["detailed"] and bench["summary"]["num_prompts"] == 60
    assert bench["summary"]["stats"]["ttft_ms"]["p99"] == pytest.approx(data["p99_ttft_ms"])
    assert bench["id"] in [b["id"] for b in client.get("/api/bench").json()]
    body = {"bench_id": bench["id"], "engine": {"max_num_seqs": 64}}
    out = run_job(client, f"/api/bench/{bench['id']}/simulate", body)
    view = section(out["result"], "overlay")
    keys = [h["key"] for h in view["histograms"]]
    assert keys == [
        f"{m}.{w}" for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") for w in ("measured", "simulated")
    ]
    by_key = {h["key"]: h for h in view["histograms"]}
    for m in ("ttft_ms", "e2e_ms"):
        a, b = by_key[f"{m}.measured"], by_key[f"{m}.simulated"]
        assert a["edges"] == b["edges"]  # drawn on the same bins
        assert a["count"] == 60 and b["count"] == 60  # every request, measured and simulated
    table = view["tables"][0]
    rows = {row[0]: row for row in table["rows"]}
    measured, simulated, err = rows["TTFT mean"][1:]
    assert measured == pytest.approx(data["mean_ttft_ms"])
    assert simulated > 0 and err == pytest.approx((simulated - measured) / measured)
    assert "request throughput (req/s)" in rows
    kpis = {k["key"]: k for k in view["kpis"]}
    assert set(kpis) >= {"ttft_ms_mean_error", "e2e_ms_mean_error"}
    assert (
        kpis["ttft_ms_mean_error"]["value"] == pytest.approx(err)
        and kpis["ttft_ms_mean_error"]["unit"] == "%"
    )
    assert view["verdicts"][0]["key"] == "overlay_error"
    assert out["result"]["config"]["max_num_seqs"] == 64  # the deployment the body asked for


def test_summary_only_file_overlays_percentiles(client: TestClient) -> None:
    bench = upload(client, bench_result(40, detailed=False), "summary.json").json()
    out = run_job(client, f"/api/bench/{bench['id']}/simulate", {"bench_id": bench["id"], "seed": 3})
    view = section(out["result"], "overlay")
    assert view["histograms"] == []
    series = {s["key"]: s for s in view["series"]}
    assert series["ttft_ms.measured"]["x"] == [50.0, 99.0] == series["ttft_ms.simulated"]["x"]
    assert any("--save-detailed" in t for t in view["text"])


def test_overlay_against_a_stored_simulation_run(client: TestClient, trace_id: str) -> None:
    bench = upload(client, bench_result(30), "against-run.json").json()
    sim = run_job(client, "/api/simulate", {"trace_id": trace_id})
    out = run_job(
        client, f"/api/bench/{bench['id']}/simulate", {"bench_id": bench["id"], "run_id": sim["job"]["id"]}
    )
    view = section(out["result"], "overlay")
    by_key = {h["key"]: h for h in view["histograms"]}
    assert by_key["ttft_ms.simulated"]["count"] == sim["result"]["summary"]["ttft_ms"]["count"]
    assert "itl_ms.simulated" not in by_key


@pytest.mark.parametrize(
    ("data", "status", "field"),
    [
        (b"{not json", 422, None),
        ([1, 2], 422, None),
        (
            {"num_prompts": 5, "mean_ttft_ms": "fast", "total_input_tokens": 5, "total_output_tokens": 5},
            422,
            None,
        ),
        ({"num_prompts": -1, "mean_ttft_ms": 5.0}, 422, "num_prompts"),
        ({**bench_result(5), "ttfts": [0.1]}, 422, None),
        ({"num_prompts": 5, "mean_ttft_ms": 5.0}, 422, "total_input_tokens"),
        ({"num_prompts": 5, "total_input_tokens": 50, "total_output_tokens": 50}, 422, "mean_ttft_ms"),
        ({**bench_result(5), "request_rate": "soon"}, 422, "request_rate"),
    ],
)
def test_bad_bench_files_are_422_with_the_field(
    client: TestClient, data: Any, status: int, field: str | None
) -> None:
    r = upload(client, data)
    assert r.status_code == status, r.text
    body = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert body["detail"].startswith("bench.json")
    assert body["errors"]
    if field is not None:
        assert field in [e["field"] for e in body["errors"]], body


def test_bench_upload_refuses_other_files_and_unknown_ids(client: TestClient) -> None:
    assert upload(client, bench_result(5), "bench.csv").status_code == 415
    huge = {"num_prompts": 10**12, "total_input_tokens": 5, "total_output_tokens": 5, "mean_ttft_ms": 1.0}
    assert upload(client, huge).status_code == 413  # bounded before anything is allocated
    assert client.post(f"/api/bench/{'0' * 32}/simulate", json={"bench_id": "0" * 32}).status_code == 404
    bench = upload(client, bench_result(5)).json()
    other = {"bench_id": "1" * 32}
    assert client.post(f"/api/bench/{bench['id']}/simulate", json=other).status_code == 422
    r = client.post(f"/api/bench/{bench['id']}/simulate", json={"bench_id": bench["id"], "run_id": "2" * 32})
    assert r.status_code == 404
    assert client.delete(f"/api/bench/{bench['id']}").status_code == 204
    assert client.get(f"/api/bench/{bench['id']}").status_code == 404


SIM2REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sim2real"


def test_a_sim2real_experiment_is_rerun_as_servesim_sim2real_does(client: TestClient) -> None:
    from servesim.perf.sim2real import default_experiment_profile, load_experiments, run_experiment

    raw = (SIM2REAL / "62.json").read_bytes()
    bench = upload(client, raw, "62.json").json()
    assert bench["summary"]["format"] == "sim2real" and bench["summary"]["experiment"] == "62"
    out = run_job(client, f"/api/bench/{bench['id']}/simulate", {"bench_id": bench["id"]})
    rows = {r[0]: r for r in section(out["result"], "overlay")["tables"][0]["rows"]}
    (exp,) = load_experiments(SIM2REAL / "62.json")
    pred, _, _ = run_experiment(exp, default_experiment_profile([exp]))
    for ours, theirs in (("E2E mean", "e2e_mean"), ("E2E p99", "e2e_p99"), ("TTFT p90", "ttft_p90")):
        measured, simulated, err = rows[ours][1:]
        assert measured == exp.actual["-1"][theirs]  # the file's measurement
        assert simulated == pytest.approx(pred["-1"][theirs], rel=1e-9)  # servesim sim2real's prediction
        assert err == pytest.approx((simulated - measured) / measured)
    itl = next(r for k, r in rows.items() if k.startswith("ITL mean"))
    assert itl[1] == exp.actual["-1"]["itl_mean"] and itl[2] == pytest.approx(pred["-1"]["itl_mean"])


def test_a_broken_sim2real_experiment_names_the_field(client: TestClient) -> None:
    data = json.loads((SIM2REAL / "62.json").read_text())
    data["tp"] = 0
    r = upload(client, data, "62-broken.json")
    assert r.status_code == 422 and "tp" in [e["field"] for e in r.json()["errors"]]
