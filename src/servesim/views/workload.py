"""The view of a workload: arrivals over time, length distributions, prefix sharing."""

from __future__ import annotations

import numpy as np

from servesim.traces.inspect import TraceStats
from servesim.traces.schema import Trace
from servesim.views.model import Section, Table
from servesim.views.shape import MAX_POINTS, histogram, series, time_binned


def stats_table(stats: TraceStats) -> Table:
    rows: list[list[object]] = [
        ["requests", f"{stats.num_requests:,}"],
        ["time span", f"{stats.time_span_s:,.1f} s"],
        ["mean rate", f"{stats.mean_rate_rps:,.2f} req/s"],
        ["burstiness (IAT CV)", f"{stats.iat_cv:.2f} (1 = Poisson)"],
        ["prompt tokens", f"mean {stats.prompt.mean:,.0f}, max {stats.prompt.max:,}"],
        ["output tokens", f"mean {stats.output.mean:,.0f}, max {stats.output.max:,}"],
        [
            "prefix reuse",
            "none"
            if stats.prefix_reuse_ratio is None
            else f"{stats.prefix_reuse_ratio:.1%} ({stats.prefix_reuse_from})",
        ],
        ["tenants", f"{stats.num_tenants:,}"],
    ]
    if stats.num_dropped:
        rows.append(["bad rows skipped", f"{stats.num_dropped:,}"])
    return Table.figures("workload", f"workload: {stats.source}", [[str(a), str(b)] for a, b in rows])


def workload_view(
    trace: Trace, stats: TraceStats, *, bins: int = 40, max_points: int = MAX_POINTS
) -> Section:
    df = trace.df
    t = df["arrival_time_s"].to_numpy(dtype=np.float64)
    hists = [
        histogram(
            "prompt_len", "prompt length", df["prompt_len"].to_numpy(dtype=np.float64), "tokens", bins=bins
        ),
        histogram(
            "output_len", "output length", df["output_len"].to_numpy(dtype=np.float64), "tokens", bins=bins
        ),
    ]
    out_series = []
    if len(t):
        t0, t1 = float(t.min()), float(t.max())
        nb = min(max(10, max_points // 2), max(1, len(t)))
        width = (t1 - t0) / nb if t1 > t0 else 1.0
        x, n = time_binned(t, np.ones(len(t)), t0, t1, nb)
        out_series.append(
            series(
                "arrival_rate",
                "arrivals per second",
                x,
                n / width,
                y_label="rate",
                y_unit="req/s",
                kind="step",
                max_points=max_points,
            )
        )
    text = [] if len(t) else ["no requests"]
    return Section(
        key="workload",
        title="workload",
        tables=[stats_table(stats)],
        histograms=hists,
        series=out_series,
        text=text,
    )


__all__ = ["stats_table", "workload_view"]
