"""The HTML report in real headless Chromium: every chart drawn with data, no console error,
the key tables and the KPI strip readable with JavaScript off, works from disk; the PDF printed
from it holds the headline figures on the expected pages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servesim.report import build_report, read_inputs, write_rendered
from servesim.report.pdf import CHROMIUM_ARGS, chromium_path

pytestmark = pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's Chromium")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory, example_docs: list[Path]) -> Path:
    out = tmp_path_factory.mktemp("report")
    report = build_report(read_inputs(example_docs), command_line="servesim report (test)")
    write_rendered(report, out, ["html", "pdf"])
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        b.close()


def _headline(example_docs: list[Path]) -> dict[str, float]:
    sim = json.loads(example_docs[0].read_text())["summary"]
    return {"ttft": sim["ttft_ms"]["p99"], "tpot": sim["tpot_ms"]["p99"], "goodput": sim["goodput"]}


def test_every_chart_has_data_and_the_page_has_no_console_error(
    rendered: Path, browser, example_docs
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "request",
        lambda r: (
            errors.append(f"network request {r.url}") if not r.url.startswith(("file:", "data:")) else None
        ),
    )
    page.goto((rendered / "report.html").as_uri())
    page.wait_for_function("window.servesimChartsReady !== undefined", timeout=60_000)
    figures = page.locator("figure[data-chart]").count()
    points = page.evaluate(
        """Array.from(document.querySelectorAll('figure[data-chart] .plot')).map(el => ({
             key: el.parentElement.dataset.chart,
             drawn: el.querySelectorAll('.main-svg').length,
             points: (el.data || []).reduce((n, t) => n + (t.y || []).length, 0)}))"""
    )
    assert figures >= 15 and len(points) == figures
    assert [p["key"] for p in points if p["points"] == 0 or p["drawn"] == 0] == []
    keys = {p["key"] for p in points}
    assert {"kv_usage", "preemptions", "ttft_ms", "arrival_rate", "goodput_curve", "trials"} <= keys
    assert errors == []
    h = _headline(example_docs)
    strip = page.locator("#kpis").inner_text()
    assert f"{h['ttft']:,.1f} ms" in strip and f"{h['tpot']:,.1f} ms" in strip
    page.close()


def test_key_tables_and_definitions_are_readable_without_javascript(
    rendered: Path, browser, example_docs
) -> None:
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto((rendered / "report.html").as_uri())
    h = _headline(example_docs)
    assert f"{h['ttft']:,.1f} ms" in page.locator("#kpis").inner_text()
    latency = page.locator("table[data-table=latency]").first
    assert latency.is_visible()
    assert "TTFT" in latency.inner_text() and f"{h['ttft']:,.1f}" in latency.inner_text()
    for key in ("curve", "strategies", "decisions"):
        assert page.locator(f"table[data-table={key}]").count() >= 1, key
    assert "vllm serve" in page.locator("pre").first.inner_text()
    # every KPI and the latency columns carry a "?" definition, shown on focus
    q = page.locator("#kpis .kpi .q")
    assert q.count() >= 5
    assert "first output token" in (q.first.get_attribute("data-def") or "")
    assert page.locator("table[data-table=provenance] code").count() >= 7
    ctx.close()


def test_the_pdf_has_a_page_per_part_and_the_headline_figures(rendered: Path, example_docs) -> None:
    from pypdf import PdfReader

    reader = PdfReader(str(rendered / "report.pdf"))
    text = "\n".join(page.extract_text() for page in reader.pages)
    parts = 7
    assert len(reader.pages) >= parts + 1  # the title page and one break before every part
    h = _headline(example_docs)
    assert f"{h['ttft']:,.1f} ms" in text and f"{h['goodput']:,.2f} req/s" in text
    first = reader.pages[0].extract_text()
    assert "schedule recommendation report" in first and "TTFT p99" in first
    for title in ("saturation sweep", "tuning study and recommendation", "recovery decisions", "provenance"):
        assert title in text
