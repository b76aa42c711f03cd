"""The capacity view of a saturation sweep: latency percentiles against offered load with the SLO
line, the SLO knee (highest rate where the SLO holds) and the unstable rate marked, throughput
against offered load over its measurement window, and the headroom stated against the knee.

A rate is only called stable where the engine keeps up and the SLO holds (``state_words``):
throughput below the offered rate while the queue grows is "overloaded" even before the queue test
calls it saturated, and a rate whose p99s miss the SLO is "over the SLO". Every line that gives
the knee or the unstable rate names what they were measured on (``scope_text``: the traffic, its
size, the SLO), so a figure from resampled traffic or another SLO says so where it is read."""

from __future__ import annotations

from typing import Any

from servesim.tuning.evaluate import RatePoint, Status
from servesim.tuning.saturation import SaturationReport
from servesim.tuning.stats import QueueTestSettings
from servesim.views.glossary import define
from servesim.views.model import Column, Line, Mark, Section, Series, Table, Verdict

#: Throughput this far below the offered rate, with a growing queue, is not "stable" (the
#: 10th-90th percentile completion window measures within about 1 % at stable rates).
KEEPS_UP = 0.02
WINDOW = "completions between the 10th and 90th percentile finish times, at most the offered rate"


#: The state of a rate whose queue keeps up but whose p99s miss the SLO.
OVER_SLO = "over the SLO"


def state_words(status: Status, slo_ok: bool | None, *, overloaded: bool = False) -> str:
    """The load state a reader acts on, the one wording of every view: unstable (the queue grows
    without bound), KV thrashing, overloaded (falling behind while the queue grows), over the SLO,
    and "stable" only where none of these holds."""
    if status == "QUEUE_SATURATED":
        return "unstable"
    if status == "KV_THRASHING":
        return "KV thrashing"
    if overloaded:
        return "overloaded"
    if slo_ok is False:
        return OVER_SLO
    return "stable"


def point_state(p: RatePoint) -> str:
    """A rate's load state (``state_words``): "overloaded" when the throughput falls behind the
    offered rate and the queue grows by the queue test's own measure (at least the smallest
    overload it counts; not yet significant on these seeds, or the test would have called the rate
    unstable). A growing queue while the finishes keep pace is the window's noise, not growth."""
    falls_behind = p.throughput_rps.mean < p.offered_rps.mean * (1 - KEEPS_UP)
    grows = p.queue_slope.mean >= QueueTestSettings().min_slope
    return state_words(p.status, p.slo_ok, overloaded=falls_behind and grows)


def workload_text(workload: dict[str, Any]) -> str:
    """What a sweep ran on, from its report's ``workload``: the trace as named and its size, or
    the generator preset with its size and seed, and where its lengths are resampled from."""
    n = workload.get("num_requests")
    size = f"{n:,} requests" if isinstance(n, int) else "requests"
    gen = workload.get("generator")
    if workload.get("kind") != "generator" or not isinstance(gen, dict):
        return f"{workload.get('name')} ({size})"
    sources = {
        str(part.get("source"))
        for part in (gen.get("prompt"), gen.get("output"))
        if isinstance(part, dict) and part.get("kind") == "resample"
    }
    drawn = f", lengths resampled from {', '.join(sorted(sources))}" if sources else ""
    return f"preset {gen.get('name')} ({size} generated, seed {gen.get('seed')}{drawn})"


def scope_text(rep: SaturationReport) -> str:
    """``on azure-conv (19,366 requests) under SLO ttft_p99_ms=500,tpot_p99_ms=50, 3 fresh seeds per
    rate``: what the knee and the unstable rate were measured on, said on the line that gives them."""
    from servesim.tuning.workload import fresh_seeds

    slo = f"SLO {rep.slo.describe()}" if rep.slo is not None else "no SLO"
    n = len(rep.settings.seeds)
    fresh = "fresh " if rep.settings.seeds == fresh_seeds(n) else ""
    return f"on {workload_text(rep.workload)} under {slo}, {n} {fresh}seed{'s' if n > 1 else ''} per rate"


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
            "load state: stable = the queue keeps up and the SLO holds; over the SLO = the queue keeps "
            f"up but a p99 misses its cap; overloaded = throughput more than {KEEPS_UP:.0%} below the "
            f"offered rate while the queue grows by at least {QueueTestSettings().min_slope:.0%} of the "
            "arrival rate; unstable = the queue grows without bound on most seeds",
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
        parts.append("the queue grows without bound at no rate tried")
    return f"{target:,.3g} req/s: " + "; ".join(parts)


def saturation_verdicts(rep: SaturationReport) -> list[Verdict]:
    """The SLO knee and the unstable rate, each with what it was measured on, and the state and
    headroom at the target rate."""
    scope = scope_text(rep)
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
                text=f"the SLO holds on every seed up to {_rate(rep.goodput_knee_rps)} req/s{nxt}, {scope}",
            )
        )
    grows = (
        f"the queue grows without bound from {_rate(rep.saturation_rps)} req/s "
        f"(the queue test passes at {_rate(rep.max_stable_rps)} req/s)"
        if rep.saturation_rps is not None
        else "the queue grows without bound at no rate tried"
    )
    out.append(Verdict(key="saturation", label="saturation", status="info", text=f"{grows}, {scope}"))
    if rep.target_rate_rps is not None:
        out.append(_target_verdict(rep, rep.target_rate_rps))
    return out


def _target_verdict(rep: SaturationReport, target: float) -> Verdict:
    at = min(rep.points, key=lambda p: abs(p.rate_rps - target), default=None)
    state = point_state(at) if at is not None else str(rep.status_at_target)
    slo_ok = at.slo_ok if at is not None else None
    good = state == "stable" and slo_ok is not False
    said = slo_ok is None or state == OVER_SLO
    words = state + ("" if said else f", {_slo_word(slo_ok)} the SLO")
    text = headroom_text(
        target,
        rep.goodput_knee_rps,
        rep.knee_headroom,
        rep.saturation_rps,
        rep.headroom,
        rep.slo is not None,
    )
    return Verdict(
        key="target",
        label="at the target rate",
        status="pass" if good else "fail",
        text=text.replace(": ", f": {words}; ", 1),
    )


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


def _marks(rep: SaturationReport) -> list[Mark]:
    marks = []
    if rep.goodput_knee_rps is not None:
        marks.append(Mark(x=rep.goodput_knee_rps, label=f"SLO knee {rep.goodput_knee_rps:,.3g}"))
    if rep.saturation_rps is not None:
        marks.append(Mark(x=rep.saturation_rps, label=f"unstable {rep.saturation_rps:,.3g}"))
    return marks


def _rate_curve(rep: SaturationReport, key: str, title: str, ys: list[float], unit: str) -> Series:
    return Series(
        key=key,
        title=title,
        x_label="arrival rate",
        x_unit="req/s",
        y_label=title,
        y_unit=unit,
        x=[p.rate_rps for p in rep.points],
        y=ys,
        kind="line",
        help=define(key.removesuffix("_curve")),
    )


def curve_series(rep: SaturationReport) -> list[Series]:
    """TTFT and throughput against offered load (the knee and unstable rate marked), goodput and
    output tokens per second against the arrival rate."""
    ttft_cap = rep.slo.caps().get("ttft") if rep.slo is not None else None
    marks = _marks(rep)
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
    goodput = [p.goodput_rps.mean for p in rep.points]
    tokens = [p.output_tokens_per_s.mean for p in rep.points]
    return [
        latency,
        throughput,
        _rate_curve(rep, "goodput_curve", "goodput", goodput, "req/s"),
        _rate_curve(rep, "output_token_throughput_curve", "output tokens/s", tokens, "tok/s"),
    ]


def view_text(rep: SaturationReport) -> list[str]:
    """The sweep's size, the knee and the unstable rate with what they were measured on, and the
    rates where the trace ended before the engine fell behind for good."""
    text = [f"{rep.num_simulations} simulations; KV blocks per replica {rep.num_gpu_blocks:,}"]
    found = []
    if rep.goodput_knee_rps is not None:
        found.append(
            f"SLO knee (highest rate where the SLO holds on every seed) at {rep.goodput_knee_rps:,.3g} req/s"
        )
    if rep.saturation_rps is not None:
        found.append(f"unstable from {rep.saturation_rps:,.3g} req/s")
    if found:
        text.append(f"{'; '.join(found)} {scope_text(rep)}")
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
    return text


def speculation_series(rep: SaturationReport) -> Series | None:
    """TPOT p50 with and without speculation (None: the deployment does not speculate)."""
    sp = rep.speculation
    if sp is None:
        return None
    return Series(
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


def saturation_view(rep: SaturationReport) -> Section:
    """The curve as a table and as series against the arrival rate, with the two thresholds."""
    tables = [curve_table(rep)]
    series = curve_series(rep)
    verdicts = saturation_verdicts(rep)
    spec_table, spec_verdict, spec_series = (
        speculation_table(rep),
        speculation_verdict(rep),
        speculation_series(rep),
    )
    if spec_table is not None and spec_verdict is not None and spec_series is not None:
        tables.append(spec_table)
        verdicts.append(spec_verdict)
        series.append(spec_series)
    return Section(
        key="saturation",
        title="saturation",
        tables=tables,
        series=series,
        verdicts=verdicts,
        text=view_text(rep),
    )


__all__ = [
    "KEEPS_UP",
    "OVER_SLO",
    "curve_table",
    "headroom_text",
    "point_state",
    "saturation_verdicts",
    "saturation_view",
    "scope_text",
    "speculation_table",
    "speculation_verdict",
    "state_words",
    "workload_text",
]
