"""Schemathesis over the OpenAPI schema: no generated request makes the server answer 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from conftest import settings_for
from servesim.web.app import create_app

# Small bounds, so that a generated body cannot make the fuzz run long (a 2-million-request trace).
APP = create_app(
    settings_for(Path(tempfile.mkdtemp(prefix="servesim-fuzz-")), max_requests_per_trace=500, max_trials=5)
)
schema = schemathesis.openapi.from_asgi("/api/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_makes_a_server_error(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.text[:300])
    if response.status_code >= 400:
        ctype = response.headers.get("content-type") or [""]
        assert ctype[0].startswith("application/problem+json"), response.text[:200]
