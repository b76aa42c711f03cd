"""A non-default database URL keeps the history across restarts, and tuning jobs run on Ray when
the server is configured so (``--tune-executor ray``): the same study as on the local executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from web_helpers import SMALL_SPACE, run_job, settings_for

from servesim.web.app import create_app

TUNE = {"n_trials": 2, "verify_seeds": 1, "space": SMALL_SPACE, "slo": {"ttft_p99_ms": 5000}, "seed": 4}


def test_an_explicit_sqlite_url_keeps_history_and_studies(tmp_path: Path) -> None:
    elsewhere = tmp_path / "shared" / "history.db"
    elsewhere.parent.mkdir()
    url = f"sqlite:///{elsewhere}"
    with TestClient(create_app(settings_for(tmp_path / "data", db_url=url))) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 120}).json()["id"]
        sim = run_job(c, "/api/simulate", {"trace_id": tid})
        first = run_job(c, "/api/tune", {"trace_id": tid, **TUNE})["result"]["study"]
    assert elsewhere.exists() and not (tmp_path / "data" / "workbench.db").exists()  # the URL was used
    with TestClient(create_app(settings_for(tmp_path / "data", db_url=url))) as c:
        assert [t["id"] for t in c.get("/api/traces").json()] == [tid]
        assert c.get(f"/api/runs/{sim['job']['id']}").json()["result"]["summary"] == sim["result"]["summary"]
        again = run_job(c, "/api/tune", {"trace_id": tid, **TUNE})["result"]["study"]
        assert again["study_name"] == first["study_name"] and again["n_trials"] == 4  # resumed in that file
    # another data folder on the same database sees the same history (the URL is the store)
    with TestClient(create_app(settings_for(tmp_path / "other", db_url=url))) as c:
        assert {r["kind"] for r in c.get("/api/runs").json()} == {"simulate", "tune"}


def _tune(folder: Path, executor: str) -> dict[str, Any]:
    with TestClient(create_app(settings_for(folder, tune_executor=executor))) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 120, "seed": 3}).json()["id"]
        # a Ray started inside the job's worker: 13 s quiet, 112 s beside two busy loops, once over
        # 120 s; the bound is generous (the job's own limit is the server's 1,800 s)
        out: dict[str, Any] = run_job(c, "/api/tune", {"trace_id": tid, **TUNE}, timeout_s=900.0)["result"]
        return out


@pytest.mark.slow
@pytest.mark.ray
def test_tuning_jobs_run_on_ray_when_configured(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    local = _tune(tmp_path / "local", "local")
    remote = _tune(tmp_path / "ray", "ray")
    assert local["executor"] == "local" and remote["executor"] == "ray"
    assert [(t["number"], t["params"], t["values"]) for t in remote["trials"]] == [
        (t["number"], t["params"], t["values"]) for t in local["trials"]
    ]
    assert remote["recommendation"]["vllm_serve_command"] == local["recommendation"]["vllm_serve_command"]


def test_a_ray_address_reaches_the_tuning_jobs_executor_and_needs_the_ray_executor(tmp_path: Path) -> None:
    """``servesim serve --tune-executor ray --tune-ray-address HOST:PORT``: a tuning job's trials
    join that cluster (its request's execution carries the address); an address without the Ray
    executor is refused at start."""
    from servesim.web.schemas import TuneBody
    from servesim.web.work.capacity import tune_request

    problem = settings_for(tmp_path, tune_ray_address="10.0.0.5:6379").startup_problem()
    assert problem is not None and "--tune-executor ray" in problem
    settings = settings_for(tmp_path, tune_executor="ray", tune_ray_address="10.0.0.5:6379")
    assert settings.startup_problem() is None
    with TestClient(create_app(settings)) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 50}).json()["id"]
        env = c.app.state.workbench.jobs._job_env("x")  # what a job's worker receives
    body = TuneBody.model_validate({"trace_id": tid, **TUNE})
    execution = tune_request(body, {**env, "data_dir": str(tmp_path)}).execution
    assert (execution.executor, execution.address) == ("ray", "10.0.0.5:6379")
