"""The Tune job's ``gpu_types`` and ``gpu_prices``: refused at submit (422 naming the field) as
``servesim tune --gpu-types`` refuses its flags, so no job fails later on what the door could see."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

SLO = "ttft_p99_ms=2000,tpot_p99_ms=200"


def _refused(client: TestClient, trace_id: str, **extra: Any) -> dict[str, Any]:
    body = {"trace_id": trace_id, "slo": SLO, "n_trials": 2, "gpu_types": ["h100", "l40s"], **extra}
    r = client.post("/api/tune", json=body)
    assert r.status_code == 422, r.text
    out: dict[str, Any] = r.json()
    return out


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"gpu_types": ["h100", "tpu-v9"]}, "body.gpu_types", "unknown GPU 'tpu-v9'"),
        ({"gpu_prices": {"l40s": 0}}, "body.gpu_prices", "a price must be a positive number"),
        ({"gpu_prices": {"l40s": -1.5}}, "body.gpu_prices", "a price must be a positive number"),
        ({"gpu_prices": {"nope": 1.0}}, "body.gpu_prices", "unknown GPU 'nope'"),
        ({"deployment": {"gpu": "h100"}}, "body.deployment.gpu", "gpu_types compares several"),
        ({"gpu_hour_usd": 2.5}, "body.gpu_hour_usd", "give each type's price in gpu_prices"),
        ({"layouts": {"gpus": 2}}, "body.layouts", "drop layouts"),
        (
            {"deployment": {"linear_step_time": True, "engine": {"num_gpu_blocks": 3000}}},
            "body.deployment",
            "roofline step-time model",
        ),
        ({"n_trials": 150}, "body.n_trials", "150 trials for each of 2 GPU types"),
        ({"gpu_types": [f"g{i}" for i in range(17)]}, "body.gpu_types", "at most 16"),
    ],
)
def test_refused_at_submit_naming_the_field(
    client: TestClient, trace_id: str, extra: dict[str, Any], field: str, words: str
) -> None:
    problem = _refused(client, trace_id, **extra)
    fields = {e["field"]: e["reason"] for e in problem["errors"]}
    assert field in fields, problem
    assert words in fields[field], problem


def test_no_gpu_types_is_the_plain_study(client: TestClient, trace_id: str) -> None:
    """An empty list asks nothing more: the body is the plain study's (prices still checked)."""
    r = client.post("/api/tune", json={"trace_id": trace_id, "gpu_types": [], "gpu_prices": {"h100": 0}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.gpu_prices"
