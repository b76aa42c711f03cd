"""What the web workbench's tests share: seed inputs, a small trace and search space, settings
of a test server, and submitting a job and waiting for it.

Why a module of its own (not conftest.py): ``from conftest import ...`` gets whichever conftest
pytest loaded last, so it broke depending on the order the files were collected in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from servesim.web.settings import WebSettings

SEED_RECOVERY = {
    "interrupted_node": "node-3",
    "preemption_timestamp": "2026-01-01T00:00:00Z",
    "network_bandwidth_gbps": 10,
    "active_jobs": [
        {"job_id": "job-801", "prompt_tokens": 1024, "generated_tokens": 128, "kv_cache_checkpointed": True},
        {"job_id": "job-802", "prompt_tokens": 2048, "generated_tokens": 64, "kv_cache_checkpointed": False},
    ],
}
SEED_RESCHED = {
    "batch_capacity": 4,
    "interrupted_requests": [
        {"req_id": "req-101", "tokens_processed": 512, "tokens_remaining": 16, "sla_budget_ms": 150},
        {"req_id": "req-102", "tokens_processed": 64, "tokens_remaining": 400, "sla_budget_ms": 1200},
    ],
}
#: A search space where a few trials find a feasible setting (one GPU, chunked prefill on).
SMALL_SPACE = {
    "tensor_parallel_size": [1],
    "replicas": [1],
    "enable_chunked_prefill": [True],
    "queue_timeout_s": [None],
}
GOOD_CSV = b"req_id,arrival_time_s,prompt_len,output_len\n" + b"".join(
    f"r{i},{i * 0.05:.2f},{200 + 37 * (i % 11)},{20 + 7 * (i % 5)}\n".encode() for i in range(200)
)


def settings_for(folder: Path, **kw: Any) -> WebSettings:
    """Settings of a test server: TestClient's requests carry ``Host: testserver``, which a
    loopback server refuses unless it is allowed (as ``--allowed-host testserver`` would)."""
    kw.setdefault("allowed_hosts", frozenset({"testserver"}))
    return WebSettings(data_dir=folder, **kw)


def wait_job(client: TestClient, job_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """The job's final state (fails the test when it does not end in time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = client.get(f"/api/jobs/{job_id}").json()
        if st["status"] in ("done", "failed", "cancelled"):
            return dict(st)
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s} s")


def run_job(client: TestClient, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """Submit, wait, and return ``{"job", "result"}`` of a job that must succeed."""
    r = client.post(path, json=body)
    assert r.status_code == 202, r.text
    st = wait_job(client, r.json()["id"], timeout_s)
    assert st["status"] == "done", st
    out: dict[str, Any] = client.get(f"/api/runs/{r.json()['id']}").json()
    return out


def section(result: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s for s in result["sections"] if s["key"] == key)
