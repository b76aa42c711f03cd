"""The schedule recommendation report: the commands' ``--json`` results rendered as one
self-contained HTML file, Markdown and (on request) PDF, from the presentation-neutral views.

    from servesim.report import write_report
    write_report(["run.json", "sweep.json", "study.json"], "out/", formats=["html", "md"])

``servesim report A B`` (two results of the same kind) writes a diff instead (``diff.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servesim.errors import shown
from servesim.io import write_text_atomic
from servesim.report.build import Report, build_report, read_inputs
from servesim.report.documents import Document, ReportInputError, read_document, simulation_document

FORMATS = ("html", "md", "pdf")
BASENAME = "report"


def check_formats(formats: Sequence[str]) -> list[str]:
    out = []
    for f in formats:
        name = f.strip().lower().removeprefix(".")
        name = {"markdown": "md", "htm": "html"}.get(name, name)
        if name not in FORMATS:
            raise ReportInputError(f"--format {shown(f)}: use html, md or pdf (comma-separated)")
        if name not in out:
            out.append(name)
    if not out:
        raise ReportInputError("--format: give at least one of html, md, pdf")
    return out


def existing_outputs(out_dir: str | Path, formats: Sequence[str], name: str = BASENAME) -> list[Path]:
    """The report files ``write_rendered`` would replace in ``out_dir`` (a previous report)."""
    return [p for f in check_formats(formats) if (p := Path(out_dir) / f"{name}.{f}").exists()]


def write_rendered(
    report: Report, out_dir: str | Path, formats: Sequence[str], name: str = BASENAME
) -> list[Path]:
    """Write ``report`` in each format into ``out_dir`` (the PDF is printed from the HTML)."""
    from servesim.io import output_transaction

    fmts = check_formats(formats)
    with output_transaction():  # all the formats, or none when one fails
        return _write_formats(report, Path(out_dir), fmts, name)


def _write_formats(report: Report, folder: Path, fmts: Sequence[str], name: str) -> list[Path]:
    from servesim.report.html import render_html
    from servesim.report.markdown import render_markdown

    written = []
    html = render_html(report) if "html" in fmts or "pdf" in fmts else ""
    if "html" in fmts:
        written.append(write_text_atomic(folder / f"{name}.html", html))
    if "md" in fmts:
        written.append(write_text_atomic(folder / f"{name}.md", render_markdown(report)))
    if "pdf" in fmts:
        import tempfile

        from servesim.report.pdf import print_pdf

        # Chromium prints from a private copy of the HTML: the report's own files may still be
        # staged (``servesim.io.output_transaction``), and a failed print leaves no HTML behind.
        with tempfile.TemporaryDirectory(prefix="servesim-report-") as tmp:
            source = Path(tmp) / f"{name}.html"
            source.write_text(html, encoding="utf-8")
            written.append(print_pdf(source, folder / f"{name}.pdf"))
    return written


def write_report(
    inputs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    formats: Sequence[str] = ("html", "md"),
    base: str | Path | None = None,
    command_line: str = "servesim report",
    compare: bool = True,
) -> list[Path]:
    """Read the inputs, build the report, write it; returns the paths written."""
    report = build_report(read_inputs(inputs, base), command_line=command_line, compare=compare)
    return write_rendered(report, out_dir, formats)


__all__ = [
    "FORMATS",
    "Document",
    "Report",
    "ReportInputError",
    "build_report",
    "check_formats",
    "read_document",
    "read_inputs",
    "simulation_document",
    "write_rendered",
    "write_report",
]
