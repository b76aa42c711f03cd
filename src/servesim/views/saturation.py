"""The view of a saturation sweep: the throughput-latency curve, the knee and the unstable rate."""

from __future__ import annotations

from typing import Any

from servesim.tuning.saturation import SaturationReport
from servesim.views.glossary import define
from servesim.views.model import Column, Section, Series, Table, Verdict


def curve_table(rep: SaturationReport) -> Table:
    cols = [
        Column(key="rate_rps", label="rate", unit="req/s", decimals=3, help=define("offered_rps")),
        Column(key="status", label="status", kind="str"),
        Column(
            key="throughput_rps",
            label="throughput",
            unit="req/s",
            decimals=2,
            help=define("request_throughput"),
        ),
        Column(key="goodput_rps", label="goodput", unit="req/s", decimals=2, help=define("goodput")),
        Column(
            key="output_tokens_per_s",
            label="output",
            unit="tok/s",
            decimals=0,
            help=define("output_token_throughput"),
        ),
        Column(key="ttft_p50_ms", label="TTFT p50", unit="ms", help=define("ttft_ms")),
        Column(
            key="ttft_p99_ms", label="TTFT p99", unit="ms", help="Worst seed's p99. " + str(define("ttft_ms"))
        ),
        Column(
            key="tpot_p99_ms", label="TPOT p99", unit="ms", help="Worst seed's p99. " + str(define("tpot_ms"))
        ),
        Column(
            key="e2e_p99_ms", label="E2E p99", unit="ms", help="Worst seed's p99. " + str(define("e2e_ms"))
        ),
        Column(
            key="queue_growth",
            label="queue growth",
            kind="pct",
            help="Growth of the waiting queue relative to the arrival rate (overload when > 0).",
        ),
        Column(key="preemptions_per_request", label="preempt/req", decimals=3, help=define("preemptions")),
    ]
    rows: list[list[Any]] = [
        [
            p.rate_rps,
            p.status,
            p.throughput_rps.mean,
            p.goodput_rps.mean,
            p.output_tokens_per_s.mean,
            p.ttft_ms.p50.mean,
            p.ttft_ms.p99.max,
            p.tpot_ms.p99.max,
            p.e2e_ms.p99.max,
            p.queue_slope.mean,
            p.preemptions_per_request.mean,
        ]
        for p in rep.points
    ]
    return Table(
        key="curve",
        title="throughput-latency curve (mean over seeds; p99 of the worst seed)",
        columns=cols,
        rows=rows,
        notes=list(rep.notes),
    )


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3g}"


def saturation_verdicts(rep: SaturationReport) -> list[Verdict]:
    out = []
    if rep.slo is not None:
        nxt = (
            f" (the next rate, {_rate(rep.knee_first_failing_rps)} req/s, fails)"
            if rep.knee_first_failing_rps
            else ""
        )
        out.append(
            Verdict(
                key="goodput_knee",
                label="goodput knee",
                status="info" if rep.goodput_knee_rps is not None else "fail",
                text=f"SLO {rep.slo.describe()} holds on every seed up to "
                f"{_rate(rep.goodput_knee_rps)} req/s{nxt}",
            )
        )
    out.append(
        Verdict(
            key="saturation",
            label="saturation",
            status="info",
            text=f"the queue grows without bound from {_rate(rep.saturation_rps)} req/s "
            f"(stable at {_rate(rep.max_stable_rps)} req/s)",
        )
    )
    if rep.target_rate_rps is not None:
        head = f", headroom {rep.headroom:+.0%}" if rep.headroom is not None else ""
        status = "pass" if rep.status_at_target == "STABLE" else "fail"
        out.append(
            Verdict(
                key="target",
                label="at the target rate",
                status=status,
                text=f"{rep.target_rate_rps:,.3g} req/s: {rep.status_at_target}{head}",
            )
        )
    return out


def saturation_view(rep: SaturationReport) -> Section:
    """The curve as a table and as series against the arrival rate, with the two thresholds."""
    rates = [p.rate_rps for p in rep.points]
    knee = rep.goodput_knee_rps

    def curve(key: str, title: str, ys: list[float], unit: str, ref: float | None = None) -> Series:
        return Series(
            key=key,
            title=title,
            x_label="arrival rate",
            x_unit="req/s",
            y_label=title,
            y_unit=unit,
            x=rates,
            y=ys,
            kind="line",
            reference=ref,
            help=define(key.removesuffix("_curve")),
        )

    ttft_cap = rep.slo.caps().get("ttft") if rep.slo is not None else None
    series = [
        curve(
            "output_token_throughput_curve",
            "output tokens/s",
            [p.output_tokens_per_s.mean for p in rep.points],
            "tok/s",
        ),
        curve("goodput_curve", "goodput", [p.goodput_rps.mean for p in rep.points], "req/s"),
        curve(
            "ttft_ms_curve", "TTFT p99 (worst seed)", [p.ttft_ms.p99.max for p in rep.points], "ms", ttft_cap
        ),
    ]
    text = [f"{rep.num_simulations} simulations; KV blocks per replica {rep.num_gpu_blocks:,}"]
    if knee is not None:
        text.append(f"goodput knee at {knee:,.3g} req/s")
    if rep.saturation_rps is not None:
        text.append(f"unstable from {rep.saturation_rps:,.3g} req/s")
    return Section(
        key="saturation",
        title="saturation",
        tables=[curve_table(rep)],
        series=series,
        verdicts=saturation_verdicts(rep),
        text=text,
    )


__all__ = ["curve_table", "saturation_verdicts", "saturation_view"]
