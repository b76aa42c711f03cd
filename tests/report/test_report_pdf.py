"""The PDF as printed: page 1 holds the verdict sentence and the command; every table column's
heading is in the text (none dropped); in the print-emulated page at the printable width no chart
or table reaches past the page's right edge (nothing clipped)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from servesim.report import build_report, read_inputs, write_rendered
from servesim.report.build import all_tables
from servesim.report.pdf import CHROMIUM_ARGS, PRINT_WIDTH_PX, chromium_path
from servesim.views.format import header

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's Chromium"),
    pytest.mark.skipif(shutil.which("pdftotext") is None, reason="needs poppler-utils"),
]


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory, example_docs: list[Path]) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("pdf")
    report = build_report(read_inputs(example_docs), command_line="servesim report (test)")
    write_rendered(report, out, ["html", "pdf"])
    return out, report


def _text(pdf: Path, first: int | None = None, last: int | None = None) -> str:
    pages = [*(["-f", str(first)] if first else []), *(["-l", str(last)] if last else [])]
    return subprocess.run(
        ["pdftotext", *pages, str(pdf), "-"], check=True, capture_output=True, text=True
    ).stdout


def test_page_one_has_the_verdict_and_the_command(printed) -> None:
    out, report = printed
    page1 = " ".join(_text(out / "report.pdf", 1, 1).split())
    assert report.lead is not None
    assert " ".join(report.lead.sentence.split()[:6]) in page1  # the verdict sentence
    assert "vllm serve" in page1 and "--max-num-seqs" in page1  # the command, on page 1
    png = out / "p1"
    subprocess.run(
        ["pdftoppm", "-r", "30", "-png", "-f", "1", "-l", "1", str(out / "report.pdf"), str(png)], check=True
    )
    assert any(out.glob("p1*.png"))  # page 1 renders (not blank: it has the verdict text above)


def test_every_table_column_is_in_the_pdf(printed) -> None:
    out, report = printed
    text = " ".join(_text(out / "report.pdf").split())
    for t in all_tables(report):
        if not t.rows:
            continue
        for c in t.columns:
            label = header(c).split()[0] if header(c) else ""
            assert not label or label in text, f"{t.key}: column {header(c)!r} missing from the PDF"


def test_no_chart_or_table_past_the_printable_width(printed) -> None:
    from playwright.sync_api import sync_playwright

    out, _ = printed
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": PRINT_WIDTH_PX, "height": 900})
        page.emulate_media(media="print")
        page.goto((out / "report.html").as_uri())
        page.wait_for_function("window.servesimChartsReady !== undefined", timeout=60_000)
        too_wide = page.evaluate(
            """(w) => Array.from(document.querySelectorAll('figure, table, pre, .plot svg.main-svg'))
                 .map(e => [e.tagName + (e.dataset.table || e.dataset.chart || ''),
                            e.getBoundingClientRect().right])
                 .filter(([_, right]) => right > w + 1)""",
            PRINT_WIDTH_PX,
        )
        b.close()
    assert too_wide == []
