"""The web resolves a run as the CLI does (issue 27): same defaults, same ``setup``, same document.

A user who runs ``servesim simulate trace.csv --gpu l4 --json`` and the same trace in the
workbench with the same (or no) settings must get the same answer and the same saved document;
a setting they give is kept, the rest are what ``vllm serve`` runs on that GPU, and both say which.
"""

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


@pytest.fixture(scope="module")
def csv_trace(client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The same trace file in the workbench (its id) and on disk (for the CLI)."""
    path = tmp_path_factory.mktemp("spec") / "t.csv"
    path.write_bytes(GOOD_CSV)
    r = client.post("/api/traces?name=t.csv", content=GOOD_CSV)
    assert r.status_code == 201, r.text
    return str(r.json()["id"]), path


def _cli(path: Path, *args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["simulate", str(path), *args, "--json"])
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _without_origin(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """A document less what says where it was asked: the CLI names the file's path where the web
    names the upload, and read a CSV file where the server stores Parquet."""
    doc = json.loads(json.dumps(doc).replace(str(path), path.name))
    doc.pop("trace_provenance")
    doc.pop("requests", None)  # the web serves the per-request records as requests.csv
    return doc


@pytest.mark.parametrize(
    ("gpu", "engine", "cli_flags", "applied"),
    [
        ("h100", {}, [], {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}),
        ("l4", {}, [], {"max_num_seqs": 256, "max_num_batched_tokens": 2048}),
        ("h100", {"max_num_seqs": 64}, ["--max-num-seqs", "64"], {"max_num_batched_tokens": 8192}),
    ],
)
def test_the_web_and_the_cli_write_the_same_document(
    client: TestClient,
    csv_trace: tuple[str, Path],
    gpu: str,
    engine: dict[str, Any],
    cli_flags: list[str],
    applied: dict[str, int],
) -> None:
    trace_id, path = csv_trace
    body = {"trace_id": trace_id, "deployment": {"gpu": gpu, "engine": engine}}
    run = run_job(client, "/api/simulate", body)
    cli = _cli(path, "--gpu", gpu, *cli_flags)

    assert cli["setup"]["defaults_applied"] == applied
    web = client.get(f"/api/runs/{run['job']['id']}/document.json")
    assert web.status_code == 200
    doc = web.json()
    assert doc["kind"] == "simulate" and doc["schema_version"] == cli["schema_version"]
    assert doc["setup"]["defaults_applied"] == applied
    assert _without_origin(doc, path) == _without_origin(cli, path)
    assert doc["trace_provenance"]["source"] == "t.csv"  # the name it was uploaded as

    # what the run page shows above the result: the CLI's first lines, word for word
    notes = run["result"]["notes"]
    assert notes[0] == cli["setup"]["timed_as"]
    values = ", ".join(f"{k} {v:,}" for k, v in applied.items())
    assert notes[1] == f"defaults: {values} (what vllm serve runs on {gpu})"
    # the run keeps what was asked: the form is restored to the user's settings, not the defaults
    assert run["job"]["params"]["deployment"] == {"gpu": gpu, "engine": engine}


def test_the_web_reports_a_run_from_its_document(client: TestClient, csv_trace: tuple[str, Path]) -> None:
    """The workbench's report reads the same typed document as ``servesim report``."""
    run = run_job(client, "/api/simulate", {"trace_id": csv_trace[0], "deployment": {"gpu": "l4"}})
    r = client.get(f"/api/runs/{run['job']['id']}/report.html")
    assert r.status_code == 200
    assert "max_num_seqs 256" in r.text or "256" in r.text


def test_the_door_applies_vllms_clamps_and_refuses_what_vllm_refuses(
    client: TestClient, csv_trace: tuple[str, Path]
) -> None:
    """A budget below the GPU's default max_num_seqs (1,024 on an H100) lowers the defaulted
    max_num_seqs to it, as vLLM does; given both ways round it is refused before the job is
    queued, the field named, as the CLI names the flag."""
    r = client.post(
        "/api/simulate",
        json={
            "trace_id": csv_trace[0],
            "deployment": {"gpu": "h100", "engine": {"max_num_batched_tokens": 512}},
        },
    )
    assert r.status_code == 202 and "max_num_seqs 512" in r.json()["title"]
    r = client.post(
        "/api/simulate",
        json={
            "trace_id": csv_trace[0],
            "engine": {"max_num_seqs": 2048, "max_num_batched_tokens": 512},
            "hardware": {"gpu": "h100"},
        },
    )
    assert r.status_code == 422, r.text
    assert any(e["field"].startswith("body.deployment.engine") for e in r.json()["errors"])
