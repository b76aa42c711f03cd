"""End to end in real headless Chromium (Debian's, driven by Playwright): what a person sees.

The server is ``servesim serve`` itself, in a subprocess on a free port. Screenshots of the main
views (1366x768) are written to docs/images/ for the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_sample import bench_result
from web_helpers import GOOD_CSV, SEED_RECOVERY, SMALL_SPACE

from free_ports import free_port
from polling import wait_until
from servesim.report.pdf import CHROMIUM_ARGS

pytestmark = pytest.mark.browser
CHROMIUM = "/usr/bin/chromium"
ARGS = CHROMIUM_ARGS  # the flags the BRIEF asks for, kept once (servesim.report.pdf)
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
TIMEOUT_MS = 90_000

if not Path(CHROMIUM).exists():  # pragma: no cover - .ci/run installs it
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("e2e")
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "servesim"),
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(folder),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/api/catalog", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise RuntimeError(f"servesim serve did not start: {out[-2000:]}")
            time.sleep(0.2)
        # Every test finds a trace, whatever order the tests run in.
        r = httpx.post(url + "/api/traces/generate", json={"num_requests": 200, "seed": 2}, timeout=60)
        assert r.status_code == 201, r.text
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any, server: str) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1366, "height": 768}, base_url=server)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto("/")
    pg.wait_for_selector("body[data-ready='1']")
    EXPECTED.clear()
    yield pg
    ctx.close()
    unexpected = [e for e in errors if not any(x in e for x in EXPECTED)]
    assert unexpected == [], unexpected  # no errors in the browser console


#: Console lines a test causes on purpose (the browser logs every 4xx answer it receives).
EXPECTED: list[str] = []


def shot(page: Any, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / name))


def wait_for_answer(page: Any, slot: str, selector: str, timeout: int = 180_000) -> None:
    """Wait for a job's answer in ``#{slot}-results``, or fail at once with the refusal the page
    shows in the job box (its status and detail), rather than waiting out the timeout blind."""
    answer = f"#{slot}-results {selector}"
    page.wait_for_selector(f"{answer}, #{slot}-job [role='alert']", timeout=timeout)
    refused = page.locator(f"#{slot}-job [role='alert']")
    assert refused.count() == 0, f"{slot} was refused: {refused.first.inner_text()}"
    page.wait_for_selector(answer, timeout=timeout)


def plotted_points(page: Any, container: str) -> list[int]:
    """Points per Plotly trace of every chart in ``container`` (read from Plotly's own DOM)."""
    return list(
        page.eval_on_selector_all(
            f"{container} .js-plotly-plot",
            "els => els.map(e => (e.data || []).reduce((n, t) => n + (t.x ? t.x.length : 0), 0))",
        )
    )


def drop_file(page: Any, name: str, data: bytes) -> None:
    """A real drop event on the drop zone, carrying the file (as a person drags it from a folder)."""
    handle = page.evaluate_handle(
        """([name, bytes]) => { const dt = new DataTransfer();
             dt.items.add(new File([new Uint8Array(bytes)], name, {type: 'text/csv'})); return dt; }""",
        [name, list(data)],
    )
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": handle})


def upload_and_run(page: Any) -> None:
    drop_file(page, "chat.csv", GOOD_CSV)
    page.wait_for_selector("#trace-status:has-text('200 requests stored')")
    page.wait_for_selector("#trace-summary .js-plotly-plot")
    assert all(n > 0 for n in plotted_points(page, "#trace-summary"))


def run_simulation(page: Any, max_num_seqs: int) -> float:
    page.click("#tab-run")
    page.fill("#eng-max_num_seqs", str(max_num_seqs))
    page.click("#run-button")
    page.wait_for_selector(f"#run-results .toolbar:has-text('max_num_seqs {max_num_seqs}')")
    page.wait_for_selector("#run-results .js-plotly-plot")
    p99 = page.text_content("#run-results .kpi[data-key='ttft_ms_p99'] .value") or ""
    return float(p99.split()[0].replace(",", ""))


def test_upload_run_see_histograms_and_change_max_num_seqs(page: Any) -> None:
    upload_and_run(page)
    shot(page, "traces.png")
    wide = run_simulation(page, 256)
    points = plotted_points(page, "#run-results")
    assert len(points) >= 8 and all(n > 0 for n in points)  # histograms and series carry data
    assert (
        page.locator("#run-results [data-section='simulation'] .verdict[data-key='bottleneck']").count() == 1
    )
    spark = page.get_attribute("#run-results .kpi[data-key='ttft_ms_p99'] svg.spark polyline", "points") or ""
    assert len(spark.split()) > 1  # the tile's sparkline: TTFT p99 over the run's time
    shot(page, "run.png")
    page.fill("#cost-price", "2.5")
    page.click("#cost-form button")
    page.wait_for_selector("#cost-result .kpi[data-key='usd_per_m_output_tokens']")
    assert "2.50" in (page.text_content("#cost-result .kpi[data-key='usd_per_hour'] .value") or "")
    page.click("#basket-add")  # the wide run: the basket's first run is its baseline
    narrow = run_simulation(page, 1)
    assert narrow != wide and narrow > wide  # one request at a time queues everybody else
    page.click("#basket-add")
    stacked = page.eval_on_selector(
        "#run-results [data-group='queue_by_reason']", "e => e.data.map(t => t.name)"
    )  # a queue to explain (one request at a time); zero throughout it is one line, not a flat panel
    assert len(stacked) == 4 and stacked[0] == "KV blocks"  # queue length by reason, one trace each
    queue = page.locator("#run-results [data-group='queue_by_reason']")
    queue.scroll_into_view_if_needed()
    queue.screenshot(path=str(IMAGES / "queue-by-reason.png"))  # one request at a time: max_num_seqs
    page.click(".switcher button[data-p='p50']")
    assert page.locator(".kpi[data-key='ttft_ms_p50']").count() == 1
    assert page.locator(".kpi[data-key='ttft_ms_p50'] svg.spark").count() == 1
    page.click(".kpi[data-key='ttft_ms_p50'] .q")
    assert "Time to first token" in (page.text_content(".kpi[data-key='ttft_ms_p50'] .def") or "")
    page.reload()  # the last run survives a reload
    page.wait_for_selector("body[data-ready='1']")
    page.click("#tab-run")
    page.wait_for_selector("#run-results .kpi[data-key='ttft_ms_p99']")
    page.click("#tab-compare")
    page.wait_for_selector("#compare-a option", state="attached")
    page.click("#compare-form button[type='submit']")
    page.wait_for_selector("#metric-deltas")
    traces = page.locator("#compare-traces li").all_inner_texts()  # each run's trace, named (issue 30.2)
    assert len(traces) == 2 and all(
        re.fullmatch(r"[AB] replayed chat\.csv \(digest [0-9a-f]{12}\)", t) for t in traces
    )
    assert page.locator("#compare-results .workload-warning").count() == 0  # the same trace: no warning
    settings = page.locator("#compare-results table[data-key='config_diff'] tbody tr")
    seqs = settings.filter(has_text="max_num_seqs")
    assert seqs.first.locator("td").all_inner_texts() == ["max_num_seqs", "256", "1"]  # A's value, B's value
    blocks = settings.filter(has_text="num_gpu_blocks")
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})+", c) for c in blocks.first.locator("td").all_inner_texts()[1:])
    # the two runs overlaid (issue 30.2): each latency's histogram and CDF, the SLO marked, the series
    page.wait_for_selector("#compare-results [data-section='runs_overlay'] .js-plotly-plot >> nth=8")
    overlaid = {c["key"]: c for c in honest_charts(page, "#compare-results", "Compare")}
    cdf = overlaid["ttft_ms_cdf_overlay"]
    assert cdf["x"] == "TTFT (ms)" and cdf["y"] == "share of requests at or below"
    legend = [t["name"] for t in cdf["traces"]]
    assert len(legend) == 2 and all(
        re.fullmatch(r"[AB]: chat\.csv: .+ \([0-9a-f]{12}\)", n) for n in legend
    ), legend
    assert all(max(t["y"]) == 1 for t in cdf["traces"])  # every request counted, run by run
    assert {"num_waiting_overlay", "output_tokens_per_s_overlay", "kv_usage_overlay"} <= set(overlaid)
    assert overlaid["num_waiting_overlay"]["x"] == "time (s)"
    box = page.locator("#compare-results [data-section='runs_overlay']")
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(IMAGES / "compare-overlay.png"))
    page.wait_for_selector("#basket-table tbody tr >> nth=1")
    assert page.is_checked("#basket-base-0")  # the wide run is the baseline
    page.click("#basket-compare")
    page.wait_for_selector("#basket-results table[data-key='basket']")
    ttft = page.locator("#basket-results table[data-key='basket'] tbody tr", has_text="p99").first
    cells = ttft.locator("td").all_inner_texts()
    assert cells[0].startswith("TT") or "first token" in cells[0].lower()
    # TTFT p99 rose against the baseline: beyond +100 % it reads as the ratio B/A (issue 30.2)
    assert cells[1] == "lower" and re.fullmatch(r"\+[\d,.]+ %|×[\d,.]+", cells[-1]), cells[-1]
    assert float(cells[-1].strip("+×% ").replace(",", "")) > 0
    assert len(page.locator("#basket-traces li").all_inner_texts()) == 2
    assert "bad" in (ttft.locator("td").last.get_attribute("class") or "")  # and that is worse
    page.wait_for_selector("#basket-results [data-section='runs_overlay'] .js-plotly-plot")
    basket_charts = honest_charts(page, "#basket-results", "Basket")
    assert all(len(c["traces"]) == 2 for c in basket_charts)  # the baseline and the other run
    page.locator("#basket-box").scroll_into_view_if_needed()
    shot(page, "compare.png")


def test_bad_file_shows_row_level_errors(page: Any) -> None:
    EXPECTED.append("status of 422 (Unprocessable Entity)")  # the refused upload itself
    drop_file(page, "broken.csv", b"req_id,arrival_time_s,prompt_len,output_len\nr1,0,x,5\nr2,1,-3,5\n")
    page.wait_for_selector("#upload-errors table")
    text = page.text_content("#upload-errors") or ""
    assert "broken.csv: no usable request" in text
    rows = page.eval_on_selector_all("#upload-errors tbody tr", "rs => rs.map(r => r.innerText)")
    assert len(rows) == 2 and "prompt_len" in rows[0] and "negative token count" in rows[1]
    shot(page, "upload-errors.png")


def test_tuning_shows_progress_and_the_recommendation(page: Any) -> None:
    page.click("#tab-tune")
    page.fill("#tune-trials", "3")
    page.fill("#tune-verify", "1")
    page.fill("#tune-trial-seeds", "1")
    page.fill("#slo-ttft_p99_ms", "5000")
    page.fill("#tune-space", __import__("json").dumps(SMALL_SPACE))
    page.click("#tune-submit")
    page.wait_for_selector("#tune-job .bar")  # progress shows while the study runs
    page.wait_for_selector("#recommendation-card", timeout=120_000)
    cmd = page.text_content("#vllm-command") or ""
    assert cmd.startswith("vllm serve") and "--max-num-seqs" in cmd
    assert page.locator("#tune-job .line[data-status='done']").count() == 1
    assert all(n > 0 for n in plotted_points(page, "#tune-results"))  # the trials scatter
    assert honest_charts(page, "#tune-results", "Tune")
    assert page.locator("#tune-results [data-section='recommendation']").count() == 1
    shot(page, "tune.png")
    # click a point of the trials scatter (as a person does, with the mouse on the marker)
    scatter = "#tune-results [data-section='tuning'] [data-key='trials']"
    page.locator(scatter).scroll_into_view_if_needed()
    x, y, near = page.eval_on_selector(
        scatter,
        """gd => { const l = gd._fullLayout, r = gd.getBoundingClientRect(), t = gd.data[0];
                   const px = (i) => [l.xaxis.l2p(t.x[i]), l.yaxis.l2p(t.y[i])];
                   const d = (i, j) => Math.hypot(px(i)[0] - px(j)[0], px(i)[1] - px(j)[1]);
                   const alone = (k) => t.x.every((_, j) => j === k || d(k, j) > 25);
                   const i = Math.max(0, t.x.findIndex((_, k) => alone(k)));
                   const here = t.text.filter((_, j) => d(i, j) <= 25);  // drawn on (or next to) it
                   return [r.left + l._size.l + px(i)[0], r.top + l._size.t + px(i)[1], here]; }""",
    )
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_selector("#trial-config h3")
    shown = (page.text_content("#trial-config h3") or "").split()[1]
    assert shown in [n.split()[1] for n in near]  # the trial under the mouse (or one drawn on it)
    shot(page, "tune-pareto.png")
    wanted = page.eval_on_selector_all(
        "#trial-config tbody tr", "rs => rs.map(r => r.innerText.split('\\t'))"
    )
    seqs = next(v for k, v in wanted if k == "max_num_seqs")
    page.click("#trial-config-load")
    assert page.is_visible("#panel-run")
    assert page.input_value("#eng-max_num_seqs") == seqs  # the clicked trial's flags are in the form
    page.click("#tab-tune")
    page.click("#trial-load")  # the keyboard path: the list of feasible trials
    assert page.is_visible("#panel-run")
    assert page.input_value("#eng-max_num_seqs") != ""


def test_recovery_matrix_and_history(page: Any) -> None:
    page.click("#tab-recover")
    page.fill("#recover-input", __import__("json").dumps(SEED_RECOVERY))
    page.click("#recover-form button[type='submit']")
    page.wait_for_selector("#recover-results table")
    text = page.text_content("#recover-results") or ""
    assert "job-801" in text and ("MIGRATE_STATE" in text or "COLD_RESTART" in text)
    honest_charts(page, "#recover-results", "Recover")
    shot(page, "recovery.png")
    page.click("#tab-history")
    page.wait_for_selector("#history-table tbody tr")
    kinds = page.eval_on_selector_all(
        "#history-table tbody tr td:nth-child(2)", "c => c.map(x => x.innerText)"
    )
    assert "recover" in kinds


def test_keyboard_moves_between_tabs_and_inputs_are_labelled(page: Any) -> None:
    page.focus("#tab-traces")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tab-run"
    assert page.is_visible("#panel-run") and not page.is_visible("#panel-traces")
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')].filter(e =>
             e.type !== 'file' && !e.labels?.length && !e.getAttribute('aria-label')).map(e => e.id)"""
    )
    assert unlabelled == []


def test_throughput_curve_rescheduling_and_advisor(page: Any) -> None:
    page.click("#tab-sweep")
    page.fill("#sweep-seeds", "1")
    page.click("#sweep-submit")
    page.wait_for_selector("#sweep-results [data-section='saturation'] .js-plotly-plot", timeout=120_000)
    assert all(n > 0 for n in plotted_points(page, "#sweep-results"))
    verdicts = page.eval_on_selector_all("#sweep-results .verdict", "vs => vs.map(v => v.innerText)")
    assert any("saturation" in v.lower() for v in verdicts)
    curves = {c["key"]: c for c in honest_charts(page, "#sweep-results", "Throughput curve")}
    achieved, offered = curves["throughput_curve"]["traces"][:2]
    assert offered["name"] == "offered" and len(achieved["y"]) == len(offered["y"]) >= 3
    # issue 30: a 200-request trace read ~500 req/s achieved at 134 req/s offered
    assert all(a <= o * (1 + 1e-9) for a, o in zip(achieved["y"], offered["y"], strict=True))
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "throughput-curve.png")
    first = page.text_content("#sweep-results .kv") or ""
    page.fill("#rate-slider", "0")
    page.dispatch_event("#rate-slider", "input")
    assert (page.text_content("#sweep-results .kv") or "") != first  # the slider reads another rate
    page.click("#tab-resched")
    page.click("#resched-example")
    page.click("#resched-form button[type='submit']")
    page.wait_for_selector("#resched-results table")
    assert "req-101" in (page.text_content("#resched-results") or "")
    honest_charts(page, "#resched-results", "Rescheduling")
    page.click("#tab-advise")
    page.select_option("#advise-task", "reschedule")
    page.select_option("#advise-advisor", "rules")
    page.click("#advise-submit")
    page.wait_for_selector("#advice-card")
    assert "Answered by: the rules advisor" in (page.text_content("#advice-card h2") or "")
    assert "(re-simulated: 0.5 = the baseline" in (page.text_content("#advice-score") or "")
    honest_charts(page, "#advise-results", "Advisor")
    shot(page, "advisor.png")


def test_two_browsers_follow_their_own_jobs(browser: Any, server: str) -> None:
    pages = []
    for n in (64, 8):
        ctx = browser.new_context(viewport={"width": 1366, "height": 768}, base_url=server)
        pg = ctx.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto("/")
        pg.wait_for_selector("body[data-ready='1']")
        pg.click("#tab-run")
        pg.fill("#eng-max_num_seqs", str(n))
        pg.click("#run-button")
        pages.append((n, ctx, pg))
    for n, ctx, pg in pages:
        # the job's end first (its line says how it ended: a failure's reason is then in the message)
        pg.wait_for_selector("#run-job .line[data-status='done'], #run-job .line[data-status='failed']")
        line = pg.text_content("#run-job .line") or ""
        assert pg.locator("#run-job .line[data-status='done']").count() == 1, (n, line)
        pg.wait_for_selector(f"#run-results .toolbar:has-text('max_num_seqs {n}')")
        pg.reload()  # each browser comes back to its own last run
        pg.wait_for_selector("body[data-ready='1']")
        pg.click("#tab-run")
        pg.wait_for_selector(f"#run-results .toolbar:has-text('max_num_seqs {n}')")
        ctx.close()


def test_measured_vs_simulated_overlay_and_a_bad_benchmark_file(page: Any) -> None:
    import json

    EXPECTED.append("status of 422 (Unprocessable Entity)")  # the refused file itself
    page.click("#tab-measured")
    bad = {"num_prompts": -1, "mean_ttft_ms": 5.0}
    page.set_input_files(
        "#bench-file",
        files=[{"name": "bad.json", "mimeType": "application/json", "buffer": json.dumps(bad).encode()}],
    )
    page.wait_for_selector("#bench-errors table")
    assert "num_prompts" in (page.text_content("#bench-errors tbody") or "")
    good = json.dumps(bench_result(60)).encode()
    # A loaded server: the list of benchmarks answers late.
    # "stored" must not show before Simulate can use the file.
    page.evaluate(
        """() => { const f = window.fetch; window.fetch = async (url, opts) => {
             if (String(url).endsWith('/api/bench') && opts.method === 'GET')
               await new Promise((r) => setTimeout(r, 1500));
             return f(url, opts); }; }"""
    )
    page.set_input_files(
        "#bench-file", files=[{"name": "bench.json", "mimeType": "application/json", "buffer": good}]
    )
    page.wait_for_selector("#bench-status:has-text('bench.json stored')")
    assert page.locator("#bench-errors table").count() == 0
    page.click("#bench-submit")
    page.wait_for_selector("#bench-results [data-section='overlay'] [data-overlay] .main-svg")
    overlays = page.eval_on_selector_all(
        "#bench-results [data-overlay]", "els => els.map(e => [e.dataset.overlay, e.data.length])"
    )
    assert overlays == [["ttft_ms", 2], ["tpot_ms", 2], ["itl_ms", 2], ["e2e_ms", 2]]  # measured + simulated
    measured = honest_charts(page, "#bench-results", "Measured")
    assert next(c["x"] for c in measured if c["key"] == "ttft_ms") == "TTFT (ms)"  # not a bare "ms"
    rows = page.eval_on_selector_all(
        "#bench-results table[data-key='measured_vs_simulated'] tbody tr", "rs => rs.map(r => r.innerText)"
    )
    ttft = next(r for r in rows if r.startswith("TTFT mean"))
    assert ttft.strip().endswith("%")  # the error column
    assert page.locator("#bench-results .kpi[data-key='ttft_ms_mean_error']").count() == 1
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "measured.png")


#: Every Plotly figure of a container as what a person reads off it: title, axis titles, legend
#: entries (with where the legend sits), each trace's x values and type, and the shapes' x.
READ_CHARTS = """els => els.map(e => {
  const L = e.layout || {}, t = (o) => (o && o.title && (o.title.text ?? o.title)) || '';
  return {key: e.dataset.key || e.dataset.group || e.dataset.overlay || e.getAttribute('aria-label'),
    title: t(L), x: t(L.xaxis), y: t(L.yaxis), xtype: (L.xaxis || {}).type || '',
    legend: !!L.showlegend, legend_y: L.legend && L.legend.y !== undefined ? L.legend.y : 1.02,
    legend_x: L.legend && L.legend.x !== undefined ? L.legend.x : 1.02,
    traces: (e.data || []).map(d => ({name: d.name || '', type: d.type || 'scatter',
                                       x: Array.from(d.x || []), y: Array.from(d.y || [])})),
    shapes: (L.shapes || []).map(s => s.x0), annotations: (L.annotations || []).map(a => a.text)};
})"""


#: An axis title that is only a unit ("ms", "(req/s)") or an index: it does not say what is measured.
BARE_AXIS = re.compile(r"\(?\s*(ms|s|%|req/s|tok/s|GiB|index|x|y|value)?\s*\)?|[\d.\s]*", re.I)
#: Plotly's own name for an unnamed trace.
PLOTLY_DEFAULT_NAME = re.compile(r"trace \d+")
#: Every tab's charts checked so far (a test of each tab adds its own): tab -> charts read.
CHECKED: dict[str, int] = {}


def honest_charts(page: Any, container: str, tab: str) -> list[dict[str, Any]]:
    """Every Plotly chart in ``container`` as a person reads it, failing on what misleads: no
    title; an axis without a title, or one that is only a unit or an index; a trace with no
    points (an empty panel); bars at a bare index; several traces without a legend, an unnamed or
    "trace 0" entry, or a legend over the data; an empty panel without a note saying why."""
    charts = page.eval_on_selector_all(f"{container} .js-plotly-plot", READ_CHARTS)
    for c in charts:
        where = f"{tab}: chart {c['key']!r} ({c['title']!r})"
        assert c["title"].strip(), f"{where}: no title"
        for axis in ("x", "y"):
            assert c[axis].strip() and not BARE_AXIS.fullmatch(c[axis].strip()), (
                f"{where}: {axis} axis {c[axis]!r}"
            )
        assert c["traces"] and all(t["x"] for t in c["traces"]), f"{where}: an empty panel"
        for tr in c["traces"]:
            bare = len(tr["x"]) > 1 and tr["x"] == list(range(len(tr["x"])))
            assert not (tr["type"] == "bar" and bare), f"{where}: bars at a bare index {tr['x']}"
        if c["legend"] or len(c["traces"]) > 1:
            names = [t["name"].strip() for t in c["traces"]]
            assert c["legend"] and all(names), f"{where}: a legend naming every series {names}"
            assert not any(PLOTLY_DEFAULT_NAME.fullmatch(n) for n in names), f"{where}: {names}"
            assert c["legend_y"] < 0 or c["legend_x"] > 1, f"{where}: the legend sits over the data"
    assert page.locator(f"{container} .chart:empty").count() == 0, f"{tab}: an empty panel"
    for note in page.locator(f"{container} .chart-empty").all_inner_texts():  # said in a line, not drawn
        assert re.fullmatch(r".+: (no samples|no data|zero throughout the run)", note), f"{tab}: {note}"
    CHECKED[tab] = CHECKED.get(tab, 0) + len(charts)
    return charts


def test_run_charts_have_titles_axis_titles_and_legends_and_no_bare_index(page: Any) -> None:
    upload_and_run(page)
    run_simulation(page, 8)
    charts = honest_charts(page, "#run-results", "Run")
    assert len(charts) >= 9, [c["key"] for c in charts]
    assert honest_charts(page, "#trace-summary", "Traces")
    for c in charts:
        where = f"chart {c['key']!r} ({c['title']!r})"
        assert c["title"].strip(), where
        for axis in ("x", "y"):  # an axis title names the quantity; never empty, never a bare number
            assert c[axis].strip() and not re.fullmatch(r"[\d.\s]*|index", c[axis]), (
                f"{where}: {axis}={c[axis]!r}"
            )
        assert all(t["x"] for t in c["traces"]), f"{where}: an empty panel"
        for tr in c["traces"]:  # bars at x = 0, 1, 2 ... stand for categories: they need their names
            bare = len(tr["x"]) > 1 and tr["x"] == list(range(len(tr["x"])))
            assert not (tr["type"] == "bar" and bare), f"{where}: bars at a bare index {tr['x']}"
        if c["legend"] or len(c["traces"]) > 1:  # several traces: a legend, each entry named, off the data
            assert c["legend"] and all(t["name"].strip() for t in c["traces"]), where
            assert c["legend_y"] < 0 or c["legend_x"] > 1, f"{where}: the legend sits over the data"
    by_key = {c["key"]: c for c in charts}
    split = by_key["latency_split"]
    assert split["xtype"] == "category" and split["x"] == "phase" and split["y"] == "time in the phase (ms)"
    assert [t["name"] for t in split["traces"]] == ["p50", "p99", "mean"]
    assert all(t["x"] == ["queue", "prefill", "decode"] for t in split["traces"])
    assert "p50 and p99" in split["title"]
    tokens = by_key["num_tokens"]  # a distribution of tokens per step, not a line over time
    assert [t["type"] for t in tokens["traces"]] == ["bar"] and tokens["y"] == "steps"
    assert tokens["x"] == "step size (tokens)"
    marked = [a for a in tokens["annotations"] if a.startswith("max_num_batched_tokens ")]
    assert len(marked) == 1  # the budget, marked where it is, and the mean against it in the title
    budget = int(marked[0].split()[1].replace(",", ""))
    assert budget in tokens["shapes"] and max(max(t["x"]) for t in tokens["traces"]) < budget
    mean = re.search(rf"tokens per step: mean ([\d,]+) of a {budget:,} budget", tokens["title"])
    assert mean and int(mean[1].replace(",", "")) < budget
    assert "num_tokens" not in [k for k, c in by_key.items() if c["traces"][0]["type"] == "scatter"]
    ttft = by_key["ttft_ms"]
    assert ttft["x"] == "TTFT (ms)" and ttft["y"] == "requests"
    # a whole number reads as one (max_num_seqs 8 in a diff, a progress count), not "8.00"
    assert page.evaluate("[SS.fmt(8), SS.fmt(12000), SS.fmt(8.5), SS.fmt(8, 'float', 1)]") == [
        "8",
        "12,000",
        "8.50",
        "8.0",
    ]
    assert page.locator("#run-results .chart:empty").count() == 0  # no empty panel
    for note in page.locator("#run-results .chart-empty").all_inner_texts():  # said in a line, not drawn
        assert re.fullmatch(r".+: (no samples|no data|zero throughout the run)", note), note
    charts_box = page.locator("#run-results [data-section='simulation'] .charts")
    charts_box.scroll_into_view_if_needed()
    charts_box.screenshot(path=str(IMAGES / "run-charts.png"))


def test_one_deployment_and_one_slo_serve_every_tab_and_survive_a_reload(page: Any, server: str) -> None:
    """Model, GPU, TP, a flag and an SLO set once: Tune's baseline is that configuration, the
    throughput curve draws that SLO, the advisor answers for that deployment, each result says
    so, and a reload restores the panels (issue 27)."""
    import json

    page.click("#tab-run")
    page.select_option("#dep-model", "qwen2.5-7b")
    page.select_option("#dep-gpu", "a100-80gb")
    page.fill("#dep-tp", "2")
    page.fill("#eng-max_num_seqs", "48")
    page.fill("#slo-ttft_p99_ms", "20000")
    page.fill("#slo-tpot_p99_ms", "1000")
    want = (
        "Deployment: qwen2.5-7b on 2 × a100-80gb, max_num_seqs 48 · SLO: ttft_p99_ms=20000,tpot_p99_ms=1000"
    )
    for tab in ("sweep", "tune", "advise", "measured"):  # one panel, shown in each tab's form column
        page.click(f"#tab-{tab}")
        assert page.locator(f"#panel-{tab} #deployment-panel").is_visible()
        assert page.locator("#dep-model").count() == 1 and page.input_value("#dep-model") == "qwen2.5-7b"
    assert page.locator("#panel-measured #slo-panel").count() == 0  # the overlay has no SLO

    page.click("#tab-tune")
    assert page.input_value("#slo-ttft_p99_ms") == "20000"
    page.fill("#tune-trials", "2")
    page.fill("#tune-verify", "1")
    page.fill("#tune-trial-seeds", "1")
    page.fill("#tune-space", json.dumps(SMALL_SPACE))
    page.click("#tune-submit")
    wait_for_answer(page, "tune", ".run-settings")
    assert page.text_content("#tune-results .run-settings") == want
    page.wait_for_selector("#tune-results table[data-key='baseline'] tbody tr")
    first = page.locator("#tune-results table[data-key='baseline'] tbody tr").first.locator("td")
    assert first.first.inner_text() == "your configuration"  # the panels' deployment is the baseline
    assert "your configuration" in (
        page.text_content("#tune-results table[data-key='baseline'] caption") or ""
    )

    page.click("#tab-sweep")
    page.fill("#sweep-seeds", "1")
    page.click("#sweep-submit")
    wait_for_answer(page, "sweep", "[data-key='ttft_ms_curve'] .main-svg")
    assert page.text_content("#sweep-results .run-settings") == want
    notes = page.eval_on_selector(
        "#sweep-results [data-key='ttft_ms_curve']", "e => (e.layout.annotations || []).map(a => a.text)"
    )
    assert "SLO TTFT p99 20,000 ms" in notes  # the SLO line on the curve

    page.click("#tab-advise")
    page.select_option("#advise-task", "batching")
    page.select_option("#advise-advisor", "rules")
    page.fill("#advise-optimize", "0")
    page.click("#advise-submit")
    page.wait_for_selector("#advice-card .run-settings", timeout=120_000)
    assert page.text_content("#advice-card .run-settings") == want

    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    page.click("#tab-tune")
    restored = {i: page.input_value(i) for i in ("#dep-model", "#dep-gpu", "#dep-tp", "#eng-max_num_seqs")}
    assert restored == {
        "#dep-model": "qwen2.5-7b",
        "#dep-gpu": "a100-80gb",
        "#dep-tp": "2",
        "#eng-max_num_seqs": "48",
    }
    assert page.input_value("#slo-ttft_p99_ms") == "20000" and page.input_value("#slo-tpot_p99_ms") == "1000"
    assert page.locator("#panel-tune #slo-panel").is_visible()

    # a run stored with the older body (engine + hardware, slo in ttft_ms): "load these settings"
    traces = httpx.get(server + "/api/traces", timeout=30).json()
    old = {
        "trace_id": traces[0]["id"],
        "engine": {"max_num_seqs": 24},
        "hardware": {"gpu": "l4", "tensor_parallel_size": 1},
        "slo": {"ttft_ms": 700},
        "label": "an older body",
    }
    r = httpx.post(server + "/api/simulate", json=old, timeout=30, headers={"Origin": server})
    assert r.status_code == 202, r.text
    job = f"{server}/api/jobs/{r.json()['id']}"
    wait_until(lambda: httpx.get(job, timeout=30).json()["status"] == "done", 90, "the old-body run finished")
    page.click("#tab-history")
    page.wait_for_selector("#history-table tbody tr:has-text('an older body')")
    page.locator("#history-table tbody tr", has_text="an older body").locator(
        "button", has_text="Open"
    ).click()
    page.wait_for_selector("#run-results .run-settings")
    assert page.text_content("#run-results .run-settings") == (
        "Deployment: llama-3.1-8b on 1 × l4, max_num_seqs 24 · SLO: ttft_p99_ms=700"
    )
    page.click("#load-settings")
    assert page.input_value("#dep-gpu") == "l4" and page.input_value("#eng-max_num_seqs") == "24"
    assert page.input_value("#dep-model") == "llama-3.1-8b" and page.input_value("#dep-tp") == "1"
    assert page.input_value("#slo-ttft_p99_ms") == "700" and page.input_value("#slo-tpot_p99_ms") == ""


def _done_runs(page: Any, kind: str) -> int:
    import httpx

    runs = httpx.get(page.url.split("#")[0].rstrip("/") + f"/api/runs?kind={kind}", timeout=30).json()
    return sum(r["status"] == "done" for r in runs)


def _sweep(page: Any, max_num_seqs: str) -> None:
    """A sweep from the Throughput curve tab with the Run tab's max_num_seqs, waited for."""
    before = _done_runs(page, "saturate")
    page.click("#tab-run")
    page.fill("#eng-max_num_seqs", max_num_seqs)
    page.click("#tab-sweep")
    page.fill("#sweep-seeds", "1")
    page.click("#sweep-submit")
    wait_until(lambda: _done_runs(page, "saturate") > before, 180, "the sweep finished", every_s=1)
    page.wait_for_selector("#sweep-results [data-section='saturation'] .js-plotly-plot", timeout=120_000)


def test_two_sweeps_compared_and_two_kinds_refused(page: Any) -> None:
    """Issue 30.2: A/B of two sweeps overlays their curves and compares the saturation points; a
    sweep against a simulation is refused with a message naming both kinds."""
    _sweep(page, "256")
    _sweep(page, "4")
    page.click("#tab-compare")
    page.wait_for_selector("#compare-a option", state="attached")
    sweeps = page.eval_on_selector_all(
        "#compare-a option", "os => os.filter(o => o.textContent.includes('saturate: ')).map(o => o.value)"
    )
    assert len(sweeps) >= 2
    page.select_option("#compare-a", sweeps[1])
    page.select_option("#compare-b", sweeps[0])
    page.click("#compare-form button[type='submit']")
    page.wait_for_selector("#compare-results [data-section='sweep_compare'] .js-plotly-plot >> nth=1")
    points = page.eval_on_selector_all(
        "#compare-results table[data-key='saturation_points'] tbody tr", "rs => rs.map(r => r.innerText)"
    )
    assert any(r.startswith("unstable from, req/s") for r in points), points
    heads = page.eval_on_selector_all(
        "#compare-results table[data-key='saturation_points'] thead th", "hs => hs.map(h => h.innerText)"
    )
    assert heads[0] == "figure" and heads[1].startswith("A: ") and heads[2].startswith("B: ")
    assert heads[3] == "B / A"  # the ratio
    curves = {c["key"]: c for c in honest_charts(page, "#compare-results", "Compare sweeps")}
    ttft = curves["ttft_p99_sweeps"]
    assert ttft["x"] == "offered load (req/s)" and ttft["y"] == "TTFT p99 (ms)"
    assert [t["name"][:3] for t in ttft["traces"]] == ["A: ", "B: "]
    names = [t["name"] for t in ttft["traces"]]  # title (digest): the title starts with the trace
    assert all(re.fullmatch(r"[AB]: .+: saturation sweep \(\S+\)", n) for n in names), names
    box = page.locator("#compare-results [data-section='sweep_compare']")
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(IMAGES / "compare-sweeps.png"))
    sims = page.eval_on_selector_all(
        "#compare-b option",
        "os => os.filter(o => !/(saturate|tune): /.test(o.textContent)).map(o => o.value)",
    )
    if not sims:  # a simulation to set against the sweep
        page.click("#tab-run")
        page.click("#run-button")
        page.wait_for_selector("#run-job .line[data-status='done']", timeout=120_000)
        page.click("#tab-compare")
        # the run lists are refreshed after the tab opens: wait for the new run's option itself
        page.wait_for_function(
            """() => [...document.querySelectorAll('#compare-b option')]
                     .some(o => !/(saturate|tune): /.test(o.textContent))""",
            timeout=60_000,
        )
        sims = page.eval_on_selector_all(
            "#compare-b option",
            "os => os.filter(o => !/(saturate|tune): /.test(o.textContent)).map(o => o.value)",
        )
    page.select_option("#compare-a", sweeps[0])
    page.select_option("#compare-b", sims[0])
    page.click("#compare-form button[type='submit']")
    page.wait_for_selector("#compare-results [role='alert']")
    text = page.text_content("#compare-results [role='alert']") or ""
    assert "A is a saturate run and B a simulate run: these cannot be compared" in text, text


def _cdf_median(trace: dict[str, Any]) -> float:
    """Where a CDF trace (as drawn) first reaches one half: the run's p50 read off the chart."""
    return float(next(x for x, y in zip(trace["x"], trace["y"], strict=True) if y >= 0.5))


def test_speculative_decoding_on_the_run_tab_restored_and_compared_with_it_off(page: Any) -> None:
    """Issue 33: the Run tab's "Speculative decoding" group sends vLLM's --speculative-config
    object; the result shows accepted tokens per step (tile and series), the acceptance rate
    measured; a reload restores the group; a bad rate is refused naming the field; the same trace
    with speculation off compares in the Compare tab, whose TPOT CDF names both runs."""
    upload_and_run(page)  # 200 short requests at 20 req/s: a light load
    page.click("#tab-run")
    page.fill("#eng-max_num_seqs", "64")
    assert page.input_value("#spec-method") == "" and page.is_disabled("#spec-k")  # off by default
    page.select_option("#spec-method", "eagle3")
    assert "eagle3: 0.8, 0.75, 0.72" in (page.text_content("#spec-acceptance-help") or "")  # its preset
    page.fill("#spec-k", "3")
    page.fill("#spec-acceptance", "1.5")
    EXPECTED.append("status of 422 (Unprocessable Entity)")  # the refused rate itself
    page.click("#run-button")
    refused = page.locator("#run-job [role='alert'], #run-results [role='alert']").first
    refused.wait_for()
    assert "speculative_config.acceptance_rates: at least one rate, each in [0, 1]" in refused.inner_text()
    page.fill("#spec-acceptance", "0.8, 0.7, 0.6")
    page.click("#run-button")
    tile = page.locator("#run-results .kpi[data-key='accepted_tokens_per_step']")
    tile.wait_for()
    assert "k = 3" in tile.inner_text()
    per_step = float((tile.locator(".value").text_content() or "").split()[0])
    assert 1.0 < per_step < 4.0  # 1 + accepted drafts per verification
    rate = page.text_content("#run-results .kpi[data-key='spec_acceptance_rate'] .value") or ""
    assert 0 < float(rate.split()[0].rstrip("%")) < 100
    assert "speculative eagle3 k=3 acceptance 0.8,0.7,0.6" in (
        page.text_content("#run-results .run-settings") or ""
    )
    page.wait_for_selector("#run-results [data-key='accepted_tokens_per_step'].js-plotly-plot")
    charts = {c["key"]: c for c in honest_charts(page, "#run-results", "Run")}
    line = charts["accepted_tokens_per_step"]
    assert line["title"].startswith(f"accepted tokens per verifying step (run {per_step:.2f}, k = 3)")
    assert line["y"] == "tokens per step (tokens)" and line["x"] == "time (s)"
    assert all(1.0 <= y <= 4.0 for t in line["traces"] for y in t["y"])
    tile.scroll_into_view_if_needed()
    shot(page, "run-speculative.png")
    page.reload()  # the run's settings come back, the group with them
    page.wait_for_selector("body[data-ready='1']")
    page.click("#tab-run")
    page.wait_for_selector("#run-results .kpi[data-key='accepted_tokens_per_step']")
    assert page.input_value("#spec-method") == "eagle3" and page.input_value("#spec-k") == "3"
    assert page.input_value("#spec-acceptance") == "0.8, 0.7, 0.6"
    page.select_option("#spec-method", "")  # the same trace, speculation off
    page.click("#run-button")
    page.wait_for_selector("#run-results .kpi[data-key='accepted_tokens_per_step']", state="detached")
    page.wait_for_selector("#run-results .kpi[data-key='tpot_ms_p99']")
    assert "speculative" not in (page.text_content("#run-results .run-settings") or "")
    page.click("#tab-compare")
    page.wait_for_selector("#compare-a option", state="attached")
    page.click("#compare-form button[type='submit']")  # A: the speculating run, B: the one without
    page.wait_for_selector("#compare-results [data-section='runs_overlay'] .js-plotly-plot >> nth=3")
    diff = page.locator(
        "#compare-results table[data-key='config_diff'] tbody tr", has_text="speculative_config.method"
    )
    assert diff.first.locator("td").all_inner_texts() == ["speculative_config.method", "eagle3", "–"]
    overlaid = {c["key"]: c for c in honest_charts(page, "#compare-results", "Compare")}
    cdf = overlaid["tpot_ms_cdf_overlay"]
    assert cdf["x"] == "TPOT (ms)"
    names = [t["name"] for t in cdf["traces"]]
    assert len(names) == 2 and names[0].startswith("A: ") and names[1].startswith("B: "), names
    assert "eagle3 k=3" in names[0] and "eagle3" not in names[1]  # the run's title says it speculates
    tput = overlaid["output_tokens_per_s_overlay"]  # both runs emit the same tokens at one arrival rate
    means = [sum(t["y"]) / len(t["y"]) for t in tput["traces"]]
    assert means[0] > 0.8 * means[1] > 0, means
    on, off = (_cdf_median(t) for t in cdf["traces"])
    assert on < off, (on, off)  # light load: more tokens per step, a shorter time per output token
    itl = overlaid["itl_ms_cdf_overlay"]  # the token gaps of both runs, on one chart
    assert itl["y"] == "share of token gaps at or below" and len(itl["traces"]) == 2
    box = page.locator("#compare-results [data-section='runs_overlay']")
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(IMAGES / "compare-speculation.png"))


def test_tune_tab_shows_no_empty_table_and_names_trials_and_flags_as_the_verdict_reads(page: Any) -> None:
    """Issue 46 item 9g and 9f: the Tune tab hides tables with no row, names the trials as the
    verdict reads (never a bare "best"), lists the importance by vllm serve flag; then the Compare
    tab preselects only two runs of one kind, and a study against a simulation is refused on the
    page in words naming both kinds. The form starts from servesim tune's own defaults (one
    question, one answer: trials, seeds per trial, verification seeds, pruning)."""
    page.click("#tab-tune")
    shown = [page.input_value(f"#tune-{x}") for x in ("trials", "trial-seeds", "verify", "pruning")]
    assert shown == ["40", "2", "3", "none"], shown  # servesim tune --help says the same
    page.fill("#tune-trials", "4")
    page.fill("#tune-verify", "1")
    page.fill("#tune-trial-seeds", "1")
    page.fill("#slo-ttft_p99_ms", "5000")
    page.fill("#tune-space", __import__("json").dumps(SMALL_SPACE))
    page.click("#tune-submit")
    page.wait_for_selector("#recommendation-card", timeout=180_000)
    page.wait_for_selector("#trial-chooser")
    for table in page.locator("#tune-results table").all():  # no empty table is shown
        assert table.locator("tbody tr").count() > 0, table.inner_text()
    captions = page.locator("#tune-results table caption").all_inner_texts()
    assert not any(c.startswith("what each trial broke") for c in captions), captions
    verdict = page.text_content("#tune-results [data-section='recommendation']") or ""
    options = page.locator("#trial-pick option").all_inner_texts()
    assert options and not any("(best)" in o for o in options), options
    if "Keep" in verdict or "keep" in verdict:
        top = options[0]
        assert "(kept: the verdict keeps these settings)" in top or "not recommended" in top, (top, verdict)
    flags = page.locator(
        "#tune-results table[data-key='importance'] tbody tr td:first-child"
    ).all_inner_texts()
    assert flags and all(f.startswith("--") or f in ("replicas", "gateway queue timeout") for f in flags), (
        flags
    )
    run_simulation(page, 64)  # the newest run is a simulation, the one before a study
    page.click("#tab-compare")
    page.wait_for_selector("#compare-a option", state="attached")
    chosen = [
        page.eval_on_selector(
            f"#compare-{x}", "s => s.selectedIndex < 0 ? '' : s.options[s.selectedIndex].text"
        )
        for x in ("a", "b")
    ]
    kinds = {
        ("tune" if c.split(" ", 1)[-1].startswith("tune: ") else "saturate" if "saturate: " in c else "sim")
        for c in chosen
        if c
    }
    assert len(kinds) <= 1 and (all(chosen) or not any(chosen)), chosen  # one kind, or none chosen
    tunes = page.eval_on_selector_all(
        "#compare-a option", "os => os.filter(o => o.textContent.includes(' tune: ')).map(o => o.value)"
    )
    sims = page.eval_on_selector_all(
        "#compare-b option",
        "os => os.filter(o => !/(saturate|tune): /.test(o.textContent)).map(o => o.value)",
    )
    page.select_option("#compare-a", tunes[0])
    page.select_option("#compare-b", sims[0])
    page.click("#compare-form button[type='submit']")
    alert = page.locator("#compare-results [role='alert']")
    alert.wait_for()
    assert "A is a tune run and B a simulate run: these cannot be compared" in alert.inner_text()
