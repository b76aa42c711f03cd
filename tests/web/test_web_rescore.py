"""Post-hoc SLOs: a finished run re-scored at another SLO from its stored per-request records,
with the figures a fresh ``servesim simulate --slo`` of the same trace gives, and no engine run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from web_helpers import GOOD_CSV, run_job

from servesim.cli.main import app

runner = CliRunner()

#: 200 requests, every third with its own TTFT SLA, half of them sharing a system prompt.
SLA_CSV = b"req_id,arrival_time_s,prompt_len,output_len,sla_ttft_ms,prefix_group,prefix_len\n" + b"".join(
    (
        f"r{i},{i * 0.1:.2f},{300 + 37 * (i % 11)},{20 + 7 * (i % 5)},"
        f"{'400' if i % 3 == 0 else ''},{'sys' if i % 2 == 0 else ''},{'256' if i % 2 == 0 else ''}\n"
    ).encode()
    for i in range(200)
)
SLO_X = {"ttft_p99_ms": 350.0, "tpot_p99_ms": 190.0}
SLO_TEXT = "ttft_p99_ms=350,tpot_p99_ms=190"


@pytest.fixture(scope="module")
def sla_trace(client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("rescore") / "sla.csv"
    path.write_bytes(SLA_CSV)
    r = client.post("/api/traces?name=sla.csv", content=SLA_CSV)
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), path


@pytest.fixture(scope="module")
def unscored(client: TestClient, sla_trace: tuple[str, Path]) -> dict[str, Any]:
    """A run stored with no SLO."""
    return run_job(client, "/api/simulate", {"trace_id": sla_trace[0], "deployment": {"gpu": "l4"}})


def _cli(path: Path, *args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["simulate", str(path), "--gpu", "l4", *args, "--json"])
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation from here on fails the test."""
    import sys

    import servesim
    import servesim.engine

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("re-scoring ran the engine")

    engine_module = sys.modules["servesim.engine.simulate"]  # the package's ``simulate`` is the function
    # every run goes through servesim.services.run, which calls the engine's ``simulate``
    for mod in (servesim, servesim.engine, engine_module):
        monkeypatch.setattr(mod, "simulate", refuse)


def test_rescoring_a_run_at_an_slo_gives_a_fresh_simulate_s_figures(
    client: TestClient,
    sla_trace: tuple[str, Path],
    unscored: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = unscored["job"]["id"]
    fresh = _cli(sla_trace[1], "--slo", SLO_TEXT)["summary"]
    assert unscored["result"]["summary"]["slo"] is None
    jobs_before = len(client.get("/api/runs").json())
    _no_engine(monkeypatch)

    r = client.post(f"/api/runs/{run_id}/slo", json={"slo": SLO_X})
    assert r.status_code == 200, r.text
    out = r.json()
    # the whole summary is the fresh run's: good requests, goodput, each class's SLA violations
    assert out["summary"] == fresh
    assert 0 < out["summary"]["num_good"] < 200  # the SLO binds: the test can tell it applied
    assert out["summary"]["num_good"] != unscored["result"]["summary"]["num_good"]
    assert out["note"] == "recomputed from the stored per-request records, not re-simulated"
    tiles = {k["key"]: k for k in out["kpis"]["p99"]}
    assert tiles["goodput"]["value"] == fresh["goodput"]
    assert tiles["good_fraction"]["value"] == fresh["num_good"] / fresh["num_requests"]
    assert tiles["ttft_ms_p99"]["slo"] == 350.0 and tiles["tpot_ms_p99"]["slo"] == 190.0
    assert (tiles["ttft_ms_p99"]["verdict"], tiles["tpot_ms_p99"]["verdict"]) == ("fail", "pass")
    verdicts = {v["key"]: v for v in out["sections"][0]["verdicts"]}
    assert f"{fresh['num_good']:,} of 200 requests" in verdicts["slo"]["text"]

    # nothing ran and nothing was stored: the run keeps its own (no) SLO
    assert len(client.get("/api/runs").json()) == jobs_before
    assert client.get(f"/api/runs/{run_id}").json()["result"]["summary"] == unscored["result"]["summary"]


def test_rescoring_with_no_slo_gives_the_stored_figures_and_text_slos_read_as_the_cli(
    client: TestClient, sla_trace: tuple[str, Path], unscored: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = unscored["job"]["id"]
    _no_engine(monkeypatch)
    r = client.post(f"/api/runs/{run_id}/slo", json={"slo": None})
    assert r.status_code == 200, r.text
    assert r.json()["summary"] == unscored["result"]["summary"]  # the per-request SLAs alone
    as_text = client.post(f"/api/runs/{run_id}/slo", json={"slo": SLO_TEXT}).json()
    as_object = client.post(f"/api/runs/{run_id}/slo", json={"slo": SLO_X}).json()
    assert as_text["summary"] == as_object["summary"]


@pytest.mark.parametrize(
    ("slo", "cli_text"),
    [
        ({"ttft_p99_ms": "abc"}, "ttft_p99_ms=abc"),
        ({"ttft_ms": 500}, "ttft_ms=500"),
        ({"ttft_p99_ms": -5}, "ttft_p99_ms=-5"),
        ({"ttft_p99_ms": 500, "good": 0.9}, "ttft_p99_ms=500,good=0.9"),
        ("ttft_p99_ms", "ttft_p99_ms"),
    ],
)
def test_a_bad_slo_is_a_422_worded_as_the_cli_s(
    client: TestClient,
    sla_trace: tuple[str, Path],
    unscored: dict[str, Any],
    slo: Any,
    cli_text: str,
) -> None:
    r = client.post(f"/api/runs/{unscored['job']['id']}/slo", json={"slo": slo})
    assert r.status_code == 422, r.text
    cli = runner.invoke(app, ["simulate", str(sla_trace[1]), "--slo", cli_text])
    assert cli.exit_code == 2
    reason = r.json()["errors"][0]["reason"]
    assert r.json()["errors"][0]["field"] == "body.slo"
    assert reason.startswith("slo ") or "slo" in reason
    # the CLI's message, its input named --slo where the API names slo
    assert reason.replace("slo ", "--slo ", 1) in " ".join(cli.output.split())


def test_a_cluster_run_is_rescored_as_its_fleet(
    client: TestClient, sla_trace: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas, one lost at 5 s and back at 10 s: the fleet's figures at the SLO are those of
    the same cluster run simulated with it."""
    body = {
        "trace_id": sla_trace[0],
        "deployment": {"gpu": "l4", "replicas": 2},
        "failures": [{"node": "n1", "time_s": 5, "recover_after_s": 5}],
    }
    stored = run_job(client, "/api/simulate", body)
    fresh = run_job(client, "/api/simulate", {**body, "slo": SLO_X})["result"]["summary"]
    _no_engine(monkeypatch)
    r = client.post(f"/api/runs/{stored['job']['id']}/slo", json={"slo": SLO_X})
    assert r.status_code == 200, r.text
    assert r.json()["scope"] == "fleet" and r.json()["summary"] == fresh
    assert fresh["num_good"] < stored["result"]["summary"]["num_good"]


def test_what_cannot_be_rescored_says_why(
    client: TestClient, sla_trace: tuple[str, Path], unscored: dict[str, Any]
) -> None:
    r = client.post("/api/runs/" + "0" * 32 + "/slo", json={"slo": SLO_X})
    assert r.status_code == 404
    r = client.post(f"/api/runs/{unscored['job']['id']}/slo", json={"slo": SLO_X, "extra": 1})
    assert r.status_code == 422
    body = {"trace_id": sla_trace[0], "slo": {"ttft_p99_ms": 1000}, "seeds": 1, "rtol": 0.3}
    sweep = run_job(client, "/api/saturate", body)
    r = client.post(f"/api/runs/{sweep['job']['id']}/slo", json={"slo": SLO_X})
    assert r.status_code == 422 and "only a simulation run is re-scored" in r.json()["detail"]
    # a run whose trace was deleted (its own trace: the other tests keep theirs, in any order)
    other = client.post("/api/traces?name=other.csv", content=GOOD_CSV)
    assert other.status_code == 201, other.text
    run = run_job(client, "/api/simulate", {"trace_id": other.json()["id"]})
    assert client.delete(f"/api/traces/{other.json()['id']}").status_code in (200, 204)
    r = client.post(f"/api/runs/{run['job']['id']}/slo", json={"slo": SLO_X})
    assert r.status_code == 422 and "trace was deleted" in r.json()["detail"]
