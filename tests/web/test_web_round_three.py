"""Issue 47 on the web: every body a job would fail on is refused at submit (422, problem+json
naming the field), and a P/D run with speculative decoding runs (it is modelled)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from web_helpers import GOOD_CSV, run_job

NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
PD = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}


@pytest.fixture(scope="module")
def trace_id(client: TestClient) -> str:
    r = client.post("/api/traces?name=t.csv", content=GOOD_CSV)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _engine(**keys: Any) -> dict[str, Any]:
    return {"deployment": {"engine": keys}}


CASES = [
    (
        "a seed past 2**63 - 1 (it simulated, then failed writing JSON)",
        _engine(speculative_config={**NGRAM, "acceptance_seed": 2**64}),
        "body.deployment.engine.speculative_config.acceptance_seed",
        "less than or equal to 9223372036854775807",
    ),
    (
        "an unknown key",
        _engine(speculative_config={"method": "ngram", "num_speculativ_tokens": 3}),
        "body.deployment.engine.speculative_config.num_speculativ_tokens",
        "unknown key; did you mean 'num_speculative_tokens'?",
    ),
    (
        "draft_model without its model",
        _engine(speculative_config={"method": "draft_model", "num_speculative_tokens": 2}),
        "body.deployment.engine.speculative_config",
        "method 'draft_model' needs the draft model",
    ),
    (
        "a draft model servesim does not know (the job failed building the drafter)",
        _engine(speculative_config={"method": "draft_model", "num_speculative_tokens": 2, "model": "nope"}),
        "body.deployment.engine.speculative_config",
        "model 'nope' is not a model of servesim's catalog",
    ),
    (
        "speculation with a CPU tier (the engine refused it in the job)",
        _engine(speculative_config=NGRAM, kv_offloading_size=16),
        "body.deployment.engine",
        "speculative decoding with a CPU KV offload tier is not modelled",
    ),
    (
        "P/D with speculation and a CPU tier",
        {**_engine(speculative_config=NGRAM, kv_offloading_size=16), "disaggregated": PD},
        "body.deployment.engine",
        "speculative decoding with a CPU KV offload tier is not modelled",
    ),
    (
        "P/D with a draft model servesim does not know",
        {
            **_engine(
                speculative_config={"method": "draft_model", "num_speculative_tokens": 2, "model": "nope"}
            ),
            "disaggregated": PD,
        },
        "body.deployment.engine.speculative_config",
        "model 'nope' is not a model",
    ),
    (
        "an aggregated failure naming an unknown node (the job failed)",
        {"deployment": {"replicas": 2}, "failures": [{"node": "n7", "time_s": 1.0}]},
        "body",
        "failures[0].node: no replica 'n7'; the replicas are n0, n1",
    ),
    (
        "a P/D failure naming an unknown node",
        {"disaggregated": PD, "failures": [{"node": "p5", "time_s": 1.0}]},
        "body",
        "failures[0].node: no replica 'p5'",
    ),
]


@pytest.mark.parametrize(("why", "body", "field", "said"), CASES, ids=[c[0] for c in CASES])
def test_a_body_the_job_would_fail_on_is_refused_at_submit(
    client: TestClient, trace_id: str, why: str, body: dict[str, Any], field: str, said: str
) -> None:
    r = client.post("/api/simulate", json={"trace_id": trace_id, **body})
    assert r.status_code == 422, (why, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert any(e["field"] == field and said in e["reason"] for e in problem["errors"]), problem
    assert "Value error" not in r.text


def test_pd_with_speculation_runs(client: TestClient, trace_id: str) -> None:
    """Issue 47: P/D with a speculative config was refused as 'with KV offloading'; it runs."""
    run = run_job(
        client,
        "/api/simulate",
        {"trace_id": trace_id, **_engine(speculative_config=NGRAM), "disaggregated": PD},
    )
    assert run["job"]["status"] == "done"
