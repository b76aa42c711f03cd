"""The report as Markdown, for pull requests and wikis: the same tables and figures as the HTML
(charts summarised in words: points, range, the SLO line), every definition listed at the end.
Byte-identical for the same inputs (no time stamp, no machine path, stable order)."""

from __future__ import annotations

from servesim.report.build import Report, ReportPart
from servesim.report.glossary_terms import definition
from servesim.views.format import command_lines, fmt, header, kpi_value
from servesim.views.model import Histogram, Kpi, Section, Series, Table

MARK = {"pass": "✓", "fail": "✗", "none": ""}
STATUS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "info": "note"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(x: float | None, unit: str | None = None) -> str:
    if x is None:
        return "-"
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"
    return text + (f" {unit}" if unit else "")


class _Terms:
    """The definitions a report used, in first-use order (for the Definitions section)."""

    def __init__(self) -> None:
        self.terms: dict[str, str] = {}

    def use(self, label: str, key: str, help_text: str | None) -> str:
        d = definition(key, help_text)
        if d and label not in self.terms:
            self.terms[label] = d
        return label


def kpi_strip(kpis: list[Kpi], terms: _Terms) -> list[str]:
    if not kpis:
        return []
    head = [_cell(terms.use(k.label, k.key, k.help)) for k in kpis]
    vals = []
    for k in kpis:
        v = kpi_value(k)
        if k.slo is not None:
            v += f" {MARK[k.verdict]} (SLO {k.slo:,g})".replace("  ", " ")
        vals.append(_cell(v))
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(kpis), "| " + " | ".join(vals) + " |", ""]


def table_md(t: Table, terms: _Terms) -> list[str]:
    if not t.rows:  # never an empty table
        return [f"{_cell(t.title)}: none", ""]
    out = [f"**{_cell(t.title)}**", ""]
    heads = [_cell(terms.use(header(c), c.key, c.help)) for c in t.columns]
    align = ["---:" if c.kind in ("int", "float", "pct") else "---" for c in t.columns]
    out.append("| " + " | ".join(heads) + " |")
    out.append("|" + "|".join(align) + "|")
    for row in t.rows:
        out.append("| " + " | ".join(_cell(fmt(v, c)) for v, c in zip(row, t.columns, strict=True)) + " |")
    out += [f"_{_cell(n)}_" for n in t.notes]
    out.append("")
    return out


def series_md(s: Series) -> str:
    if not s.x:
        return f"- {s.title}: no data"
    if s.categories and len(s.categories) == len(s.y):  # one figure per category, each line named
        named = [(s.name or s.y_label, s.y), *((ln.label, ln.y) for ln in s.lines)]
        parts = [
            f"{c} " + ", ".join(f"{n} {_num(y[i], s.y_unit)}" for n, y in named)
            for i, c in enumerate(s.categories)
        ]
        return f"- {s.title}: " + "; ".join(parts)
    ref = ""
    if s.reference is not None:
        ref = f"; {s.reference_label or 'limit'} {_num(s.reference, s.y_unit)}"
    line = (
        f"- {s.title}: {len(s.x):,} points, {s.x_label} {_num(min(s.x))}-{_num(max(s.x), s.x_unit)}, "
        f"{s.y_label} {_num(min(s.y))}-{_num(max(s.y), s.y_unit)}{ref}"
    )
    own = [ln for ln in s.lines if ln.x]  # other runs overlaid on their own x: each one's range
    if own:
        runs = [(s.name or s.y_label, s.x, s.y), *((ln.label, ln.x or [], ln.y) for ln in own)]
        line = (
            f"- {s.title} ({s.x_label}, {s.y_label}): "
            + "; ".join(
                f"{n}: {s.x_label} {_num(min(x))}-{_num(max(x), s.x_unit)}, "
                f"{s.y_label} {_num(min(y))}-{_num(max(y), s.y_unit)}"
                for n, x, y in runs
            )
            + ref
        )
    return line


def histogram_md(h: Histogram) -> str:
    q = ", ".join(
        f"{n} {_num(v, h.unit)}" for n, v in (("p50", h.p50), ("p90", h.p90), ("p99", h.p99)) if v is not None
    )
    slo = f"; SLO {_num(h.slo, h.unit)}" if h.slo is not None else ""
    if h.reference is not None:
        slo += f"; {h.reference_label or 'limit'} marked"
    return (
        f"- {h.title}: {h.count:,} {h.count_label} in {len(h.counts)} bins" + (f" ({q})" if q else "") + slo
    )


def section_md(s: Section, terms: _Terms) -> list[str]:
    out = [f"### {s.title}", ""]
    if s.kpis:
        out += kpi_strip(s.kpis, terms)
    for v in s.verdicts:
        out.append(f"- **{STATUS[v.status]}** {v.label}: {_cell(v.text)}")
    if s.verdicts:
        out.append("")
    for line in s.text:
        out.append(line)
        out.append("")
    for t in s.tables:
        out += table_md(t, terms)
    charts = [series_md(x) for x in s.series] + [histogram_md(h) for h in s.histograms]
    if charts:
        out += ["Charts (drawn in the HTML report):", "", *charts, ""]
    return out


def part_md(i: int, p: ReportPart, terms: _Terms) -> list[str]:
    out = [f"## {i}. {p.title}", "", f"From `{p.source}` ({p.kind}).", ""]
    for cmd in p.commands:
        out += ["```bash", command_lines(cmd), "```", ""]
    for s in p.sections:
        out += section_md(s, terms)
    if p.caveats:
        out += ["Caveats:", ""] + [f"- {_cell(c)}" for c in p.caveats] + [""]
    return out


def render_markdown(report: Report) -> str:
    terms = _Terms()
    out = [f"# {report.title}", ""]
    if report.lead is not None:  # the verdict first, then the command
        out += [f"**{_cell(report.lead.sentence)}**", ""]
        if report.lead.command:
            out += ["```bash", command_lines(report.lead.command), "```", ""]
    for g in report.kpis:
        out += [f"**{_cell(g.title)}**", "", *kpi_strip(g.kpis, terms)]
    out += ["Contents: " + " · ".join(f"{i}. {p.title}" for i, p in enumerate(report.parts, 1)), ""]
    for i, p in enumerate(report.parts, 1):
        out += part_md(i, p, terms)
    if terms.terms:
        out += (
            ["## Definitions", ""] + [f"- **{_cell(k)}**: {_cell(v)}" for k, v in terms.terms.items()] + [""]
        )
    pv = report.provenance
    out += [
        "## Provenance",
        "",
        f"- servesim {pv.servesim_version}",
        f"- command: `{pv.command_line}`",
        "",
        "| input | kind | sha256 | seeds |",
        "|---|---|---|---|",
    ]
    for ref in pv.inputs:
        seeds = ", ".join(map(str, pv.seeds.get(ref.name, []))) or "-"
        out.append(f"| `{_cell(ref.name)}` | {ref.kind} | `{ref.digest.removeprefix('sha256:')}` | {seeds} |")
    out.append("")
    return "\n".join(out)


__all__ = ["render_markdown"]
