"""A cluster run is one ``ClusterSpec`` wherever it is asked (issue 27): the web's run form with
replicas and failures and ``servesim cluster --recovery R`` build the same spec, resolve it with
``servesim.spec.resolve_cluster`` and write the same ``cluster`` document, its ``run`` the spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from web_helpers import GOOD_CSV, run_job

from servesim.cli.main import app
from servesim.spec import ClusterSpec

runner = CliRunner()


@pytest.fixture(scope="module")
def csv_trace(client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("cluster") / "t.csv"
    path.write_bytes(GOOD_CSV)
    r = client.post("/api/traces?name=t.csv", content=GOOD_CSV)
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), path


def _without_origin(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """Less what says where it was asked: the CLI names the file's path, the web the upload."""
    doc = json.loads(json.dumps(doc).replace(str(path), path.name))
    doc.pop("trace_provenance")
    return doc


@pytest.mark.parametrize(
    ("body", "flags"),
    [
        (
            {"replicas": 2, "failures": [{"node": "n0", "time_s": 2.0}], "recovery": "planner"},
            ["--replicas", "2", "--fail", "n0@2", "--recovery", "planner"],
        ),
        (
            {
                "replicas": 3,
                "router": "round_robin",
                "failures": [{"node": "n1", "time_s": 1.5, "recover_after_s": 3.0}],
                "recovery": "restart",
                "hardware": {"gpu": "l4"},
                "engine": {"max_num_seqs": 32},
                "slo": {"ttft_ms": 800, "e2e_ms": 9000},
            },
            [
                "--replicas",
                "3",
                "--router",
                "round_robin",
                "--fail",
                "n1@1.5+3",
                "--recovery",
                "restart",
                "--gpu",
                "l4",
                "-c",
                "{cfg}",
                "--slo",
                "ttft_p99_ms=800,e2e_p99_ms=9000",
            ],
        ),
    ],
)
def test_the_web_and_the_cli_write_the_same_cluster_document(
    client: TestClient, csv_trace: tuple[str, Path], tmp_path: Path, body: dict[str, Any], flags: list[str]
) -> None:
    trace_id, path = csv_trace
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("max_num_seqs: 32\n")
    run = run_job(client, "/api/simulate", {"trace_id": trace_id, **body})
    web = client.get(f"/api/runs/{run['job']['id']}/document.json")
    assert web.status_code == 200, web.text
    doc = web.json()
    res = runner.invoke(app, ["cluster", str(path), *(f.format(cfg=cfg) for f in flags), "--json"])
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)

    assert doc["kind"] == cli["kind"] == "cluster"
    assert _without_origin(doc, path) == _without_origin(cli, path)
    spec = ClusterSpec.model_validate(doc["run"])  # the run reads back as the spec it was
    assert spec.trace == "t.csv" and spec.recovery == body["recovery"]
    assert spec.deployment.replicas == body["replicas"]
    # the page's figures are the document's: one strategy's row, the run's cluster summary
    (row,) = doc["strategies"]
    assert row["strategy"] == body["recovery"]
    assert row["num_finished"] + row["num_unfinished"] == run["result"]["summary"]["num_requests"]
    assert row["ttft_p99_ms"] == pytest.approx(run["result"]["summary"]["ttft_ms"]["p99"])


def test_a_bad_cluster_run_names_the_field(client: TestClient, csv_trace: tuple[str, Path]) -> None:
    trace_id, _ = csv_trace
    body = {"trace_id": trace_id, "replicas": 2, "failures": [{"node": "n7", "time_s": 1.0}]}
    r = client.post("/api/simulate", json=body)
    # refused at submit (issue 47), no longer a job that fails
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert "failures[0].node: no replica 'n7'; the replicas are n0, n1" in r.json()["detail"]
