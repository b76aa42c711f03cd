"""Fixtures of the web workbench's tests: an app on a temporary data folder, a small trace.
The helpers tests import live in web_helpers.py (never import from a conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from web_helpers import settings_for

from servesim.web.app import create_app


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web")


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(data_dir))) as c:
        yield c


@pytest.fixture(scope="module")
def trace_id(client: TestClient) -> str:
    r = client.post("/api/traces/generate", json={"preset": "default", "num_requests": 300, "seed": 1})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])
