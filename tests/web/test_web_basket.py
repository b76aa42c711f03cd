"""The comparison basket: N runs against a chosen baseline, a change per metric for each."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from web_helpers import SEED_RECOVERY, run_job

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


def test_compare_and_the_basket_carry_overlays_named_after_each_run_and_trace(
    client: TestClient, three_runs: list[dict[str, Any]]
) -> None:
    """Issue 30.2: overlaid histograms, CDFs (the SLO marked) and time series for A/B and the basket."""
    a, b, c = (r["job"]["id"] for r in three_runs)
    d = client.get("/api/compare", params={"a": a, "b": b}).json()
    assert d["kind"] == "simulate"
    (ov,) = d["sections"]
    assert ov["key"] == "runs_overlay"
    keys = [s["key"] for s in ov["series"]]
    assert keys == [
        "ttft_ms_overlay",
        "ttft_ms_cdf_overlay",
        "tpot_ms_overlay",
        "tpot_ms_cdf_overlay",
        "itl_ms_overlay",
        "itl_ms_cdf_overlay",
        "e2e_ms_overlay",
        "e2e_ms_cdf_overlay",
        "num_waiting_overlay",
        "output_tokens_per_s_overlay",
        "kv_usage_overlay",
    ]
    cdf = ov["series"][1]
    names = [cdf["name"], *(ln["label"] for ln in cdf["lines"])]
    assert names[0].startswith("A: ") and names[1].startswith("B: ")
    # the title starts with the trace's name; its digest follows (the name is not said twice)
    assert all(re.fullmatch(r"[AB]: .+: .+ \(\S+\)", n) and " · " not in n for n in names), names
    queue = ov["series"][keys.index("num_waiting_overlay")]
    assert (
        queue["y"]
        == next(s for s in three_runs[0]["result"]["sections"] if s["key"] == "simulation")["series"][0]["y"]
    )
    basket = client.get("/api/compare/basket", params={"baseline": a, "runs": [b, c]}).json()
    assert [s["key"] for s in basket["sections"]] == ["basket", "runs_overlay"]
    labels = [ln["label"] for ln in basket["sections"][1]["series"][0]["lines"]]
    assert len(labels) == 2 and labels[0].startswith("1: ") and labels[1].startswith("2: ")


def test_compare_refuses_two_runs_of_different_kinds(
    client: TestClient, three_runs: list[dict[str, Any]]
) -> None:
    base = three_runs[0]["job"]["id"]
    plan = client.post("/api/recover", json={"record": SEED_RECOVERY}).json()
    plan_id = plan.get("job", {}).get("id") or plan.get("id")
    r = client.get("/api/compare", params={"a": base, "b": plan_id})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "two runs of one kind" in detail and "a simulate run" in detail and "recover run" in detail


def test_two_stored_studies_compare_as_the_web_stores_them() -> None:
    """A tune job stores its study without the trials and the trials beside it (work.capacity)."""
    import json
    from pathlib import Path

    from servesim.web.compare import study_sections

    doc = json.loads((Path(__file__).resolve().parents[2] / "examples" / "demo" / "tune.json").read_text())
    study = dict(doc["study"])
    trials = study.pop("trials")
    stored = {"study": study, "trials": trials}
    (view,) = study_sections("tune", ["A: x · t (1)", "B: y · t (1)"], [stored, stored])
    assert view["key"] == "study_compare"
    assert [t["key"] for t in view["tables"]] == ["best_configs", "best_figures"]
    assert all(r[-1] == "same" for r in view["tables"][0]["rows"])  # the same study twice
    (front,) = view["series"]
    assert front["name"] == "A: x · t (1)" and front["lines"][0]["x"] == front["x"]


def test_a_legend_names_the_trace_once() -> None:
    from servesim.web.compare import legend_name

    trace = {"name": "chat.csv", "digest": "sha256:" + "ab" * 32}
    assert (
        legend_name("A", {"title": "chat.csv: max_num_seqs 8"}, trace)
        == "A: chat.csv: max_num_seqs 8 (abababababab)"
    )
    assert legend_name("B", {"title": "my run"}, trace) == "B: my run · chat.csv (abababababab)"
    assert legend_name("1", {"title": "my run"}, None) == "1: my run · unknown trace"
