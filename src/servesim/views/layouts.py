"""The view of ``servesim tune --layouts``: aggregated vs disaggregated layouts of one GPU budget,
the Pareto front, the recommendation with its reasons, its fresh-seed check and the break-even
link bandwidth. Figures are the answer's (``tuning.layouts.LayoutAnswer``); nothing is recomputed."""

from __future__ import annotations

from servesim.tuning.layout_models import BreakEven, LayoutPoint, LayoutVerification
from servesim.tuning.layouts import LayoutAnswer
from servesim.views.model import Cell, Column, Kpi, Line, Section, Series, Table, Verdict
from servesim.views.selection import layout_choice_lines, layout_choice_view

#: How each kind of layout is named in the tables and charts.
KIND_NAMES = {"agg": "aggregated", "disagg": "disaggregated", "dpep": "data-parallel + EP"}


def layouts_view(ans: LayoutAnswer) -> Section:
    """Every layout's goodput per GPU and p99s (front marked), the chart of goodput per GPU vs
    TTFT p99 by kind, the verdict and, when they ran, the fresh seeds and the break-even probes."""
    rec = next(p for p in ans.points if p.label == ans.recommended)
    tables = [_layouts_table(ans)]
    series: list[Series] = []
    front = _front_series(ans)
    if front is not None:
        series.append(front)
    v = ans.verification
    if v is not None:
        tables.append(_fresh_seeds_table(v))
    be = ans.break_even
    if be is not None and be.probes:
        series.append(_break_even_series(ans, be))
    status = "pass" if v is None or v.holds else "warn"
    verdicts = [
        Verdict(
            key="recommended",
            label="recommended",
            status=status,
            text="; ".join(ans.reasons),
        ),
        *(
            Verdict(key=f"choice_{i}", label="how it was chosen", status="info", text=line)
            for i, line in enumerate(layout_choice_lines(ans, besides_reasons=True))
        ),
    ]
    choice = layout_choice_view(ans)
    if choice is not None:
        tables.extend(choice.tables)
    text = []
    if ans.engine:  # the checkpoint's format: every figure above is of it
        kept = ", ".join(f"{k} {v}" for k, v in ans.engine.items())
        text.append(f"every layout runs {kept} (the deployment's, not searched)")
    text += [f"{ans.recommended}, {c}" for c in ans.commands]
    return Section(
        key="layouts",
        title=f"aggregated or disaggregated? {ans.gpus} GPUs: {ans.recommended}",
        kpis=_layouts_kpis(ans, rec),
        tables=tables,
        series=series,
        verdicts=verdicts,
        text=text,
    )


def _layouts_table(ans: LayoutAnswer) -> Table:
    """Every layout best goodput per GPU first, with the SLO and link in the title: the table the
    verdict and the chart refer to (it marks the Pareto front the chart only shows)."""
    points = sorted(ans.points, key=lambda p: -p.goodput_per_gpu)
    cols = [
        Column(key="layout", label="layout", kind="str"),
        Column(key="kind", label="kind", kind="str"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(
            key="goodput_per_gpu",
            label="goodput/GPU",
            unit="req/s",
            decimals=3,
            help="Requests within the per-request SLO per second of the run, over the layout's GPUs.",
        ),
        Column(key="good", label="good", kind="str"),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms"),
        Column(key="tpot_p99_ms", label="TPOT p99", unit="ms"),
        Column(key="pareto", label="on the front", kind="str"),
    ]
    rows: list[list[Cell]] = [
        [
            p.label,
            KIND_NAMES[p.layout.kind],
            p.gpus,
            p.goodput_per_gpu,
            f"{p.good_requests}/{p.num_requests}",
            p.ttft_p99_ms,
            p.tpot_p99_ms,
            "yes" if p.pareto else "no",
        ]
        for p in points
    ]
    caps = ", ".join(f"{k} <= {v:g}" for k, v in ans.slo.items() if v is not None) or "none"
    return Table(
        key="layouts",
        title=f"layouts of {ans.gpus} GPUs (per-request SLO: {caps}; disaggregated over {ans.link})",
        columns=cols,
        rows=rows,
    )


def _front_series(ans: LayoutAnswer) -> Series | None:
    """Goodput per GPU against TTFT p99, one kind as the scatter and each other kind as a line, so
    the trade-off between the kinds reads at a glance; None when no layout ran."""
    names = KIND_NAMES
    by_kind = {k: [p for p in ans.points if p.layout.kind == k] for k in names}
    kinds = [k for k in names if by_kind[k]]
    if not kinds:
        return None
    first = kinds[0]
    return Series(
        key="front",
        title="goodput per GPU against TTFT p99, by layout",
        x_label="TTFT p99",
        x_unit="ms",
        y_label="goodput per GPU",
        y_unit="req/s",
        x=[p.ttft_p99_ms for p in by_kind[first]],
        y=[p.goodput_per_gpu for p in by_kind[first]],
        kind="scatter",
        name=names[first],
        lines=[
            Line(
                label=names[k],
                x=[p.ttft_p99_ms for p in by_kind[k]],
                y=[p.goodput_per_gpu for p in by_kind[k]],
            )
            for k in kinds[1:]
        ],
        help="Up and to the left is better; the table marks the Pareto front.",
    )


def _fresh_seeds_table(v: LayoutVerification) -> Table:
    """The recommendation against its runner-up on seeds the search never saw: whether the choice
    survives new traffic, not just the seed it was picked on."""
    return Table(
        key="fresh_seeds",
        title=f"fresh seeds: {v.recommended} against {v.against}",
        columns=[
            Column(key="seed", label="seed", kind="str"),
            Column(key="rec", label=v.recommended, unit="req/s per GPU", decimals=3),
            Column(key="other", label=v.against, unit="req/s per GPU", decimals=3),
            Column(key="meets", label="p99 within the SLO", kind="str"),
        ],
        rows=[
            [
                c.seed,
                c.recommended_per_gpu,
                c.against_per_gpu,
                "yes" if c.recommended_meets_p99 else "no",
            ]
            for c in v.checks
        ],
    )


def _break_even_series(ans: LayoutAnswer, be: BreakEven) -> Series:
    """The disaggregated layout's goodput per GPU at each probed link bandwidth, against the
    aggregated layout's as the reference: where the link stops being the bottleneck."""
    probes = sorted(be.probes)
    return Series(
        key="break_even",
        title=f"{be.layout}: goodput per GPU against link bandwidth",
        x_label="link bandwidth per TP rank",
        x_unit="Gbit/s",
        y_label="goodput per GPU",
        y_unit="req/s",
        x=[g for g, _ in probes],
        y=[y for _, y in probes],
        kind="scatter",
        name=be.layout,
        reference=next((p.goodput_per_gpu for p in ans.points if p.label == be.against), None),
        reference_label=f"{be.against} (aggregated)",
        help=be.note,
    )


def _layouts_kpis(ans: LayoutAnswer, rec: LayoutPoint) -> list[Kpi]:
    """The recommended layout's headline figures, and the break-even bandwidth when one was
    found (a probe that never crossed gives none, and the chart says why)."""
    kpis = [
        Kpi(
            key="goodput_per_gpu",
            label="goodput per GPU",
            value=rec.goodput_per_gpu,
            unit="req/s",
            decimals=3,
        ),
        Kpi(key="gpus", label="GPUs", value=float(rec.gpus), unit=None, decimals=0),
        Kpi(key="ttft_p99_ms", label="TTFT p99", value=rec.ttft_p99_ms, unit="ms"),
        Kpi(key="tpot_p99_ms", label="TPOT p99", value=rec.tpot_p99_ms, unit="ms"),
    ]
    be = ans.break_even
    if be is not None and be.gbps is not None:
        kpis.append(Kpi(key="break_even_gbps", label="break-even bandwidth", value=be.gbps, unit="Gbit/s"))
    return kpis


__all__ = ["layouts_view"]
