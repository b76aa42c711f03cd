"""A restart keeps the history: traces, runs and the Optuna study live in the database."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from web_helpers import SMALL_SPACE, run_job, settings_for, wait_job

from servesim.web.app import create_app
from servesim.web.db import Database, JobRow, now_iso


def test_a_restart_keeps_traces_runs_and_studies(tmp_path: Path) -> None:
    tune = {"n_trials": 2, "verify_seeds": 1, "space": SMALL_SPACE, "slo": {"ttft_p99_ms": 5000}}
    with TestClient(create_app(settings_for(tmp_path))) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 150}).json()["id"]
        sim = run_job(c, "/api/simulate", {"trace_id": tid})
        first = run_job(c, "/api/tune", {"trace_id": tid, **tune})["result"]["study"]
    with TestClient(create_app(settings_for(tmp_path))) as c:
        assert [t["id"] for t in c.get("/api/traces").json()] == [tid]
        again = c.get(f"/api/runs/{sim['job']['id']}").json()
        assert again["result"]["summary"] == sim["result"]["summary"]
        assert {r["kind"] for r in c.get("/api/runs").json()} == {"simulate", "tune"}
        resumed = run_job(c, "/api/tune", {"trace_id": tid, **tune})["result"]["study"]
        assert resumed["study_name"] == first["study_name"] and resumed["n_trials"] == 4
        assert c.get(f"/api/runs/{sim['job']['id']}/requests.csv").status_code == 200


def test_jobs_a_stopped_server_left_running_are_marked_failed(tmp_path: Path) -> None:
    db = Database(settings_for(tmp_path).database_url)
    with db.session() as s:
        s.add(
            JobRow(
                id="a" * 32,
                kind="simulate",
                title="t",
                created_at=now_iso(),
                status="running",
                trace_id=None,
                params={},
                progress_done=3,
                progress_total=10,
            )
        )
    db.dispose()
    with TestClient(create_app(settings_for(tmp_path))) as c:
        st = wait_job(c, "a" * 32, timeout_s=5)
        assert st["status"] == "failed" and "server stopped" in st["error"]
