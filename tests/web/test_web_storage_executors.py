"""A non-default database URL keeps the history across restarts, and tuning jobs run on Ray when
the server is configured so (``--tune-executor ray``, on the cluster ``--tune-ray-address`` names):
the same study as on the local executor; an address without the Ray executor is refused."""

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


def _tune(folder: Path, executor: str, **settings: Any) -> dict[str, Any]:
    with TestClient(create_app(settings_for(folder, tune_executor=executor, **settings))) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 120, "seed": 3}).json()["id"]
        out: dict[str, Any] = run_job(c, "/api/tune", {"trace_id": tid, **TUNE})["result"]
        return out


@pytest.mark.slow
@pytest.mark.ray
def test_tuning_jobs_run_on_ray_when_configured(tmp_path: Path, local_ray: None) -> None:
    """On the Ray cluster ``--tune-ray-address`` names (here the suite's shared instance: the job's
    worker process joins it as ``servesim serve --tune-executor ray --tune-ray-address`` would)."""
    import ray

    address = ray.get_runtime_context().gcs_address
    local = _tune(tmp_path / "local", "local")
    remote = _tune(tmp_path / "ray", "ray", tune_ray_address=address)
    assert local["executor"] == "local" and remote["executor"] == "ray"
    assert [(t["number"], t["params"], t["values"]) for t in remote["trials"]] == [
        (t["number"], t["params"], t["values"]) for t in local["trials"]
    ]
    assert remote["recommendation"]["vllm_serve_command"] == local["recommendation"]["vllm_serve_command"]


def test_a_ray_address_without_the_ray_executor_is_refused(tmp_path: Path) -> None:
    problem = settings_for(tmp_path, tune_ray_address="10.0.0.5:6379").startup_problem()
    assert problem is not None and "--tune-executor ray" in problem
