"""The report as one self-contained HTML file: opens from disk, works offline, prints to PDF.

Everything is inline: the CSS, the chart data and Plotly.js itself (from the ``plotly`` wheel), so
nothing breaks when a CDN moves (GuideLLM's users saw blank pages when theirs did). The KPI strip,
every table, every verdict and each chart's caption are plain HTML, readable with JavaScript off;
every metric carries a "?" whose definition shows on hover or focus (CSS only).
"""

from __future__ import annotations

import functools
import json
import re
from html import escape
from importlib import resources
from typing import Any

from servesim.report.build import Report, ReportPart
from servesim.report.glossary_terms import definition
from servesim.views.format import command_lines, fmt, header, kpi_value
from servesim.views.model import Histogram, Kpi, Section, Series, Table

CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bg:#ffffff; --soft:#f4f6fa;
        --pass:#1a7f37; --warn:#9a6700; --fail:#cf222e; --info:#0969da; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 21px; margin: 40px 0 4px; padding-top: 8px;
     border-top: 2px solid var(--line); } h3 { font-size: 17px; margin: 24px 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.kpis { display: flex; flex-wrap: wrap; gap: 10px; margin: 8px 0 16px; }
#kpis { display: flex; flex-wrap: wrap; gap: 0 28px; }
.ktitle { font-size: 12.5px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.kpi { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 150px;
       background: var(--soft); }
.kpi .label { color: var(--muted); font-size: 13px; }
.kpi .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.kpi .slo { font-size: 12px; color: var(--muted); }
.kpi.pass { border-left: 5px solid var(--pass); } .kpi.fail { border-left: 5px solid var(--fail); }
.q { display: inline-block; position: relative; width: 16px; height: 16px; line-height: 16px;
     border-radius: 50%; background: #e4e8f0; color: var(--muted); font-size: 11px; text-align: center;
     cursor: help; margin-left: 3px; font-weight: 600; }
.q:hover::after, .q:focus::after { content: attr(data-def); position: absolute; z-index: 10; left: 0;
     top: 20px; width: 300px; padding: 8px 10px; background: #1d2330; color: #fff; font-weight: 400;
     font-size: 12.5px; line-height: 1.4; border-radius: 6px; text-align: left; white-space: normal; }
nav ol { columns: 2; margin: 8px 0 0; padding-left: 20px; }
.tablewrap { overflow-x: auto; margin: 6px 0 16px; }
table { border-collapse: collapse; font-size: 13.5px; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; vertical-align: top; }
th { background: var(--soft); text-align: left; white-space: nowrap; }
td.n, th.n { text-align: right; white-space: nowrap; }
td.t { min-width: 22em; }
.note { color: var(--muted); font-size: 13px; margin: -10px 0 14px; }
.verdict { padding: 6px 10px; border-radius: 6px; margin: 6px 0; background: var(--soft); }
.verdict b { margin-right: 6px; } .verdict.pass b { color: var(--pass); }
.verdict.warn b { color: var(--warn); }
.verdict.fail b { color: var(--fail); } .verdict.info b { color: var(--info); }
pre { background: #0f1420; color: #e6edf3; padding: 12px 14px; border-radius: 8px; overflow-x: auto;
      white-space: pre-wrap; overflow-wrap: anywhere; font-size: 13px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 14px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px; }
.plot { height: 300px; } figcaption { font-size: 12.5px; color: var(--muted); }
.caveats li, .text { color: var(--fg); }
.source { color: var(--muted); font-size: 13px; }
code { font-size: 12.5px; }
.lead { border: 1px solid var(--line); border-left: 6px solid var(--info); border-radius: 8px;
        padding: 12px 16px; margin: 12px 0 18px; background: var(--soft); }
.lead.pass { border-left-color: var(--pass); } .lead.fail { border-left-color: var(--fail); }
.nw { white-space: nowrap; } .verdict-sentence { font-size: 18px; font-weight: 600; margin: 0 0 10px; }
@media print {
  main { max-width: none; padding: 0; } h2 { break-before: page; border-top: none; }
  .charts { grid-template-columns: 1fr; } figure, .kpi, .lead { break-inside: avoid; }
  .plot { height: 260px; width: 100%; } .q { display: none; } nav { display: none; }
  .tablewrap { overflow: visible; } table { width: 100%; font-size: 8.5px; table-layout: auto; }
  th, th.n, td.n { white-space: normal; } th, td { padding: 2px 3px; }
  td.t { min-width: 0; } td code { overflow-wrap: anywhere; word-break: break-all; }
  pre { white-space: pre-wrap; word-break: normal; overflow-wrap: normal; }
}
"""

INIT_JS = """
(function () {
  var specs = JSON.parse(document.getElementById('chart-data').textContent);
  var ids = Object.keys(specs);
  var pending = ids.map(function (id) {
    return Plotly.newPlot(id, specs[id].data, specs[id].layout,
                          {displaylogo: false, responsive: true,
                           modeBarButtonsToRemove: ['select2d', 'lasso2d']});
  });
  Promise.all(pending).then(function () { window.servesimChartsReady = ids.length; });
})();
"""

COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989"]


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """Plotly.js as shipped in the ``plotly`` wheel (the report inlines it: no CDN)."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


def q(key: str, help_text: str | None) -> str:
    d = definition(key, help_text)
    if not d:
        return ""
    return f'<span class="q" tabindex="0" data-def="{escape(d)}" aria-label="{escape(d)}">?</span>'


def kpi_card(k: Kpi) -> str:
    slo = ""
    if k.slo is not None:
        mark = {"pass": "meets", "fail": "misses", "none": "vs"}[k.verdict]
        unit = " " + escape(k.unit) if k.unit else ""
        slo = f'<div class="slo">{mark} SLO {escape(f"{k.slo:,g}")}{unit}</div>'
    return (
        f'<div class="kpi {k.verdict}" data-kpi="{escape(k.key)}"><div class="label">{escape(k.label)}'
        f'{q(k.key, k.help)}</div><div class="value">{escape(kpi_value(k))}</div>{slo}</div>'
    )


def kpi_strip(kpis: list[Kpi]) -> str:
    return '<div class="kpis">' + "".join(kpi_card(k) for k in kpis) + "</div>" if kpis else ""


def table_html(t: Table) -> str:
    if not t.rows:  # never an empty table: one line says so
        return f'<p class="note none" data-table="{escape(t.key)}">{escape(t.title)}: none</p>'
    numeric = [c.kind in ("int", "float", "pct") for c in t.columns]
    long_text = [
        c.kind == "str" and any(len(str(r[j])) > 40 for r in t.rows if isinstance(r[j], str))
        for j, c in enumerate(t.columns)
    ]
    head = "".join(
        f'<th{" class=n" if n else ""} scope="col">{escape(header(c))}{q(c.key, c.help)}</th>'
        for c, n in zip(t.columns, numeric, strict=True)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=n' if n else (' class=t' if lt else '')}>{escape(fmt(v, c))}</td>"
            for v, c, n, lt in zip(row, t.columns, numeric, long_text, strict=True)
        )
        + "</tr>"
        for row in t.rows
    )
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in t.notes)
    return (
        f'<div class="tablewrap"><table data-table="{escape(t.key)}"><caption>{escape(t.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{notes}"
    )


def _axis(label: str, unit: str | None) -> dict[str, Any]:
    return {"title": {"text": f"{label} ({unit})" if unit else label}, "automargin": True, "zeroline": False}


def _layout(title: str, x: dict[str, Any], y: dict[str, Any], shapes: list[Any]) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": x,
        "yaxis": y,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "showlegend": False,
        "shapes": shapes,
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
    }


def series_spec(s: Series, color: str) -> dict[str, Any]:
    labels = s.categories
    x: list[Any] = labels if labels and len(labels) == len(s.x) else s.x
    trace: dict[str, Any] = {"x": x, "y": s.y, "name": s.name or s.y_label, "marker": {"color": color}}
    if s.kind == "bar":
        trace["type"] = "bar"
    else:
        trace["type"] = "scatter"
        trace["mode"] = "markers" if s.kind == "scatter" else "lines"
        if s.kind == "step":
            trace["line"] = {"shape": "hv", "color": color}
    data = [trace, *_line_traces(s, x)]
    shapes, annotations = _decorations(s)
    y_axis = _axis(s.y_label, s.y_unit)
    if s.log_y:
        y_axis["type"] = "log"
    elif min(s.y) >= 0:
        y_axis["rangemode"] = "tozero"
    layout = _layout(s.title, _axis(s.x_label, s.x_unit), y_axis, shapes)
    layout["annotations"] = annotations
    if labels:
        layout["xaxis"]["type"] = "category"
    if s.lines:
        layout["barmode"] = "stack" if s.stacked else "group"
        layout["showlegend"] = True
        layout["legend"] = {"orientation": "h", "y": -0.25, "font": {"size": 10}}
        layout["margin"] = {**layout["margin"], "b": 80}
    return {"data": data, "layout": layout}


def _line_traces(s: Series, x: list[Any]) -> list[dict[str, Any]]:
    """The series' extra lines as traces after its own: grouped bars beside a bar chart's first
    (p50, p99, mean per category), dotted lines on the series' x, or another run on its own x
    as a solid line (an overlay), each in the next colour so the first keeps the section's."""
    data: list[dict[str, Any]] = []
    for j, ln in enumerate(s.lines):
        if s.kind == "bar":  # grouped bars next to the first (p50, p99, mean per category)
            data.append(
                {
                    "type": "bar",
                    "x": x,
                    "y": ln.y,
                    "name": ln.label,
                    "marker": {"color": COLORS[(j + 3) % len(COLORS)]},
                }
            )
            continue
        own = ln.x is not None  # another run overlaid on its own x: a solid line in its colour
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": ln.x if own else x,
                "y": ln.y,
                "name": ln.label,
                "line": {
                    "color": COLORS[(j + 3) % len(COLORS)],
                    "dash": "solid" if own else "dot",
                    "width": 1.5,
                    "shape": "hv" if own and s.kind == "step" else "linear",
                },
            }
        )
    return data


def _decorations(s: Series) -> tuple[list[Any], list[Any]]:
    """The shapes and annotations drawn over the data: the reference line and its label, the
    marked instants (dotted verticals) and the shaded spans (a replica's outage), in the order
    Plotly layers them."""
    shapes: list[Any] = []
    if s.reference is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": s.reference,
                "y1": s.reference,
                "line": {"color": "#cf222e", "dash": "dash", "width": 1.5},
            }
        )
    annotations = []
    if s.reference is not None and s.reference_label:
        annotations.append(
            {
                "xref": "paper",
                "x": 1,
                "y": s.reference,
                "text": s.reference_label,
                "showarrow": False,
                "xanchor": "right",
                "yanchor": "bottom",
                "font": {"color": "#cf222e", "size": 11},
            }
        )
    for m in s.marks:
        shapes.append(_mark_line(m.x))
        annotations.append(_mark_label(m.x, m.label))
    for sp in s.spans:  # a replica's outage (views.fleet), shaded under the data
        shapes.append(_span_shade(sp.x0, sp.x1))
        annotations.append(_span_label(sp.x0, sp.label))
    return shapes, annotations


def _mark_line(x: float) -> dict[str, Any]:
    """A marked instant (the SLO knee, the unstable rate) as a dotted vertical across the plot."""
    return {
        "type": "line",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": x,
        "x1": x,
        "line": {"color": "#5b6475", "dash": "dot", "width": 1.2},
    }


def _mark_label(x: float, label: str) -> dict[str, Any]:
    """The marked instant's label, written up its line so marks close together stay legible."""
    return {
        "yref": "paper",
        "y": 1,
        "x": x,
        "text": label,
        "showarrow": False,
        "textangle": -90,
        "xanchor": "right",
        "yanchor": "top",
        "font": {"size": 10, "color": "#5b6475"},
    }


def _span_shade(x0: float, x1: float) -> dict[str, Any]:
    """An interval (a replica's outage) shaded under the data, so the curves stay readable."""
    return {
        "type": "rect",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": x0,
        "x1": x1,
        "layer": "below",
        "line": {"width": 0},
        "fillcolor": "rgba(207, 34, 46, 0.10)",
    }


def _span_label(x0: float, label: str) -> dict[str, Any]:
    """The interval's label at its start, one clause a line (the label joins them with '; ')."""
    return {
        "yref": "paper",
        "y": 1,
        "x": x0,
        "text": "<br>".join(label.split("; ")),
        "showarrow": False,
        "xanchor": "left",
        "yanchor": "top",
        "align": "left",
        "font": {"size": 10, "color": "#cf222e"},
        "bgcolor": "rgba(255, 255, 255, 0.8)",
    }


def histogram_spec(h: Histogram, color: str) -> dict[str, Any]:
    mids = [(a + b) / 2 for a, b in zip(h.edges[:-1], h.edges[1:], strict=True)]
    widths = [b - a for a, b in zip(h.edges[:-1], h.edges[1:], strict=True)]
    trace = {
        "type": "bar",
        "x": mids,
        "y": h.counts,
        "width": widths,
        "marker": {"color": color},
        "name": h.title,
    }
    shapes = []
    annotations = []
    for at, text in ((h.slo, "SLO"), (h.reference, h.reference_label or "limit")):
        if at is None:
            continue
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "x0": at,
                "x1": at,
                "line": {"color": "#cf222e", "dash": "dash", "width": 1.5},
            }
        )
        annotations.append(
            {
                "x": at,
                "yref": "paper",
                "y": 1,
                "text": text,
                "showarrow": False,
                "xanchor": "right",
                "yanchor": "top",
                "font": {"color": "#cf222e", "size": 11},
            }
        )
    x_axis = _axis(h.label or h.title, h.unit)
    layout = _layout(h.title, x_axis, _axis(h.count_label, None), shapes)
    layout["annotations"] = annotations
    return {"data": [trace], "layout": layout}


def _n(x: float | None, unit: str | None) -> str:
    if x is None:
        return "-"
    return (f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}") + (f" {unit}" if unit else "")


class _Charts:
    """Collects the chart specs (one JSON blob in the page) and hands out element ids."""

    def __init__(self) -> None:
        self.specs: dict[str, dict[str, Any]] = {}

    def add(self, spec: dict[str, Any], caption: str, key: str) -> str:
        cid = f"chart-{len(self.specs) + 1}"
        self.specs[cid] = spec
        return (
            f'<figure data-chart="{escape(key)}"><div class="plot" id="{cid}"></div>'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )


def section_html(s: Section, charts: _Charts) -> str:
    out = [
        f'<section class="view" data-section="{escape(s.key)}"><h3>{escape(s.title)}</h3>',
        kpi_strip(s.kpis),
    ]
    out += [
        f'<div class="verdict {v.status}" data-verdict="{escape(v.key)}">'
        f"<b>{escape(v.label)}</b>{escape(v.text)}</div>"
        for v in s.verdicts
    ]
    out += [f'<p class="text">{escape(t)}</p>' for t in s.text]
    out += [table_html(t) for t in s.tables]
    figs = []
    for i, x in enumerate(s.series):
        if x.x:
            ref = (
                f"; dashed line: {x.reference_label or 'limit'} {_n(x.reference, x.y_unit)}"
                if x.reference is not None
                else ""
            )
            marked = f"; marked: {', '.join(m.label for m in x.marks)}" if x.marks else ""
            marked += "".join(f"; shaded: {sp.label}" for sp in x.spans)
            cap = (
                f"{len(x.x):,} points; {x.y_label} {_n(min(x.y), x.y_unit)} to {_n(max(x.y), x.y_unit)}{ref}"
                f"{marked}"
            )
            figs.append(charts.add(series_spec(x, COLORS[i % len(COLORS)]), cap, x.key))
    for i, h in enumerate(s.histograms):
        if h.count and any(h.counts):
            qs = ", ".join(
                f"{n} {_n(v, h.unit)}"
                for n, v in (("p50", h.p50), ("p90", h.p90), ("p99", h.p99))
                if v is not None
            )
            slo = f"; dashed line: SLO {_n(h.slo, h.unit)}" if h.slo is not None else ""
            cap = f"{h.count:,} values" + (f": {qs}" if qs else "") + slo
            figs.append(charts.add(histogram_spec(h, COLORS[(i + 2) % len(COLORS)]), cap, h.key))
    if figs:
        out.append('<div class="charts">' + "".join(figs) + "</div>")
    out.append("</section>")
    return "".join(out)


def part_html(i: int, p: ReportPart, charts: _Charts) -> str:
    out = [
        f'<section class="part" id="part-{i}" data-kind="{escape(p.kind)}"><h2>{i}. {escape(p.title)}</h2>',
        f'<p class="source">from <code>{escape(p.source)}</code> ({escape(p.kind)})</p>',
    ]
    if p.commands:
        out.append("<h3>configuration as a vllm serve command</h3>")
        out += [f"<pre>{escape(command_lines(c))}</pre>" for c in p.commands]
    out += [section_html(s, charts) for s in p.sections]
    if p.caveats:
        out.append(
            "<h3>caveats</h3><ul class=caveats>"
            + "".join(f"<li>{escape(c)}</li>" for c in p.caveats)
            + "</ul>"
        )
    out.append("</section>")
    return "".join(out)


def provenance_html(report: Report) -> str:
    pv = report.provenance
    rows = "".join(
        f"<tr><td><code>{escape(r.name)}</code></td><td>{escape(r.kind)}</td>"
        f"<td><code>{escape(r.digest)}</code></td>"
        f"<td>{escape(', '.join(map(str, pv.seeds.get(r.name, []))) or '-')}</td></tr>"
        for r in pv.inputs
    )
    return (
        '<section class="part" id="provenance"><h2>provenance</h2>'
        f"<p>servesim {escape(pv.servesim_version)}; command: <code>{escape(pv.command_line)}</code></p>"
        '<div class="tablewrap"><table data-table="provenance">'
        "<caption>inputs (reproduce every number from these)</caption>"
        f"<thead><tr><th>input</th><th>kind</th><th>digest</th><th>seeds</th></tr></thead><tbody>{rows}</tbody></table></div>"
        "</section>"
    )


def headline_html(report: Report) -> str:
    return "".join(
        f'<div class="kgroup"><div class="ktitle">{escape(g.title)}</div>{kpi_strip(g.kpis)}</div>'
        for g in report.kpis
    )


_FLAG = re.compile(r"(--[a-z0-9-]+(?: [0-9.]+)?)")  # a flag and its value never break apart


def lead_html(report: Report) -> str:
    """The verdict first: one sentence, then the command (the first screen answers "what do I change")."""
    ld = report.lead
    if ld is None:
        return ""
    cmd = f"<pre>{escape(command_lines(ld.command))}</pre>" if ld.command else ""
    sentence = _FLAG.sub(r"<span class=nw>\1</span>", escape(ld.sentence))
    return (
        f'<section id="lead" class="lead {escape(ld.status)}"><p class="verdict-sentence">'
        f"{sentence}</p>{cmd}"
        f'<p class="source">from <code>{escape(ld.source)}</code>; run the command on each replica '
        "behind the router (details below)</p></section>"
    )


def render_html(report: Report) -> str:
    charts = _Charts()
    parts = "".join(part_html(i, p, charts) for i, p in enumerate(report.parts, 1))
    nav = (
        "<nav><b>contents</b><ol>"
        + "".join(
            f'<li><a href="#part-{i}">{escape(p.title)}</a></li>' for i, p in enumerate(report.parts, 1)
        )
        + '<li><a href="#provenance">provenance</a></li></ol></nav>'
    )
    data = json.dumps(charts.specs, separators=(",", ":"), sort_keys=True).replace("</", "<\\/")
    scripts = ""
    if charts.specs:
        scripts = (
            f'<script type="application/json" id="chart-data">{data}</script>'
            f"<script>{plotly_js()}</script><script>{INIT_JS}</script>"
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{escape(report.title)}</h1>"
        f'<p class="sub">servesim {escape(report.provenance.servesim_version)} · '
        f"{len(report.parts)} results · "
        "simulated, not measured: review before use</p>"
        f"{lead_html(report)}"
        f'<section id="kpis">{headline_html(report)}</section>'
        "<noscript><p class=note>Charts need JavaScript; every figure is also in the tables.</p></noscript>"
        f"{nav}{parts}{provenance_html(report)}</main>{scripts}</body></html>\n"
    )


__all__ = ["plotly_js", "render_html"]
