"""One question, one answer (issue 45): the harness that asks the same question through every
interface — the CLI's ``--json``, the web API's stored document, the dashboard's ``--headless``
— so a test compares the documents they give.

Each helper returns the parsed document; ``without`` drops the keys a test names as volatile
(none by default: a difference is a finding, not noise).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.web.app import create_app
from servesim.web.settings import WebSettings

#: A small native trace: 120 requests at 20 req/s with mixed lengths (prompts share no prefix).
TRACE_CSV = "req_id,arrival_time_s,prompt_len,output_len\n" + "".join(
    f"r{i},{i * 0.05:.2f},{200 + 37 * (i % 11)},{20 + 7 * (i % 5)}\n" for i in range(120)
)


def write_trace(folder: Path, name: str = "trace.csv") -> Path:
    path = folder / name
    path.write_text(TRACE_CSV, encoding="utf-8")
    return path


def cli_json(argv: list[str], cwd: Path, monkeypatch: Any) -> dict[str, Any]:
    """``servesim ARGV`` run in ``cwd`` (so a trace named relatively is named as the web names an
    upload); its stdout parsed."""
    monkeypatch.chdir(cwd)
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@contextmanager
def web_client(data_dir: Path) -> Iterator[TestClient]:
    """The workbench on a private data folder (TestClient's ``Host: testserver`` allowed)."""
    settings = WebSettings(data_dir=data_dir, allowed_hosts=frozenset({"testserver"}))
    with TestClient(create_app(settings)) as client:
        yield client


def upload(client: TestClient, path: Path) -> str:
    """Upload a trace file under its own name; its id."""
    r = client.post(f"/api/traces?name={path.name}", content=path.read_bytes())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def web_document(
    client: TestClient, route: str, body: dict[str, Any], timeout_s: float = 300
) -> dict[str, Any]:
    """POST a job, wait for it (a hang guard, not a timing target) and return the run's document
    (``GET /api/runs/{id}/document.json``: what the CLI's ``--json`` writes)."""
    r = client.post(route, json=body)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    deadline = time.monotonic() + timeout_s
    while True:
        state = client.get(f"/api/jobs/{job}").json()
        if state["status"] in ("done", "failed", "cancelled"):
            break
        if time.monotonic() > deadline:  # a hang guard: the verdict is the job's status
            pytest.fail(f"job {job} still {state['status']}")
        time.sleep(0.05)
    assert state["status"] == "done", state
    doc = client.get(f"/api/runs/{job}/document.json")
    assert doc.status_code == 200, doc.text
    out: dict[str, Any] = doc.json()
    return out


def without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``doc`` without the top-level ``keys`` a test names (and says why)."""
    return {k: v for k, v in doc.items() if k not in keys}


__all__ = ["TRACE_CSV", "cli_json", "upload", "web_client", "web_document", "without", "write_trace"]
