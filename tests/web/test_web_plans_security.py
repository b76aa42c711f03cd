"""Inline planners (recovery, rescheduling), the catalog, the page's assets, the token and headers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from web_helpers import SEED_RECOVERY, SEED_RESCHED, section, settings_for

from servesim.actionlog import read_log
from servesim.web.app import create_app
from servesim.web.settings import WebSettings

TOKEN = "0123456789abcdef-test-token"


def test_recovery_plan_has_the_decision_matrix(client: TestClient) -> None:
    r = client.post("/api/recover", json={"record": SEED_RECOVERY})
    assert r.status_code == 200, r.text
    body = r.json()
    matrix = section(body, "recovery")["tables"][0]
    jobs = [row[0] for row in matrix["rows"]]
    assert jobs == ["job-801", "job-802"]
    strategies = {d["strategy"] for d in body["plan"]["scheduled_migrations"]}
    assert strategies <= {"MIGRATE_STATE", "COLD_RESTART"}
    assert client.get(f"/api/runs/{body['id']}").json()["job"]["kind"] == "recover"
    report = client.get(f"/api/runs/{body['id']}/report.html")
    assert report.status_code == 200 and "job-801" in report.text


def test_rescheduling_queue_with_sla_verdicts(client: TestClient) -> None:
    r = client.post("/api/reschedule", json={"data": SEED_RESCHED, "policy": "fcfs"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plan"]["policy"] == "fcfs"
    assert set(body["plan"]["rescheduled_queue"]) == {"req-101", "req-102"}
    assert section(body, "resched")["tables"]


def test_planner_input_errors_are_422(client: TestClient, data_dir: Path) -> None:
    r = client.post("/api/reschedule", json={"data": {"interrupted_requests": "nope"}})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    r = client.post("/api/recover", json={"record": {"active_jobs": 3}})
    assert r.status_code == 422
    r = client.post("/api/reschedule", json={"data": SEED_RESCHED, "policy": "random"})
    assert r.status_code == 422
    assert any(a.action == "reschedule" and a.outcome == "error" for a in read_log(data_dir))


def test_catalog_offers_vllm_flags_with_defaults_and_help(client: TestClient) -> None:
    cat = client.get("/api/catalog").json()
    flags = {f["name"]: f for f in cat["engine_flags"]}
    assert flags["max_num_seqs"]["flag"] == "--max-num-seqs" and flags["max_num_seqs"]["default"] == 128
    assert flags["max_num_batched_tokens"]["help"]
    assert flags["starvation_threshold"]["vllm"] is False
    assert "num_gpu_blocks" not in flags  # sized from the model and GPU (or given with the deployment)
    assert "num_gpu_blocks" in {f["name"] for f in cat["deployment_fields"]}
    assert {"llama-3.1-8b", "qwen2.5-7b"} <= {m["name"] for m in cat["models"]}
    assert "h100" in {g["name"] for g in cat["gpus"]}
    assert cat["glossary"]["ttft_ms"]["definition"].startswith("Time to first token")


def test_page_and_assets_are_served_with_security_headers(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/app.js"' in page.text
    assert "<script>" not in page.text  # no inline script
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and b"plotly.js" in js.content[:200]
    for asset in ("/static/app.js", "/static/render.js", "/static/style.css"):
        assert client.get(asset).status_code == 200
    err = client.get("/api/traces/" + "0" * 32)
    assert err.headers["content-security-policy"] == csp  # on errors too


def test_openapi_schema_documents_the_api(client: TestClient) -> None:
    schema = client.get("/api/openapi.json").json()
    paths = set(schema["paths"])
    for p in (
        "/api/traces",
        "/api/traces/generate",
        "/api/simulate",
        "/api/saturate",
        "/api/tune",
        "/api/recover",
        "/api/reschedule",
        "/api/advise",
        "/api/compare",
        "/api/runs",
        "/api/runs/{run_id}/requests.csv",
        "/api/jobs/{job_id}/events",
    ):
        assert p in paths, p


def test_non_loopback_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    s = WebSettings(data_dir=tmp_path, host="0.0.0.0")
    assert "needs --token" in (s.startup_problem() or "")
    with pytest.raises(ValueError, match=r"refusing to listen on 0\.0\.0\.0"):
        create_app(s)
    short = WebSettings(data_dir=tmp_path, host="0.0.0.0", token=SecretStr("short"))
    assert "too short" in (short.startup_problem() or "")


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("locked")
    app = create_app(settings_for(folder, host="0.0.0.0", token=SecretStr(TOKEN)))
    with TestClient(app, base_url="http://testserver") as c:
        yield c, folder


def test_with_a_token_every_request_needs_it(locked) -> None:
    c, _ = locked
    for path in ("/", "/api/traces", "/static/app.js", "/vendor/plotly.min.js", "/api/openapi.json"):
        r = c.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in r.text
    assert c.get("/api/traces", headers={"Authorization": "Bearer wrong-token-wrong"}).status_code == 401
    assert c.get("/api/traces", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = c.post("/api/traces/generate", json={"num_requests": 5})
    assert r.status_code == 401


def test_the_page_takes_the_token_once_and_keeps_it_in_an_httponly_cookie(locked) -> None:
    c, folder = locked
    r = c.get(f"/?token={TOKEN}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    c.cookies.set("servesim_token", TOKEN)
    assert c.get("/").status_code == 200
    assert c.get("/api/catalog").status_code == 200
    c.cookies.clear()
    assert c.get("/?token=wrong", follow_redirects=False).status_code == 401
    logged = (folder / "actions.jsonl").read_text() if (folder / "actions.jsonl").exists() else ""
    assert TOKEN not in logged


def test_no_secret_in_any_answer(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-ant-test-secret-value-123"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    for path in ("/api/catalog", "/api/runs", "/api/traces", "/api/openapi.json", "/"):
        assert secret not in client.get(path).text
    assert os.environ["ANTHROPIC_API_KEY"] == secret
