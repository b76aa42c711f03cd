"""A bug in servesim is a 500 "internal error" (no traceback to the client, logged by the server);
the user's own errors stay 422 problem details. In a job: "internal error (Type): ..." vs the
user error's one line."""

from __future__ import annotations

import logging
import queue
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from web_helpers import settings_for

from servesim.errors import InputError
from servesim.web import work
from servesim.web.app import create_app


def _broken(*_args: Any, **_kwargs: Any) -> Any:
    raise ValueError("an internal helper broke at /srv/secret/path")


def test_a_bug_in_a_request_is_a_500_internal_error_without_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("servesim.web.ingest.generate_trace", _broken)
    app = create_app(settings_for(tmp_path))
    with TestClient(app, raise_server_exceptions=False) as c, caplog.at_level(logging.ERROR, "servesim.web"):
        r = c.post("/api/traces/generate", json={"preset": "default", "num_requests": 10, "seed": 1})
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 500 and body["detail"].startswith("internal error"), body
    assert "Traceback" not in r.text and "secret" not in r.text and "helper broke" not in r.text
    assert any("internal error (ValueError)" in rec.getMessage() for rec in caplog.records)


def test_a_user_error_in_the_same_request_stays_422(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path))) as c:
        r = c.post("/api/traces/generate", json={"preset": "nosuchpreset", "num_requests": 10, "seed": 1})
    assert r.status_code == 422 and "unknown preset 'nosuchpreset'" in r.json()["detail"], r.text


def _outcome(monkeypatch: pytest.MonkeyPatch, handler: Any) -> tuple[Any, ...]:
    monkeypatch.setitem(work.JOBS, "simulate", handler)
    q: queue.Queue[tuple[Any, ...]] = queue.Queue()
    work.run_job("simulate", {}, {}, q)
    return q.get_nowait()


def test_a_bug_in_a_job_says_internal_error_and_logs_the_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="servesim.web"):
        kind, message = _outcome(monkeypatch, _broken)
    assert kind == "error" and message.startswith("internal error (ValueError): "), message
    assert "Traceback" not in message
    logged = [r for r in caplog.records if r.name == "servesim.web" and r.exc_info]
    assert logged and "internal error in a simulate job" in logged[0].getMessage()


def test_a_user_error_in_a_job_is_its_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(*_args: Any, **_kwargs: Any) -> Any:
        raise InputError("trace.csv: row 3: field 'prompt_len': negative (-5)")

    assert _outcome(monkeypatch, refuses) == ("error", "trace.csv: row 3: field 'prompt_len': negative (-5)")
