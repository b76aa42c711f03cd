"""A comparison basket: N simulation runs against a baseline, metric by metric.

Each metric's row gives the baseline's value and, for every other run, its value and its change
``(run - baseline) / baseline``; ``better_when`` says which direction is an improvement (lower for
latencies, preemptions, KV usage and the queue; higher for throughput and goodput).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from servesim.engine.results import LatencyStats, SimulationSummary
from servesim.views.glossary import METRICS as GLOSSARY
from servesim.views.model import Column, Histogram, Line, Mark, Section, Series, Table

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
PERCENTILES = ("p50", "p90", "p99")
#: Summary figures compared beside the latency percentiles; True when higher is better.
FIGURES = {
    "request_throughput": True,
    "output_token_throughput": True,
    "total_token_throughput": True,
    "goodput": True,
    "num_preemptions": False,
    "mean_kv_usage": False,
    "mean_waiting": False,
}
#: Most runs one basket compares (a table a person can still read).
MAX_RUNS = 12


def metric_label(key: str) -> tuple[str, str | None]:
    d = GLOSSARY.get(key)
    return (d.label, d.unit) if d is not None else (key.replace("_", " "), None)


def metric_rows(summary: SimulationSummary) -> list[tuple[str, str, str | None, float | None, bool]]:
    """(key, label, unit, value, higher is better) of every compared metric, in display order."""
    out: list[tuple[str, str, str | None, float | None, bool]] = []
    for metric in LATENCIES:
        label, unit = metric_label(metric)
        st: LatencyStats = getattr(summary, metric)
        for p in PERCENTILES:
            out.append(
                (f"{metric}.{p}", f"{label} {p}", unit, float(getattr(st, p)) if st.count else None, False)
            )
    for metric, higher in FIGURES.items():
        label, unit = metric_label(metric)
        value = getattr(summary, metric, None)
        out.append((metric, label, unit, None if value is None else float(value), higher))
    return out


def change(baseline: float | None, value: float | None) -> float | None:
    if baseline is None or value is None or baseline == 0:
        return None
    return (value - baseline) / baseline


def basket_view(
    baseline: tuple[str, SimulationSummary], runs: Sequence[tuple[str, SimulationSummary]]
) -> Section:
    """The basket's table: metric, better when, the baseline, then each run's value and change."""
    base_label, base = baseline
    columns = [
        Column(key="metric", label="metric", kind="str"),
        Column(key="better_when", label="better when", kind="str"),
        Column(key="baseline", label=f"baseline: {base_label}", kind="float"),
    ]
    for i, (label, _) in enumerate(runs):
        columns += [
            Column(key=f"run{i}", label=label, kind="float"),
            Column(key=f"run{i}_change", label=f"Δ {label}", kind="pct", help="(run - baseline) / baseline"),
        ]
    per_run = [metric_rows(s) for _, s in runs]
    rows: list[list[Any]] = []
    for j, (_, label, unit, value, higher) in enumerate(metric_rows(base)):
        row: list[Any] = [label + (f" ({unit})" if unit else ""), "higher" if higher else "lower", value]
        for metrics in per_run:
            v = metrics[j][3]
            row += [v, change(value, v)]
        rows.append(row)
    return Section(
        key="basket",
        title=f"{len(runs)} run(s) against the baseline {base_label}",
        tables=[Table(key="basket", title="metric changes against the baseline", columns=columns, rows=rows)],
    )


#: The latency distributions an overlay draws (histogram and CDF of each run on shared bins).
OVERLAID_LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")  # ITL: token gaps, not requests
#: The time series an overlay draws, each run on its own time axis.
OVERLAID_SERIES = ("num_waiting", "output_tokens_per_s", "kv_usage")
#: Shared bins of an overlaid histogram.
OVERLAY_BINS = 40


def _cdf_at(h: Histogram, x: np.ndarray) -> np.ndarray:
    """Share of ``h``'s samples at or below each ``x``: exact at its edges, linear between them."""
    edges = np.asarray(h.edges, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(np.asarray(h.counts, dtype=np.float64))])
    total = cum[-1] if cum[-1] > 0 else 1.0
    return np.asarray(np.interp(x, edges, cum / total, left=0.0, right=1.0), dtype=np.float64)


def _with_lines(first: Series, rest: list[Series], names: list[str]) -> Series:
    """``first`` named after its run, every other run a line on its own x."""
    lines = [Line(label=n, x=r.x, y=r.y) for n, r in zip(names[1:], rest, strict=True)]
    return first.model_copy(update={"name": names[0], "lines": lines})


def latency_overlays(runs: Sequence[tuple[str, Section]]) -> list[Series]:
    """For each latency in ``OVERLAID_LATENCIES`` that every run has: its histogram (share of the
    requests per bin, on bins shared by the runs) and its CDF, one line per run, each SLO a
    vertical line. From the runs' stored histograms (``views.simulation``'s), so a stored result
    overlays without its per-request records; a run's shares are re-binned onto the shared bins
    through its CDF (exact where the bins meet its own edges)."""
    names = [n for n, _ in runs]
    out: list[Series] = []
    for key in OVERLAID_LATENCIES:
        hists = [next((h for h in sec.histograms if h.key == key), None) for _, sec in runs]
        got = [h for h in hists if h is not None and h.count and len(h.edges) >= 2]
        if len(got) != len(runs):
            continue
        label, unit = metric_label(key)
        label = got[0].label or label
        what = got[0].count_label  # "requests"; ITL counts token gaps
        lo = min(h.edges[0] for h in got)
        hi = max(h.edges[-1] for h in got)
        if not hi > lo:
            hi = lo + 1.0
        edges = np.linspace(lo, hi, OVERLAY_BINS + 1)
        slos = sorted({h.slo for h in got if h.slo is not None})
        marks = [Mark(x=v, label=f"SLO {v:,g} {unit or ''}".rstrip()) for v in slos]
        shares = [np.diff(_cdf_at(h, edges)) for h in got]
        # a step line per run: the share of each bin held from its left edge to its right one
        hx = edges.tolist()
        per_run = [
            Series(
                key=f"{key}_overlay",
                title=f"{label}: share of {what} per bin, run by run",
                x_label=label,
                x_unit=unit,
                y_label=f"share of {what}",
                y_unit=None,
                x=hx,
                y=[*sh.tolist(), float(sh[-1])],
                kind="step",
                marks=marks,
                help=f"Each run's {label} histogram on shared bins (its {what} per bin / its {what}).",
            )
            for sh in shares
        ]
        out.append(_with_lines(per_run[0], per_run[1:], names))
        cdfs = [
            Series(
                key=f"{key}_cdf_overlay",
                title=f"{label}: CDF, run by run",
                x_label=label,
                x_unit=unit,
                y_label=f"share of {what} at or below",
                y_unit=None,
                x=[float(e) for e in h.edges],
                y=(np.cumsum([0, *h.counts]) / max(h.count, 1)).tolist(),
                kind="line",
                marks=marks,
                help=f"Share of each run's {what} with {label} at or below x (exact at its bin edges).",
            )
            for h in got
        ]
        out.append(_with_lines(cdfs[0], cdfs[1:], names))
    return out


def series_overlays(runs: Sequence[tuple[str, Section]]) -> list[Series]:
    """The queue, the throughput and the KV usage of every run over its own time, overlaid."""
    names = [n for n, _ in runs]
    out: list[Series] = []
    for key in OVERLAID_SERIES:
        found = [next((x for x in sec.series if x.key == key and x.x), None) for _, sec in runs]
        got = [x for x in found if x is not None]
        if len(got) != len(runs):
            continue
        first = got[0].model_copy(
            update={
                "key": f"{key}_overlay",
                "title": f"{got[0].title}, run by run",
                "reference": None,
                "reference_label": None,
                "marks": [],
            }
        )
        out.append(_with_lines(first, got[1:], names))
    return out


def overlay_view(runs: Sequence[tuple[str, Section]]) -> Section:
    """Runs overlaid (A/B, a basket, ``servesim report A B``): ``runs`` is each run's legend name
    (its label and trace) with its stored simulation view. The latency histograms and CDFs on
    shared bins with the SLO marked, then the queue, throughput and KV usage over time."""
    series = latency_overlays(runs) + series_overlays(runs)
    text = [] if series else ["the runs share no latency distribution or time series to overlay"]
    return Section(
        key="runs_overlay",
        title=f"{len(runs)} runs overlaid: " + "; ".join(n for n, _ in runs),
        series=series,
        text=text,
    )


__all__ = [
    "FIGURES",
    "LATENCIES",
    "MAX_RUNS",
    "OVERLAID_LATENCIES",
    "OVERLAID_SERIES",
    "PERCENTILES",
    "basket_view",
    "change",
    "latency_overlays",
    "metric_label",
    "metric_rows",
    "overlay_view",
    "series_overlays",
]
