"""The Tune job's ``layouts`` with the checkpoint's format (issue 51): ``deployment.engine``'s
``quantization`` and ``kv_cache_dtype`` run in every layout, as ``servesim tune --layouts
--quantization fp8 --kv-cache-dtype fp8`` runs them; what that command refuses (TP, any other
engine key) is refused at submit, naming the field, instead of being ignored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from web_helpers import run_job

LAYOUTS = {"kinds": ["agg"], "gpus": 2, "break_even": False}
FP8 = {"quantization": "fp8", "kv_cache_dtype": "fp8"}


def _body(trace_id: str, deployment: dict[str, Any]) -> dict[str, Any]:
    return {"trace_id": trace_id, "verify_seeds": 1, "layouts": LAYOUTS, "deployment": deployment}


def test_the_checkpoints_format_runs_in_every_layout(client: TestClient, trace_id: str) -> None:
    out = run_job(
        client, "/api/tune", _body(trace_id, {"model": "llama-3.1-8b", "gpu": "h100", "engine": FP8})
    )
    layouts = out["result"]["layouts"]
    assert layouts["engine"] == FP8
    (view,) = out["result"]["sections"]
    assert (
        "every layout runs quantization fp8, kv_cache_dtype fp8 (the deployment's, not searched)"
        in view["text"]
    )
    assert layouts["commands"] and all(
        "--quantization fp8" in c and "--kv-cache-dtype fp8" in c for c in layouts["commands"]
    )


@pytest.mark.parametrize(
    ("deployment", "field", "words"),
    [
        ({"engine": {"max_num_seqs": 64, **FP8}}, "body.deployment.engine.max_num_seqs", "drop it"),
        ({"tp": 2}, "body.deployment.tp", "layouts searches TP"),
    ],
)
def test_what_the_cli_refuses_is_refused_at_submit(
    client: TestClient, trace_id: str, deployment: dict[str, Any], field: str, words: str
) -> None:
    r = client.post("/api/tune", json=_body(trace_id, deployment))
    assert r.status_code == 422, r.text
    reasons = {e["field"]: e["reason"] for e in r.json()["errors"]}
    assert set(reasons) == {field} and words in reasons[field], reasons
