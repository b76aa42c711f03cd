"""The web run view of a hybrid model (gpt-oss: sliding-window and full layers): the KV-cache
usage chart has a line per KV cache group kind beside the total, and the totals table the
"KV cache groups" row, from the same summary the page's JSON carries."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient
from web_helpers import run_job, section


def test_a_hybrid_run_shows_its_kv_cache_groups(client: TestClient, trace_id: str) -> None:
    body = {"trace_id": trace_id, "deployment": {"model": "gpt-oss-20b", "gpu": "h100"}}
    res = run_job(client, "/api/simulate", body)["result"]
    groups = res["summary"]["kv_usage_by_group"]
    assert [g["group"] for g in groups] == ["sliding_window(128)", "full"]
    view = section(res, "simulation")
    kv = next(s for s in view["series"] if s["key"] == "kv_usage")
    assert kv["name"] == "all groups" and [ln["label"] for ln in kv["lines"]] == [
        "sliding_window(128)",
        "full",
    ]
    for ln, g in zip(kv["lines"], groups, strict=True):
        assert max(ln["y"]) == pytest.approx(g["max_usage"], rel=1e-5)  # down-sampling keeps the max
    assert np.max(kv["y"]) == pytest.approx(res["summary"]["max_kv_usage"], rel=1e-5)
    totals = next(t for t in view["tables"] if t["key"] == "totals")
    row = dict((r[0], r[1]) for r in totals["rows"])["KV cache groups"]
    assert row == "; ".join(
        f"{g['group']}: mean {g['mean_usage']:.1%}, max {g['max_usage']:.1%}" for g in groups
    )


def test_a_dense_run_has_no_group_lines(client: TestClient, trace_id: str) -> None:
    res = run_job(client, "/api/simulate", {"trace_id": trace_id})["result"]
    assert "kv_usage_by_group" not in res["summary"]
    kv = next(s for s in section(res, "simulation")["series"] if s["key"] == "kv_usage")
    assert kv["lines"] == [] and kv["name"] is None
