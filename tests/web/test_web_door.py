"""Issue 30: the local server refuses browser attacks (DNS rebinding, cross-site requests), logs
URLs safely, compresses, and checks input at the door (uploads, tune spaces, the advisor)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from web_helpers import GOOD_CSV, SMALL_SPACE, settings_for

from servesim.web.app import create_app
from servesim.web.settings import WebSettings


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory):
    """The default server: loopback, no token, no extra host names."""
    app = create_app(WebSettings(data_dir=tmp_path_factory.mktemp("loop")))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        yield c


def test_a_foreign_host_header_is_refused_without_a_token(loopback: TestClient) -> None:
    assert loopback.get("/api/catalog").status_code == 200
    for host in ("localhost:8000", "[::1]:8000", "127.0.0.1"):
        assert loopback.get("/api/catalog", headers={"host": host}).status_code == 200, host
    r = loopback.get("/api/catalog", headers={"host": "attacker.example:8000"})
    assert r.status_code == 421
    assert "attacker.example" in r.json()["detail"] and "--allowed-host" in r.json()["detail"]


def test_allowed_host_extends_the_list(tmp_path: Path) -> None:
    app = create_app(WebSettings(data_dir=tmp_path, allowed_hosts=frozenset({"box.lan"})))
    with TestClient(app, base_url="http://box.lan:8000") as c:
        assert c.get("/api/catalog").status_code == 200
        assert c.get("/api/catalog", headers={"host": "evil.lan"}).status_code == 421


def test_cross_site_requests_change_nothing(loopback: TestClient) -> None:
    before = len(loopback.get("/api/traces").json())
    r = loopback.post(
        "/api/traces?name=t.csv",
        content=GOOD_CSV,
        headers={"origin": "http://attacker.example", "content-type": "text/plain"},
    )
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    r = loopback.post(
        "/api/traces/generate", json={"num_requests": 5}, headers={"sec-fetch-site": "cross-site"}
    )
    assert r.status_code == 403
    assert len(loopback.get("/api/traces").json()) == before  # nothing was stored
    ok = loopback.post(
        "/api/traces/generate",
        json={"num_requests": 5},
        headers={"origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"},
    )
    assert ok.status_code == 201  # the page itself (same origin) still works


def test_control_characters_in_a_url_cannot_forge_a_log_line(
    loopback: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="servesim.web.access"):
        loopback.get("/nothing%0a127.0.0.1%20GET%20/admin%20200")
    lines = [r.getMessage() for r in caplog.records if r.name == "servesim.web.access"]
    assert lines and all("\n" not in m for m in lines)
    assert any("/nothing\\n127.0.0.1" in m for m in lines)


def test_the_plotly_bundle_and_json_are_gzipped(loopback: TestClient) -> None:
    r = loopback.get("/vendor/plotly.min.js", headers={"accept-encoding": "gzip"})
    assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip"
    r = loopback.get("/api/catalog", headers={"accept-encoding": "gzip"})
    assert r.headers.get("content-encoding") == "gzip"


def test_token_mode_shows_a_person_an_html_page(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path, host="0.0.0.0", token=SecretStr("0123456789abcdef0123")))
    with TestClient(app) as c:
        r = c.get("/", headers={"accept": "text/html"})
        assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
        assert "needs its token" in r.text and "0123456789abcdef0123" not in r.text
        assert c.get("/api/traces").headers["content-type"] == "application/problem+json"


def test_a_prompt_over_the_token_bound_is_refused_at_upload(client: TestClient) -> None:
    body = b"req_id,arrival_time_s,prompt_len,output_len\nr0,0,100,10\nr1,0.1,100000000000,10\n"
    r = client.post("/api/traces?name=big.csv", content=body)
    assert r.status_code == 422
    problem = r.json()
    assert "16,777,216" in problem["detail"] and "row 2" in problem["detail"]
    assert problem["errors"][0]["field"] == "prompt_len"


def test_a_file_over_the_row_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path, max_requests_per_trace=50))) as c:
        gz = gzip.compress(GOOD_CSV)  # 200 rows, gzipped: counted while decompressing
        r = c.post("/api/traces?name=t.csv.gz", content=gz)
        assert r.status_code == 413 and "before parsing" in r.json()["detail"]


def test_an_invalid_tune_space_is_refused_at_submit_naming_each_knob(
    client: TestClient, trace_id: str
) -> None:
    space = {**SMALL_SPACE, "max_num_seqs": {"low": 64, "high": 8}, "no_such_knob": [1]}
    r = client.post("/api/tune", json={"trace_id": trace_id, "n_trials": 2, "space": space})
    assert r.status_code == 422
    fields = {e["field"] for e in r.json()["errors"]}
    assert {"body.space.max_num_seqs", "body.space.no_such_knob"} <= fields


@pytest.mark.parametrize("advisor", ["claude", "dspy"])
def test_claude_without_a_key_is_refused_at_submit(
    client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch, advisor: str
) -> None:
    """Claude's agent and the DSPy program (Claude too) both need the key: 422 before any job runs."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = client.post("/api/advise", json={"task": "batching", "trace_id": trace_id, "advisor": advisor})
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {"field": "body.advisor", "reason": "this server has no ANTHROPIC_API_KEY: choose 'rules' or 'auto'"}
    ]


def test_a_tune_space_outside_the_fields_bounds_is_refused_listing_every_field(
    client: TestClient, trace_id: str
) -> None:
    """Issue 30.5: values the deployment fields refuse are 422 at submit, every field listed (they
    used to be accepted and every trial pruned with a reason naming no field)."""
    space = {
        **SMALL_SPACE,
        "max_num_seqs": [-3, 8],
        "kv_offloading_size": [-3],
        "gpu_memory_utilization": {"low": 0.5, "high": 1.5},
    }
    r = client.post("/api/tune", json={"trace_id": trace_id, "n_trials": 2, "space": space})
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {
            "field": "body.space.max_num_seqs",
            "reason": "max_num_seqs=-3: input should be greater than or equal to 1",
        },
        {
            "field": "body.space.kv_offloading_size",
            "reason": "kv_offloading_size=-3: input should be greater than 0",
        },
        {
            "field": "body.space.gpu_memory_utilization",
            "reason": "gpu_memory_utilization=1.5: input should be less than or equal to 1",
        },
    ]
