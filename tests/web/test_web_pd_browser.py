"""A disaggregated run in real headless Chromium (the fixtures of test_web_browser.py): the Run
tab's cluster layout set to disaggregated, one prefill and one decode replica, and what a person
sees: the per-leg breakdown stacked (every leg named in its legend, in ms), the pools' table with
each replica's requests and KV, the SLO tiles; every chart passes the honest-charts check."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from test_web_browser import (  # noqa: F401 (fixtures)
    IMAGES,
    browser,
    honest_charts,
    page,
    server,
    upload_and_run,
)

pytestmark = pytest.mark.browser


def test_a_1p1d_run_shows_the_per_leg_breakdown_and_the_pools(
    page: Any,  # noqa: F811 (the fixture)
    server: str,  # noqa: F811 (the fixture)
) -> None:
    upload_and_run(page)
    page.click("#tab-run")
    page.fill("#slo-ttft_p99_ms", "400")
    assert page.locator("#pd-fields").is_hidden()
    page.select_option("#run-layout", "disaggregated")
    assert page.locator("#pd-fields").is_visible() and page.locator("#run-recovery-box").is_hidden()
    page.fill("#pd-prefill-replicas", "1")
    page.fill("#pd-decode-replicas", "1")
    page.select_option("#pd-link", "tcp-25g")
    page.click("#run-button")
    page.wait_for_selector("#run-results [data-section='disaggregated'] .js-plotly-plot")
    assert "1P1D over tcp-25g" in (page.text_content("#run-results .toolbar strong") or "")
    # Compare, the basket and the cost box read runs of identical replicas: not offered here
    assert page.locator("#run-results #basket-add").count() == 0 and page.locator("#cost-form").count() == 0
    charts = {c["key"]: c for c in honest_charts(page, "#run-results", "Run (disaggregated)")}
    bar = charts["leg_breakdown"]
    assert bar["title"].startswith("where a request's time goes, per leg")
    assert bar["x"] == "statistic over the requests" and bar["y"] == "time in the leg (ms)"
    assert [t["name"] for t in bar["traces"]] == [
        "prefill queue",
        "prefill",
        "KV transfer",
        "decode queue",
        "decode",
    ]
    assert all(t["type"] == "bar" and t["x"] == ["mean", "p50", "p99"] for t in bar["traces"])
    assert page.eval_on_selector(
        "#run-results .js-plotly-plot[data-key='leg_breakdown']", "e => e.layout.barmode"
    ) == ("stack")
    assert {"ttft_ms", "tpot_ms", "e2e_ms", "leg.transfer", "leg.decode"} <= set(charts)
    # the figures drawn are the run's own: the stacked means are each leg's mean
    run = httpx.get(server + "/api/runs").json()[0]
    result = httpx.get(f"{server}/api/runs/{run['id']}").json()["result"]
    legs = result["disaggregated"]["legs"]
    means = [t["y"][0] for t in bar["traces"]]
    want = [legs[k]["mean_ms"] for k in ("prefill_queue", "prefill", "transfer", "decode_queue", "decode")]
    assert means == pytest.approx(want, abs=1e-3)
    # the pools' table: one row per replica, every request prefilled on p0 and decoded on d0
    table = page.locator("#run-results table[data-key='pools']")
    assert table.locator("caption").inner_text() == "the pools, per replica"
    heads = table.locator("th").all_inner_texts()
    assert heads[:4] == ["replica", "pool", "requests prefilled", "requests decoded"]
    assert "KV sent (GB)" in heads and "KV received (GB)" in heads
    rows = [r.locator("td").all_inner_texts() for r in table.locator("tbody tr").all()]
    assert [r[:4] for r in rows] == [["p0", "prefill", "200", "0"], ["d0", "decode", "0", "200"]]
    # the SLO's tiles: TTFT p99 over every leg against 400 ms, goodput and attainment
    tile = page.locator("#run-results .kpi[data-key='ttft_ms_p99']")
    assert "SLO 400" in tile.inner_text()
    assert page.locator("#run-results .kpi[data-key='goodput']").count() == 1
    assert page.locator("#run-results .kpi[data-key='good_fraction']").count() == 1
    page.locator("#run-results [data-key='leg_breakdown']").scroll_into_view_if_needed()
    page.locator("#run-results .js-plotly-plot[data-key='leg_breakdown']").screenshot(
        path=str(IMAGES / "run-disaggregated-legs.png")
    )
    page.locator("#layout-box").scroll_into_view_if_needed()
    page.locator("#run-results [data-section='disaggregated'] > h2").scroll_into_view_if_needed()
    page.screenshot(path=str(IMAGES / "run-disaggregated.png"))
    # "Load these settings" restores the layout and the pools
    page.select_option("#run-layout", "aggregated")
    page.click("#load-settings")
    assert page.input_value("#run-layout") == "disaggregated" and page.input_value("#pd-link") == "tcp-25g"
