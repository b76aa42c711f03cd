"""The capacity view of a saturation sweep: latency percentiles against offered load with the SLO
line, the SLO knee (highest rate where the SLO holds) and the unstable rate marked, throughput
against offered load over its measurement window, and the headroom stated against the knee.

A rate is only called stable where the engine keeps up: throughput below the offered rate while
the queue grows is "overloaded" even before the queue test calls it saturated."""

from __future__ import annotations

from typing import Any

from servesim.tuning.evaluate import RatePoint
from servesim.tuning.saturation import SaturationReport
from servesim.tuning.stats import QueueTestSettings
from servesim.views.glossary import define
from servesim.views.model import Column, Line, Mark, Section, Series, Table, Verdict

#: Throughput this far below the offered rate, with a growing queue, is not "stable" (the
#: 10th-90th percentile completion window measures within about 1 % at stable rates).
KEEPS_UP = 0.02
WINDOW = "completions between the 10th and 90th percentile finish times, at most the offered rate"


def point_state(p: RatePoint) -> str:
    """The load state a reader acts on: stable, overloaded (falling behind), unstable, thrashing."""
    if p.status == "QUEUE_SATURATED":
        return "unstable"
    if p.status == "KV_THRASHING":
        return "KV thrashing"
    falls_behind = p.throughput_rps.mean < p.offered_rps.mean * (1 - KEEPS_UP)
    # "The queue grows" by the queue test's own measure: at least the smallest overload it counts
    # (not yet significant on these seeds, or the test would have called the rate unstable).
    if falls_behind and p.queue_slope.mean >= QueueTestSettings().min_slope:
        return "overloaded"
    return "stable"


def _slo_word(ok: bool | None) -> str:
    return "-" if ok is None else ("meets" if ok else "misses")


def curve_table(rep: SaturationReport) -> Table:
    cols = [
        Column(key="rate_rps", label="rate", unit="req/s", decimals=3, help=define("offered_rps")),
        Column(key="state", label="load state", kind="str"),
        Column(key="slo", label="SLO", kind="str"),
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
            point_state(p),
            _slo_word(p.slo_ok),
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
        notes=[
            f"throughput: finished requests per second over the {WINDOW}",
            "load state: overloaded = throughput more than "
            f"{KEEPS_UP:.0%} below the offered rate while the queue grows by at least "
            f"{QueueTestSettings().min_slope:.0%} of the arrival rate; unstable = the queue grows "
            "without bound on most seeds",
            *rep.notes,
        ],
    )


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3g}"


def headroom_text(
    target: float,
    knee: float | None,
    knee_headroom: float | None,
    unstable: float | None,
    headroom: float | None,
    has_slo: bool,
) -> str:
    """Headroom against the SLO knee first, then against queue instability (one wording everywhere)."""
    parts = []
    if has_slo:
        if knee is None:
            parts.append("the SLO holds at no rate tried")
        elif knee_headroom is not None:
            parts.append(f"headroom to the SLO knee {knee_headroom:+.0%} ({_rate(knee)} req/s)")
    if unstable is not None and headroom is not None:
        parts.append(f"queue unstable from {_rate(unstable)} req/s ({headroom:+.0%})")
    elif unstable is None:
        parts.append("queue stable at every rate tried")
    return f"{target:,.3g} req/s: " + "; ".join(parts)


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
                label="SLO knee",
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
            f"(the queue test passes at {_rate(rep.max_stable_rps)} req/s)",
        )
    )
    if rep.target_rate_rps is not None:
        at = min(rep.points, key=lambda p: abs(p.rate_rps - (rep.target_rate_rps or 0)), default=None)
        state = point_state(at) if at is not None else str(rep.status_at_target)
        slo_ok = at.slo_ok if at is not None else None
        good = state == "stable" and slo_ok is not False
        words = state + ("" if slo_ok is None else f", {_slo_word(slo_ok)} the SLO")
        text = headroom_text(
            rep.target_rate_rps,
            rep.goodput_knee_rps,
            rep.knee_headroom,
            rep.saturation_rps,
            rep.headroom,
            rep.slo is not None,
        )
        out.append(
            Verdict(
                key="target",
                label="at the target rate",
                status="pass" if good else "fail",
                text=text.replace(": ", f": {words}; ", 1),
            )
        )
    return out


def speculation_table(rep: SaturationReport) -> Table | None:
    """Speculation on against off at each rate both ran (None: the deployment does not speculate)."""
    sp = rep.speculation
    if sp is None:
        return None
    cols = [
        Column(key="rate_rps", label="rate", unit="req/s", decimals=3, help=define("offered_rps")),
        Column(key="tpot_p50_on_ms", label="TPOT p50 on", unit="ms", help=define("tpot_ms")),
        Column(key="tpot_p50_off_ms", label="TPOT p50 off", unit="ms", help=define("tpot_ms")),
        Column(key="speedup", label="TPOT off/on", decimals=2, help="Above 1: speculation pays."),
        Column(key="goodput_on_rps", label="goodput on", unit="req/s", decimals=2, help=define("goodput")),
        Column(key="goodput_off_rps", label="goodput off", unit="req/s", decimals=2, help=define("goodput")),
    ]
    rows: list[list[Any]] = [
        [r, a, b, (b / a if a > 0 else None), g_on, g_off]
        for r, a, b, g_on, g_off in zip(
            sp.rates_rps,
            sp.tpot_p50_on_ms,
            sp.tpot_p50_off_ms,
            sp.goodput_on_rps,
            sp.goodput_off_rps,
            strict=True,
        )
    ]
    return Table(
        key="speculation",
        title=f"speculative decoding ({sp.method}, k = {sp.num_speculative_tokens}) on vs off "
        "(mean over seeds)",
        columns=cols,
        rows=rows,
        notes=[
            f"expected tokens per verifying step {sp.mean_acceptance_length:.2f}"
            if sp.mean_acceptance_length is not None
            else "acceptance from the trace",
            f"off: SLO knee {_rate(sp.off_goodput_knee_rps)} req/s, "
            f"unstable from {_rate(sp.off_saturation_rps)} req/s",
        ],
    )


def speculation_verdict(rep: SaturationReport) -> Verdict | None:
    """Where speculation stops paying: the crossover load, in words."""
    sp = rep.speculation
    if sp is None:
        return None
    what = f"{sp.method} with k = {sp.num_speculative_tokens}"
    if sp.crossover_rps is None:
        text = f"{what} lowers TPOT p50 at every rate compared (up to {_rate(sp.pays_up_to_rps)} req/s)"
    elif sp.pays_up_to_rps is None:
        text = (
            f"{what} does not pay at any rate compared "
            f"(TPOT p50 no lower than off from {_rate(sp.crossover_rps)} req/s)"
        )
    else:
        i = sp.rates_rps.index(sp.crossover_rps)
        text = (
            f"{what} stops paying at {_rate(sp.crossover_rps)} req/s: "
            f"TPOT p50 {sp.tpot_p50_on_ms[i]:,.1f} ms on vs {sp.tpot_p50_off_ms[i]:,.1f} ms off "
            f"(it pays up to {_rate(sp.pays_up_to_rps)} req/s)"
        )
    return Verdict(key="speculation_crossover", label="speculation", status="info", text=text)


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
    marks = []
    if knee is not None:
        marks.append(Mark(x=knee, label=f"SLO knee {knee:,.3g}"))
    if rep.saturation_rps is not None:
        marks.append(Mark(x=rep.saturation_rps, label=f"unstable {rep.saturation_rps:,.3g}"))
    offered = [p.offered_rps.mean for p in rep.points]
    latency = Series(
        key="ttft_ms_curve",
        title="TTFT against offered load (worst seed)",
        x_label="offered load",
        x_unit="req/s",
        y_label="TTFT p99",
        y_unit="ms",
        x=offered,
        y=[p.ttft_ms.p99.max for p in rep.points],
        lines=[
            Line(label="TTFT p90", y=[p.ttft_ms.p90.max for p in rep.points]),
            Line(label="TTFT p50", y=[p.ttft_ms.p50.max for p in rep.points]),
        ],
        reference=ttft_cap,
        reference_label=None if ttft_cap is None else f"SLO TTFT p99 {ttft_cap:,g} ms",
        marks=marks,
        log_y=True,
        help=define("ttft_ms"),
    )
    throughput = Series(
        key="throughput_curve",
        title="throughput against offered load (10th-90th pct finishes, at most offered)",
        x_label="offered load",
        x_unit="req/s",
        y_label="throughput",
        y_unit="req/s",
        x=offered,
        y=[p.throughput_rps.mean for p in rep.points],
        lines=[Line(label="offered", y=offered)],
        marks=marks,
        help=f"Finished requests per second over the {WINDOW}.",
    )
    series = [
        latency,
        throughput,
        curve("goodput_curve", "goodput", [p.goodput_rps.mean for p in rep.points], "req/s"),
        curve(
            "output_token_throughput_curve",
            "output tokens/s",
            [p.output_tokens_per_s.mean for p in rep.points],
            "tok/s",
        ),
    ]
    text = [f"{rep.num_simulations} simulations; KV blocks per replica {rep.num_gpu_blocks:,}"]
    if knee is not None:
        text.append(f"SLO knee (highest rate where the SLO holds) at {knee:,.3g} req/s")
    if rep.saturation_rps is not None:
        text.append(f"unstable from {rep.saturation_rps:,.3g} req/s")
    short = [
        p.offered_rps.mean
        for p in rep.points
        if p.status == "QUEUE_SATURATED" and p.throughput_rps.mean >= p.offered_rps.mean * (1 - 1e-9)
    ]
    if short:
        text.append(
            f"at {', '.join(f'{r:,.3g}' for r in short)} req/s the queue is unstable yet the finishes kept "
            "pace with the arrivals (throughput is capped at the offered rate): the trace ends before "
            "the engine falls behind for good, too short to measure the service rate there"
        )
    tables = [curve_table(rep)]
    verdicts = saturation_verdicts(rep)
    spec_table, spec_verdict = speculation_table(rep), speculation_verdict(rep)
    if spec_table is not None and spec_verdict is not None and rep.speculation is not None:
        sp = rep.speculation
        tables.append(spec_table)
        verdicts.append(spec_verdict)
        series.append(
            Series(
                key="speculation_tpot_curve",
                title="TPOT p50 with and without speculation",
                x_label="arrival rate",
                x_unit="req/s",
                y_label="TPOT p50 (on)",
                y_unit="ms",
                x=sp.rates_rps,
                y=sp.tpot_p50_on_ms,
                lines=[Line(label="TPOT p50 (off)", y=sp.tpot_p50_off_ms)],
                marks=[Mark(x=sp.crossover_rps, label=f"stops paying {sp.crossover_rps:,.3g}")]
                if sp.crossover_rps is not None
                else [],
                kind="line",
                help=define("tpot_ms"),
            )
        )
    return Section(
        key="saturation",
        title="saturation",
        tables=tables,
        series=series,
        verdicts=verdicts,
        text=text,
    )


__all__ = [
    "KEEPS_UP",
    "curve_table",
    "headroom_text",
    "point_state",
    "saturation_verdicts",
    "saturation_view",
    "speculation_table",
    "speculation_verdict",
]
