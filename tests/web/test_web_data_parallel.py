"""The workbench runs a data-parallel deployment as ``servesim simulate --data-parallel-size``
does: the spec's ``data_parallel_size`` / ``enable_expert_parallel`` in the body, the same
document as the CLI's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner
from web_helpers import GOOD_CSV, run_job

from servesim.cli.main import app

runner = CliRunner()


def test_the_web_and_the_cli_write_the_same_dp_document(client: TestClient, tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(GOOD_CSV)
    r = client.post("/api/traces?name=t.csv", content=GOOD_CSV)
    assert r.status_code == 201, r.text
    dep = {"model": "qwen3-30b-a3b", "gpu": "h100", "data_parallel_size": 2, "enable_expert_parallel": True}
    run = run_job(client, "/api/simulate", {"trace_id": str(r.json()["id"]), "deployment": dep})
    flags = [
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "h100",
        "--data-parallel-size",
        "2",
        "--enable-expert-parallel",
    ]
    cli = runner.invoke(app, ["simulate", str(path), *flags, "--json"])
    assert cli.exit_code == 0, cli.output
    want: dict[str, Any] = json.loads(cli.stdout)
    doc = client.get(f"/api/runs/{run['job']['id']}/document.json").json()
    assert doc["setup"] == json.loads(json.dumps(want["setup"]).replace(str(path), path.name))
    assert doc["step_time_model"] == want["step_time_model"]
    assert doc["summary"] == want["summary"]
    assert run["result"]["notes"][0] == want["setup"]["timed_as"]
    assert "experts EP 2" in want["setup"]["timed_as"]
