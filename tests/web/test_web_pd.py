"""A disaggregated run on the web (issue 32): the run form's prefill and decode pools become the
``ClusterSpec`` ``servesim cluster --prefill-replicas N --decode-replicas M`` builds, refused at
the door naming the field, stored like every run, and its document is the CLI's for the same
spec (the per-leg breakdown and the pools' table in its view)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from web_helpers import GOOD_CSV, run_job

from servesim.cli.main import app
from servesim.spec import ClusterSpec

runner = CliRunner()


@pytest.fixture(scope="module")
def csv_trace(client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("pd") / "t.csv"
    path.write_bytes(GOOD_CSV)
    r = client.post("/api/traces?name=t.csv", content=GOOD_CSV)
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), path


def _without_origin(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """Less what says where it was asked: the CLI names the file's path, the web the upload."""
    doc = json.loads(json.dumps(doc).replace(str(path), path.name))
    doc.pop("trace_provenance")
    return doc


CASES = [
    (
        {
            "deployment": {"step_time_ms": 10, "engine": {"num_gpu_blocks": 5000}},
            "disaggregated": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        },
        ["--step-time-ms", "10", "-c", "{blocks}", "--prefill-replicas", "1", "--decode-replicas", "1"],
    ),
    (
        {
            "deployment": {"gpu": "h100", "tp": 2, "engine": {"max_num_seqs": 32}},
            "disaggregated": {
                "prefill": {"replicas": 1},
                "decode": {"replicas": 2},
                "link": "tcp-100g",
                "short_prompt_tokens": 300,
            },
            "failures": [{"node": "decode:1", "time_s": 3.0, "recover_after_s": 2.0}],
            "slo": {"ttft_p99_ms": 300, "tpot_p99_ms": 30},
        },
        [
            "--gpu",
            "h100",
            "--tp",
            "2",
            "-c",
            "{cfg}",
            "--prefill-replicas",
            "1",
            "--decode-replicas",
            "2",
            "--link",
            "tcp-100g",
            "--short-prompt-tokens",
            "300",
            "--fail",
            "decode:1@3+2",
            "--slo",
            "ttft_p99_ms=300,tpot_p99_ms=30",
        ],
    ),
]


@pytest.mark.parametrize(("body", "flags"), CASES)
def test_the_web_and_the_cli_write_the_same_disaggregated_document(
    client: TestClient, csv_trace: tuple[str, Path], tmp_path: Path, body: dict[str, Any], flags: list[str]
) -> None:
    trace_id, path = csv_trace
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("max_num_seqs: 32\n")
    blocks = tmp_path / "blocks.yaml"
    blocks.write_text("num_gpu_blocks: 5000\n")
    run = run_job(client, "/api/simulate", {"trace_id": trace_id, **body})
    web = client.get(f"/api/runs/{run['job']['id']}/document.json")
    assert web.status_code == 200, web.text
    doc = web.json()
    res = runner.invoke(
        app, ["cluster", str(path), *(f.format(cfg=cfg, blocks=blocks) for f in flags), "--json"]
    )
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)

    assert doc["kind"] == cli["kind"] == "disaggregated"
    assert _without_origin(doc, path) == _without_origin(cli, path)
    spec = ClusterSpec.model_validate(doc["run"])  # the run reads back as the spec it was
    assert spec.trace == "t.csv" and spec.disaggregated is not None
    assert spec.disaggregated.decode.replicas == body["disaggregated"]["decode"]["replicas"]
    # the page shows the document's view: the per-leg breakdown and the pools' table
    result = run["result"]
    assert result["sections"] == doc["sections"]
    view, dist = result["sections"]
    assert view["key"] == "disaggregated" and dist["key"] == "disaggregated.distributions"
    assert [s["key"] for s in view["series"]] == ["leg_breakdown"]
    assert "pools" in {t["key"] for t in view["tables"]}
    assert result["disaggregated"]["num_requests"] == doc["summary"]["num_requests"] == 200
    n = body["disaggregated"]["prefill"]["replicas"], body["disaggregated"]["decode"]["replicas"]
    assert f"{n[0]}P{n[1]}D over {body['disaggregated'].get('link', 'rdma-400g')}" in run["job"]["title"]


def test_a_stored_disaggregated_run_downloads_its_legs_and_report(
    client: TestClient, csv_trace: tuple[str, Path]
) -> None:
    trace_id, _ = csv_trace
    body = {"trace_id": trace_id, **CASES[0][0], "slo": "ttft_p99_ms=60"}
    run = run_job(client, "/api/simulate", body)
    rid = run["job"]["id"]
    csv = client.get(f"/api/runs/{rid}/requests.csv")
    assert csv.status_code == 200
    rows = pd.read_csv(io.StringIO(csv.text))
    assert len(rows) == 200 and {"prefill_queue_s", "transfer_s", "decode_s", "good"} <= set(rows.columns)
    assert int(rows["good"].sum()) == run["result"]["disaggregated"]["num_good"]
    html = client.get(f"/api/runs/{rid}/report.html")
    assert html.status_code == 200 and 'data-section="disaggregated"' in html.text
    assert "the pools, per replica" in html.text
    # a summary of identical replicas is what re-scoring, cost and compare read: refused, with why
    for r in (
        client.post(f"/api/runs/{rid}/slo", json={"slo": {"ttft_p99_ms": 100}}),
        client.get(f"/api/runs/{rid}/cost?usd_per_gpu_hour=2"),
        client.get(f"/api/compare?a={rid}&b={rid}"),
    ):
        assert r.status_code == 422 and "is a disaggregated run (prefill and decode pools)" in r.text, r.text


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        (
            {"disaggregated": {"prefill": {"replicas": 17}}},
            "disaggregated.prefill.replicas",
            "less than or equal to 16",
        ),
        (
            {"disaggregated": {"prefill": {"replicas": 9}, "decode": {"replicas": 8}}},
            "disaggregated",
            "17 replicas in the two pools: this server simulates at most 16 per job",
        ),
        ({"disaggregated": {"link": "pigeon"}}, "disaggregated.link", "unknown link 'pigeon'; presets:"),
        ({"disaggregated": {"decode": {"gpu": "abacus"}}}, "body.disaggregated.decode.gpu", "abacus"),
        ({"disaggregated": {"decode": {"tp": 0}}}, "disaggregated.decode.tp", "greater than or equal to 1"),
        (
            {"disaggregated": {}, "failures": [{"node": "d3", "time_s": 1}]},
            "failures[0].node",
            "the decode pool has 1",
        ),
        (
            {"disaggregated": {}, "failures": [{"node": "n0", "time_s": 1}]},
            "failures[0].node",
            "unknown replica 'n0'",
        ),
        ({"disaggregated": {}, "deployment": {"replicas": 2}}, "deployment.replicas", "its pools'"),
        (
            {"disaggregated": {"short_prompt_tokens": -1}},
            "disaggregated.short_prompt_tokens",
            "greater than or equal",
        ),
    ],
)
def test_a_bad_disaggregated_body_is_refused_at_the_door_naming_the_field(
    client: TestClient, csv_trace: tuple[str, Path], extra: dict[str, Any], field: str, words: str
) -> None:
    trace_id, _ = csv_trace
    r = client.post("/api/simulate", json={"trace_id": trace_id, **extra})
    assert r.status_code == 422, r.text
    assert field in r.text and words in r.text, r.text
