"""A cluster run in real headless Chromium (the fixtures of test_web_browser.py): three replicas,
one lost and back, and what a person sees: the single-run charts for the fleet with a title,
axis titles and named legend entries, the outage shaded and marked on the queue and throughput
series, a selector that swaps in one replica's charts, and the fleet's bottleneck verdict."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from test_web_browser import IMAGES, browser, page, server, upload_and_run  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

#: Each Plotly figure as a person reads it: title, axis titles, legend, traces, shapes, labels.
READ = """els => els.map(e => {
  const L = e.layout || {}, t = (o) => (o && o.title && (o.title.text ?? o.title)) || '';
  return {key: e.dataset.key || e.getAttribute('aria-label'), title: t(L), x: t(L.xaxis), y: t(L.yaxis),
    legend: !!L.showlegend, legend_x: L.legend && L.legend.x !== undefined ? L.legend.x : 0,
    traces: (e.data || []).map(d => ({name: d.name || '', n: (d.x || []).length, y: Array.from(d.y || [])})),
    shapes: (L.shapes || []).map(s => [s.type, s.x0, s.x1]), labels: (L.annotations || []).map(a => a.text)};
})"""


def charts(pg: Any) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in pg.eval_on_selector_all("#cluster-view .js-plotly-plot", READ)}


def test_a_cluster_run_shows_the_fleet_and_each_replica_with_the_failure_drawn(
    page: Any,  # noqa: F811 (the fixture)
    server: str,  # noqa: F811 (the fixture)
) -> None:
    upload_and_run(page)
    page.click("#tab-run")
    page.fill("#slo-ttft_p99_ms", "400")
    page.fill("#eng-max_num_seqs", "2")  # small batches: the survivors queue while n1 is down
    page.fill("#dep-replicas", "3")  # the shared deployment panel
    page.click("summary:has-text('Failures')")
    page.fill("#run-failures", "n1@4+4")
    page.select_option("#run-recovery", "restart")
    page.click("#run-button")
    page.wait_for_selector("#cluster-view[data-showing='fleet'] .js-plotly-plot")
    fleet = charts(page)
    # the single-run charts, for the whole fleet: latency histograms (the SLO marked), tokens per
    # step against the budget, the time series, the phase breakdown
    assert {"ttft_ms", "tpot_ms", "e2e_ms", "num_tokens", "num_waiting", "num_running", "kv_usage"} <= set(
        fleet
    )
    assert {"output_tokens_per_s", "latency_split"} <= set(fleet)
    for key, c in fleet.items():
        where = f"{key}: {c['title']!r}"
        assert c["title"].strip() and c["x"].strip() and c["y"].strip(), where
        assert not re.fullmatch(r"[\d.\s]*|index", c["x"]), where
        if len(c["traces"]) > 1:  # several traces: a legend, outside the data, each entry named
            assert c["legend"] and c["legend_x"] > 1 and all(t["name"] for t in c["traces"]), where
    assert any(lab.startswith("SLO 400") for lab in fleet["ttft_ms"]["labels"])
    assert fleet["ttft_ms"]["x"] == "TTFT (ms)" and fleet["ttft_ms"]["title"].startswith(
        "TTFT distribution, fleet"
    )
    queue = fleet["num_waiting"]
    assert queue["title"] == "waiting queue, fleet (3 replicas summed)"
    assert queue["x"] == "time (s)" and queue["y"] == "requests waiting"
    assert [t["name"] for t in queue["traces"]] == ["fleet", "n0", "n1", "n2"]  # the legend: fleet and each
    # the outage on the queue and on the throughput: shaded from the failure to the recovery, marked
    # with the replica, the policy and the requests moved, and the recovery marked
    run = httpx.get(server + "/api/runs").json()[0]
    result = httpx.get(f"{server}/api/runs/{run['id']}").json()["result"]
    moved = result["cluster"]["impact"]["num_interrupted"]
    assert moved > 0
    for key in ("num_waiting", "output_tokens_per_s"):
        c = fleet[key]
        assert ["rect", 4, 8] in c["shapes"], c["shapes"]
        plural = "" if moved == 1 else "s"
        assert f"n1 down (restart)<br>{moved} request{plural} moved: RECOMPUTE {moved}" in c["labels"]
        assert "n1 back (empty)" in c["labels"] and "n1 down at 4 s" in c["labels"]
    # n1's own line: nothing runs on it while it is down
    running = fleet["num_running"]
    n1 = next(t for t in running["traces"] if t["name"] == "n1")
    xs = page.eval_on_selector("#cluster-view [data-key='num_running']", "e => Array.from(e.data[2].x)")
    inside = [y for x, y in zip(xs, n1["y"], strict=True) if 4.3 < x < 7.7]
    assert inside and all(y == 0 for y in inside)
    # the fleet's verdict, as the server worked it out from the data
    verdict = next(v for v in result["sections"][0]["verdicts"] if v["key"] == "fleet_bottleneck")
    shown = page.text_content("#cluster-view .verdict[data-key='fleet_bottleneck']") or ""
    assert shown == "fleet bottleneck" + verdict["text"]
    # two replicas left with batches of 2 queue through the outage: the data says the failure did it
    assert verdict["text"].startswith(f"the failure: n1 at 4 s ({moved} moved); the survivors queued")
    assert page.locator("#run-results [data-section='timeline'] table").count() == 1  # the events, listed
    box = page.locator("#cluster-view")
    box.scroll_into_view_if_needed()
    page.locator("#cluster-view [data-key='num_waiting']").screenshot(path=str(IMAGES / "cluster-queue.png"))
    page.locator(".cluster-picker").scroll_into_view_if_needed()
    page.screenshot(path=str(IMAGES / "cluster-run.png"))
    # one replica: its own single-run charts, its own bottleneck, the failure still drawn
    options = page.locator("#replica-select option").all_inner_texts()
    assert options == ["the whole fleet (3 replicas)", "replica n0", "replica n1", "replica n2"]
    page.select_option("#replica-select", "replica.n0")
    page.wait_for_selector("#cluster-view[data-showing='replica.n0'] .js-plotly-plot")
    one = charts(page)
    assert one["num_running"]["title"] == "running batch" and len(one["num_running"]["traces"]) == 1
    assert one["num_running"]["traces"][0]["y"] != running["traces"][0]["y"]  # n0's batch, not the fleet's
    assert ["rect", 4, 8] in one["output_tokens_per_s"]["shapes"]
    assert page.locator("#cluster-view .verdict[data-key='bottleneck']").count() == 1
    assert page.locator("#cluster-view .verdict[data-key='fleet_bottleneck']").count() == 0
    n0 = next(s for s in result["sections"] if s["key"] == "replica.n0")
    assert page.text_content("#cluster-view h2") == n0["title"] == "replica n0"
    assert {"ttft_ms", "e2e_ms", "num_tokens", "latency_split"} <= set(one)
    page.select_option("#replica-select", "fleet")
    page.wait_for_selector("#cluster-view[data-showing='fleet']")
    assert charts(page)["num_waiting"]["title"] == queue["title"]
