"""The report as PDF, printed from its own HTML by headless Chromium (Playwright).

Why Chromium: the PDF is the HTML a reader sees, charts included, with the print stylesheet
(a page per part). Debian's ``/usr/bin/chromium`` is used (``$SERVESIM_CHROMIUM`` overrides);
Playwright never downloads a browser here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from servesim.errors import ServesimError
from servesim.io import staged_path

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


#: A4 less the margins below, in CSS pixels (96 per inch): the page lays out (and Plotly sizes
#: every chart) at the printable width, so nothing is cut at the right edge.
PRINT_WIDTH_PX = round((210 - 24) / 25.4 * 96)


class BrowserMissingError(ServesimError):
    """No Chromium to print with."""


class PdfError(ServesimError):
    """Chromium did not start or did not print: one line, no Playwright traceback."""


def chromium_path() -> str:
    path = os.environ.get("SERVESIM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise BrowserMissingError(
            f"printing the PDF needs Chromium ({path} not found): install it (apt-get install chromium) "
            "or set SERVESIM_CHROMIUM; the HTML and Markdown reports need nothing"
        )
    return path


def print_pdf(html_path: Path, pdf_path: Path, *, timeout_s: float = 60.0) -> Path:
    """Open ``html_path`` in headless Chromium, wait for its charts, print it to ``pdf_path``
    (through a temporary name: no PDF, or a part of one, is left when printing fails)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    try:
        with sync_playwright() as pw, staged_path(pdf_path) as tmp:
            browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": PRINT_WIDTH_PX, "height": 900})
                page.emulate_media(media="print")
                page.goto(html_path.resolve().as_uri(), timeout=timeout_s * 1000)
                if page.locator("#chart-data").count():
                    page.wait_for_function(
                        "window.servesimChartsReady !== undefined", timeout=timeout_s * 1000
                    )
                page.pdf(
                    path=str(tmp),
                    format="A4",
                    print_background=True,
                    margin={"top": "14mm", "bottom": "14mm", "left": "12mm", "right": "12mm"},
                )
            finally:
                browser.close()
    except PlaywrightError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("=")]
        why = lines[0] if lines else type(exc).__name__
        raise PdfError(f"{pdf_path}: printing the PDF with Chromium ({executable}) failed: {why}") from None
    return pdf_path


__all__ = ["CHROMIUM_ARGS", "PRINT_WIDTH_PX", "BrowserMissingError", "PdfError", "chromium_path", "print_pdf"]
