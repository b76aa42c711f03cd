"""The comparison basket: N runs against a chosen baseline, a change per metric for each."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import SEED_RECOVERY, run_job
from servesim.views.compare import metric_label


@pytest.fixture(scope="module")
def three_runs(client: TestClient, trace_id: str) -> list[dict[str, Any]]:
    return [
        run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"max_num_seqs": n}})
        for n in (256, 8, 2)
    ]


def test_basket_gives_each_run_its_change_against_the_baseline(
    client: TestClient, three_runs: list[dict[str, Any]]
) -> None:
    base, *others = (r["job"]["id"] for r in three_runs)
    r = client.get("/api/compare/basket", params={"baseline": base, "runs": others})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["baseline"]["id"] == base and [j["id"] for j in d["runs"]] == others
    assert {"key": "max_num_seqs", "baseline": 256, "runs": [8, 2]} in d["config_diff"]
    table = d["sections"][0]["tables"][0]
    assert [c["key"] for c in table["columns"]] == [
        "metric",
        "better_when",
        "baseline",
        "run0",
        "run0_change",
        "run1",
        "run1_change",
    ]
    rows = {row[0]: row for row in table["rows"]}
    label, unit = metric_label("ttft_ms")
    ttft = rows[f"{label} p99 ({unit})"]
    b, v0, c0, v1, c1 = ttft[2:]
    assert b == three_runs[0]["result"]["summary"]["ttft_ms"]["p99"]
    assert v1 == three_runs[2]["result"]["summary"]["ttft_ms"]["p99"]
    assert c0 == pytest.approx((v0 - b) / b) and c1 == pytest.approx((v1 - b) / b)
    assert c1 > c0 > 0  # fewer sequences at once: everybody queues longer
    assert ttft[1] == "lower"
    label, unit = metric_label("output_token_throughput")
    assert rows[f"{label} ({unit})"][1] == "higher"


def test_basket_errors(client: TestClient, three_runs: list[dict[str, Any]]) -> None:
    base = three_runs[0]["job"]["id"]
    assert client.get("/api/compare/basket", params={"baseline": base}).status_code == 422  # no runs
    many = {"baseline": base, "runs": [base] * 13}
    assert client.get("/api/compare/basket", params=many).status_code == 422
    missing = client.get("/api/compare/basket", params={"baseline": base, "runs": ["f" * 32]})
    assert missing.status_code == 404
    plan = client.post("/api/recover", json={"record": SEED_RECOVERY}).json()
    plan_id = plan.get("job", {}).get("id") or plan.get("id")
    wrong = client.get("/api/compare/basket", params={"baseline": base, "runs": [plan_id]})
    assert wrong.status_code == 422 and "simulation" in wrong.json()["detail"]
