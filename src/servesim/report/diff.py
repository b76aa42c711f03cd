"""What changed between two results of the same kind (``servesim report A B``): the settings
that differ and every headline figure and table cell that moved, with the change and its share.

Why: "is B better than A, and because of which flag?" is the question behind comparing two runs;
the diff answers it first, and the two full reports follow it.
"""

from __future__ import annotations

from typing import Any

from servesim.report.build import ReportPart
from servesim.report.documents import Document
from servesim.views.format import fmt
from servesim.views.model import Cell, Column, Section, Table

#: Where each kind keeps its configuration.
CONFIG_PATHS: dict[str, list[str]] = {
    "simulate": ["config"],
    "saturate": ["deployment"],
    "recommendation": ["deployment"],
    "tune": ["recommendation", "deployment"],
    "cluster": ["router"],
    "layouts": ["layouts", "slo"],
    "disaggregated": ["spec"],
    "reschedule": [],
    "recover": ["context"],
    "advise": ["advice"],
    "trace": [],
}
MAX_ROWS = 20


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k in sorted(value):
            out.update(_flatten(value[k], f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def config_of(doc: Document) -> dict[str, Any]:
    node: Any = doc.data
    for key in CONFIG_PATHS.get(doc.kind, []):
        node = node.get(key) if isinstance(node, dict) else None
    return _flatten(node) if isinstance(node, dict) else {}


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return "-" if v is None else str(v)


def config_table(a: Document, b: Document) -> Table:
    ca, cb = config_of(a), config_of(b)
    keys = [k for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]
    return Table(
        key="config_changes",
        title="settings that differ",
        columns=[
            Column(key="setting", label="setting", kind="str"),
            Column(key="a", label="A", kind="str"),
            Column(key="b", label="B", kind="str"),
        ],
        rows=[[k, _show(ca.get(k)), _show(cb.get(k))] for k in keys],
        notes=[] if keys else ["the two results use the same settings"],
    )


def _delta_row(what: str, a: float, b: float, col: Column) -> list[Cell]:
    share = (b - a) / abs(a) if a else None
    return [what, fmt(a, col), fmt(b, col), fmt(b - a, col) if col.kind != "pct" else f"{b - a:+.1%}", share]


DELTA_COLUMNS = [
    Column(key="figure", label="figure", kind="str"),
    Column(key="a", label="A", kind="str"),
    Column(key="b", label="B", kind="str"),
    Column(key="delta", label="B - A", kind="str"),
    Column(key="change", label="change", kind="pct"),
]


def metric_table(pa: ReportPart, pb: ReportPart) -> Table:
    rows: list[list[Cell]] = []
    kb = {(s.key, k.key): k for s in pb.sections for k in s.kpis}
    for s in pa.sections:
        for k in s.kpis:
            other = kb.get((s.key, k.key))
            if (
                other is not None
                and k.value is not None
                and other.value is not None
                and k.value != other.value
            ):
                col = Column(key=k.key, label=k.label, unit=k.unit, decimals=k.decimals)
                unit = f" {k.unit}" if k.unit and k.unit != "%" else ""
                rows.append(_delta_row(f"{k.label}{unit}", k.value, other.value, col))
    tb = {(s.key, t.key): t for s in pb.sections for t in s.tables}
    for s in pa.sections:
        for t in s.tables:
            other_t = tb.get((s.key, t.key))
            if other_t is None or [c.key for c in t.columns] != [c.key for c in other_t.columns]:
                continue
            if len(t.rows) > MAX_ROWS or not t.columns or t.columns[0].kind != "str":
                continue
            rows_b = {str(r[0]): r for r in other_t.rows}
            for r in t.rows:
                rb = rows_b.get(str(r[0]))
                if rb is None:
                    continue
                for j, c in enumerate(t.columns[1:], 1):
                    va, vb = r[j], rb[j]
                    num = isinstance(va, int | float) and isinstance(vb, int | float)
                    if num and not isinstance(va, bool) and va != vb:
                        unit = f" {c.unit}" if c.unit else ""
                        rows.append(_delta_row(f"{t.title}: {r[0]} {c.label}{unit}", float(va), float(vb), c))  # type: ignore[arg-type]
    return Table(
        key="metric_deltas",
        title="figures that moved (B against A)",
        columns=DELTA_COLUMNS,
        rows=rows,
        notes=[] if rows else ["no figure changed"],
    )


def legend_name(letter: str, doc: Document) -> str:
    """How an overlay names a document: its letter, its name and the trace it replayed."""
    prov = doc.data.get("trace_provenance") if isinstance(doc.data, dict) else None
    source = prov.get("source") if isinstance(prov, dict) else None
    return f"{letter}: {doc.name}" + (f" · {source}" if source else "")


def overlays(a: Document, b: Document, pa: ReportPart, pb: ReportPart) -> list[Section]:
    """The two results overlaid, as the web's compare draws them: two simulations' latency
    histograms, CDFs and time series (``views.compare.overlay_view``), two sweeps' curves and
    saturation points, two studies' best configurations and fronts (``views.compare_studies``)."""
    names = [legend_name("A", a), legend_name("B", b)]
    if a.kind == "simulate":
        views = [next((s for s in p.sections if s.key == "simulation"), None) for p in (pa, pb)]
        if views[0] is None or views[1] is None:
            return []
        from servesim.views.compare import overlay_view

        return [overlay_view([(names[0], views[0]), (names[1], views[1])])]
    if a.kind == "saturate":
        from servesim.tuning import SaturationReport
        from servesim.views.compare_studies import sweep_compare_view

        reps = [SaturationReport.model_validate(d.data) for d in (a, b)]
        return [sweep_compare_view(list(zip(names, reps, strict=True)))]
    if a.kind == "tune":
        from servesim.tuning import TuneResult
        from servesim.views.compare_studies import study_compare_view

        studies = [TuneResult.model_validate(d.data["study"]) for d in (a, b)]
        return [study_compare_view(list(zip(names, studies, strict=True)))]
    return []


def diff_part(a: Document, b: Document, pa: ReportPart, pb: ReportPart) -> ReportPart:
    """The diff as a report part: settings that differ, the figures that moved, then the two
    results overlaid (``overlays``)."""
    section = Section(
        key="diff",
        title=f"A = {a.name}, B = {b.name}",
        tables=[config_table(a, b), metric_table(pa, pb)],
    )
    return ReportPart(
        kind="diff",
        source=f"{a.name} vs {b.name}",
        title=f"what changed ({a.kind})",
        sections=[section, *overlays(a, b, pa, pb)],
    )


__all__ = ["config_of", "diff_part", "legend_name", "overlays"]
