"""A comparison basket: N simulation runs against a baseline, metric by metric.

Each metric's row gives the baseline's value and, for every other run, its value and its change
``(run - baseline) / baseline``; ``better_when`` says which direction is an improvement (lower for
latencies, preemptions, KV usage and the queue; higher for throughput and goodput).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.engine.results import LatencyStats, SimulationSummary
from servesim.views.glossary import METRICS as GLOSSARY
from servesim.views.model import Column, Section, Table

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


__all__ = [
    "FIGURES",
    "LATENCIES",
    "MAX_RUNS",
    "PERCENTILES",
    "basket_view",
    "change",
    "metric_label",
    "metric_rows",
]
