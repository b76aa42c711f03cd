"""The view of a disaggregated run (prefill and decode pools, KV moved between them).

A pure function of the run's ``PDResult`` and the pools as given (``DisaggSpec``): ``servesim
cluster --prefill-replicas ... --json``, ``servesim report`` of that document and the web's run
page draw the same section.

- Headline tiles: TTFT/TPOT/E2E p99 over every leg against the SLO's caps, goodput and SLO
  attainment (with an SLO), output tokens per second, KV moved and the link wait.
- The per-leg breakdown (``leg_breakdown``): each leg's mean, p50 and p99 (prefill queue, prefill,
  transfer, decode queue, decode), stacked. The means add up to the mean E2E of the disaggregated
  requests (every request's five legs add up to its E2E); a stack of p99s is not the E2E p99 (the
  tails of the legs need not fall on one request), it shows which leg's tail is longest.
- Each leg's distribution, and TTFT/TPOT/E2E's with the SLO marked.
- The pools' table: each replica's requests prefilled and decoded (short prompts prefilled on
  their decode replica counted apart), KV sent and received.
- Failures and what became of the requests they held, when a replica was lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from servesim.cluster.pd import RECOVERY_ACTIONS, link_preset
from servesim.views.glossary import define
from servesim.views.model import Column, Histogram, Kpi, Line, Section, Series, Table, Verdict
from servesim.views.shape import histogram

if TYPE_CHECKING:
    from servesim.cluster.pd import DisaggSpec
    from servesim.cluster.pd_results import PDResult

#: The legs in the order a request runs them, as the charts name them, and the result's field.
LEG_ORDER = (
    ("prefill_queue", "prefill queue"),
    ("prefill", "prefill"),
    ("transfer", "KV transfer"),
    ("decode_queue", "decode queue"),
    ("decode", "decode"),
)
LEG_HELP = {
    "prefill_queue": "Arrival to first scheduled on the prefill replica.",
    "prefill": "First scheduled to finished on the prefill replica (max_tokens 1).",
    "transfer": "Blocks allocated on the decode replica to the KV reported landed (link queue + wire).",
    "decode_queue": "Prefill finished to blocks allocated on the decode replica.",
    "decode": "KV landed to the last token (the first decode step samples the first token).",
}
STATS = ("mean", "p50", "p99")
#: Latencies over every leg: (key, label, the result's p99 field, the SLO's field, the row's field).
LATENCY = (
    ("ttft_ms", "TTFT", "ttft_p99_ms", "ttft_ms", "ttft_s"),
    ("tpot_ms", "TPOT", "tpot_p99_ms", "tpot_ms", "tpot_s"),
    ("e2e_ms", "E2E", "e2e_p99_ms", "e2e_ms", "e2e_s"),
)


def layout_label(spec: DisaggSpec) -> str:
    """``1P2D``: the pools' sizes."""
    return f"{spec.prefill.replicas}P{spec.decode.replicas}D"


def _kpis(res: PDResult) -> list[Kpi]:
    s = res.summary
    out = []
    for key, label, p99, slo_key, _ in LATENCY:
        value = getattr(s, p99)
        cap = getattr(s.slo, slo_key) if s.slo is not None else None
        verdict = "none" if cap is None or value is None else ("pass" if value <= cap else "fail")
        out.append(
            Kpi(
                key=f"{key}_p99",
                label=f"{label} p99",
                value=value,
                unit="ms",
                slo=cap,
                verdict=verdict,
                help=(define(key) or "") + " Every leg counted.",
            )
        )
    if s.slo is not None:
        out.append(
            Kpi(
                key="goodput",
                label="goodput",
                value=s.goodput,
                unit="req/s",
                decimals=2,
                help=define("goodput"),
            )
        )
        out.append(
            Kpi(
                key="good_fraction",
                label="SLO attainment",
                value=s.good_fraction,
                unit="%",
                decimals=1,
                help=define("good_fraction"),
            )
        )
    out += [
        Kpi(
            key="output_token_throughput",
            label="output tokens/s",
            value=s.output_tokens_per_s,
            unit="tok/s",
            decimals=0,
            help=define("output_token_throughput"),
        ),
        Kpi(
            key="transfer_gb",
            label="KV moved",
            value=s.transfer_gb,
            unit="GB",
            decimals=3,
            help="KV moved from the prefill to the decode pool, every TP rank together.",
        ),
        Kpi(
            key="link_wait_p99_ms",
            label="link wait p99",
            value=s.link_wait_p99_ms,
            unit="ms",
            help="Time a transfer queued behind others on its links (part of the transfer leg).",
        ),
    ]
    return out


def leg_table(res: PDResult) -> Table:
    """leg × mean/p50/p99 in ms, over the disaggregated requests."""
    s = res.summary
    cols = [Column(key="leg", label="leg", kind="str")]
    cols += [Column(key=c, label=c, unit="ms", kind="float") for c in STATS]
    rows: list[list[Any]] = []
    for key, label in LEG_ORDER:
        x = s.legs[key]
        rows.append([label, x.mean_ms, x.p50_ms, x.p99_ms])
    notes = [] if s.num_disaggregated else ["no request was disaggregated: every prompt prefilled locally"]
    return Table(
        key="legs",
        title=f"per leg over {s.num_disaggregated:,} disaggregated requests",
        columns=cols,
        rows=rows,
        notes=notes,
    )


def leg_breakdown(res: PDResult) -> Series | None:
    """The stacked per-leg bar: mean, p50 and p99 of each leg (None: no request disaggregated)."""
    s = res.summary
    if not s.num_disaggregated:
        return None
    stats = [[getattr(s.legs[key], f"{c}_ms") for c in STATS] for key, _ in LEG_ORDER]
    mean_e2e = sum(row[0] for row in stats)
    return Series(
        key="leg_breakdown",
        title=f"where a request's time goes, per leg ({s.num_disaggregated:,} requests)",
        x_label="statistic over the requests",
        x_unit=None,
        y_label="time in the leg",
        y_unit="ms",
        x=[0.0, 1.0, 2.0],
        y=[round(v, 3) for v in stats[0]],
        kind="bar",
        categories=list(STATS),
        name=LEG_ORDER[0][1],
        lines=[
            Line(label=label, y=[round(v, 3) for v in stats[i]]) for i, (_, label) in enumerate(LEG_ORDER)
        ][1:],
        stacked=True,
        help=f"Each leg's mean, p50 and p99, stacked in the order a request runs them; the means add up "
        f"to the mean E2E of the disaggregated requests ({mean_e2e:,.1f} ms), a stack of p99s is no "
        "request's E2E. " + " ".join(f"{label}: {LEG_HELP[key]}" for key, label in LEG_ORDER),
    )


def _histograms(res: PDResult, bins: int) -> list[Histogram]:
    s = res.summary
    out = []
    for key, label, p99, slo_key, field in LATENCY:
        v = np.asarray(
            [np.nan if getattr(r, field) is None else getattr(r, field) * 1000.0 for r in res.requests],
            dtype=np.float64,
        )
        cap = getattr(s.slo, slo_key) if s.slo is not None else None
        fin = v[np.isfinite(v)]
        p50 = float(np.percentile(fin, 50)) if fin.size else None
        out.append(
            histogram(
                key,
                f"{label}, every leg counted",
                v,
                "ms",
                bins=bins,
                slo=cap,
                help=define(key),
                percentiles=(p50, None, getattr(s, p99)),
                label=label,
            )
        )
    dis = [r for r in res.requests if r.prefill_replica is not None]
    for key, label in LEG_ORDER:
        v = np.asarray([getattr(r, f"{key}_s") * 1000.0 for r in dis], dtype=np.float64)
        x = s.legs[key]
        out.append(
            histogram(
                f"leg.{key}",
                f"{label} leg",
                v,
                "ms",
                bins=bins,
                help=LEG_HELP[key],
                percentiles=(x.p50_ms, None, x.p99_ms),
                label=f"{label} time",
            )
        )
    return out


def pools_table(res: PDResult, spec: DisaggSpec) -> Table:
    """Each replica of both pools: requests prefilled and decoded, KV sent and received."""
    s = res.summary
    total = sum(r.transfer_tokens for r in res.requests)
    per_token = s.transfer_gb / total if total else 0.0
    sent: dict[str, int] = {}
    received: dict[str, int] = {}
    prefilled: dict[str, int] = {}
    decoded: dict[str, int] = {}
    local: dict[str, int] = {}
    for r in res.requests:
        decoded[r.decode_replica] = decoded.get(r.decode_replica, 0) + 1
        received[r.decode_replica] = received.get(r.decode_replica, 0) + r.transfer_tokens
        if r.prefill_replica is None:
            local[r.decode_replica] = local.get(r.decode_replica, 0) + 1
        else:
            prefilled[r.prefill_replica] = prefilled.get(r.prefill_replica, 0) + 1
            sent[r.prefill_replica] = sent.get(r.prefill_replica, 0) + r.transfer_tokens
    lost: dict[str, str] = {}
    for f in res.failures:
        back = f", back after {f.recover_after_s:g} s" if f.recover_after_s is not None else ""
        lost[f.node] = (lost[f.node] + "; " if f.node in lost else "") + f"lost at {f.time_s:g} s{back}"
    cols = [
        Column(key="replica", label="replica", kind="str"),
        Column(key="pool", label="pool", kind="str"),
        Column(key="prefilled", label="requests prefilled", kind="int"),
        Column(key="decoded", label="requests decoded", kind="int"),
        Column(key="sent", label="KV sent", unit="GB", kind="float", decimals=3),
        Column(key="received", label="KV received", unit="GB", kind="float", decimals=3),
    ]
    if lost:
        cols.append(Column(key="lost", label="failures", kind="str"))
    rows: list[list[Any]] = []
    for tag, pool_name, pool in (("p", "prefill", spec.prefill), ("d", "decode", spec.decode)):
        for i in range(pool.replicas):
            name = f"{tag}{i}"
            rows.append(
                [
                    name,
                    pool_name,
                    prefilled.get(name, 0) + local.get(name, 0),
                    decoded.get(name, 0),
                    sent.get(name, 0) * per_token,
                    received.get(name, 0) * per_token,
                    *([lost.get(name, "")] if lost else []),
                ]
            )
    notes = []
    if s.num_local:
        notes.append(
            f"{s.num_local:,} short prompts prefilled on their decode replica (counted as prefilled there)"
        )
    return Table(key="pools", title="the pools, per replica", columns=cols, rows=rows, notes=notes)


def figures_table(res: PDResult, spec: DisaggSpec) -> Table:
    s = res.summary
    link = link_preset(spec.link)
    short = (
        f"prompts under {spec.short_prompt_tokens:,} tokens prefilled on the decode replica: {s.num_local:,}"
        if spec.short_prompt_tokens
        else f"off ({s.num_local:,} prefilled on a decode replica after a loss)"
        if s.num_local
        else "off"
    )
    rows: list[list[Any]] = [
        ["layout", f"{layout_label(spec)}: {spec.model}"],
        [
            "link",
            f"{spec.link} ({link.bandwidth_gbps:g} Gbit/s per TP rank, {link.setup_latency_ms:g} ms setup, "
            f"{link.efficiency:.0%} efficiency)",
        ],
        ["short-prompt threshold", short],
        [
            "requests",
            f"{s.num_requests:,} finished ({s.num_disaggregated:,} disaggregated, {s.num_local:,} local), "
            f"{s.num_unfinished:,} unfinished",
        ],
        [
            "transfers",
            f"{s.transfer_legs:,} legs, {s.cut_transfers:,} cut off by a loss; {s.transfer_gb:.3f} GB",
        ],
        ["link wait", f"p99 {s.link_wait_p99_ms:,.1f} ms (part of the transfer leg)"],
    ]
    if s.slo is not None and s.num_good is not None and s.goodput is not None:
        total = s.num_requests + s.num_unfinished
        rows.append(["goodput", f"{s.goodput:,.2f} req/s ({s.num_good:,} of {total:,} meet the SLO)"])
    return Table.figures("figures", "the run", rows)


def _failure_tables(res: PDResult) -> list[Table]:
    if not res.failures:
        return []
    fails = Table(
        key="failures",
        title="replicas lost",
        columns=[
            Column(key="node", label="replica", kind="str"),
            Column(key="pool", label="pool", kind="str"),
            Column(key="time_s", label="lost at", unit="s", kind="float", decimals=2),
            Column(key="back", label="back after", unit="s", kind="float", decimals=2),
            Column(key="requests", label="requests touched", kind="int"),
        ],
        rows=[[f.node, f.pool, f.time_s, f.recover_after_s, f.requests] for f in res.failures],
    )
    counts = res.summary.recoveries
    rec = Table(
        key="recoveries",
        title="what became of the requests they held",
        columns=[
            Column(key="action", label="recovery", kind="str"),
            Column(key="requests", label="requests", kind="int"),
            Column(key="what", label="what it means", kind="str"),
        ],
        rows=[[a, counts[a], what] for a, what in RECOVERY_ACTIONS.items() if counts.get(a)],
        notes=[] if counts else ["no request was on a lost replica"],
    )
    return [fails, rec]


def _verdicts(res: PDResult) -> list[Verdict]:
    s = res.summary
    out = []
    if s.num_disaggregated:
        legs = {key: s.legs[key].mean_ms for key, _ in LEG_ORDER}
        top = max(legs, key=lambda k: legs[k])
        whole = sum(legs.values())
        label = dict(LEG_ORDER)[top]
        share = legs[top] / whole if whole > 0 else 0.0
        out.append(
            Verdict(
                key="longest_leg",
                label="longest leg",
                status="info",
                text=f"{label} takes {share:.0%} of a disaggregated request's mean E2E ({legs[top]:,.1f} of "
                f"{whole:,.1f} ms)",
            )
        )
    if s.slo is not None and s.good_fraction is not None:
        missed = [
            f"{label} p99 {getattr(s, p99):,.1f} ms > {getattr(s.slo, k):,.1f} ms"
            for _, label, p99, k, _ in LATENCY
            if getattr(s.slo, k) is not None
            and getattr(s, p99) is not None
            and getattr(s, p99) > getattr(s.slo, k)
        ]
        out.append(
            Verdict(
                key="slo",
                label="SLO",
                status="fail" if missed else "pass",
                text=("; ".join(missed) if missed else "every p99 within its cap")
                + f"; {s.good_fraction:.1%} of requests good",
            )
        )
    if s.num_unfinished:
        out.append(
            Verdict(
                key="unfinished",
                label="unfinished",
                status="fail",
                text=f"{s.num_unfinished:,} requests never decoded: no decode replica came back",
            )
        )
    return out


def disagg_view(res: PDResult, spec: DisaggSpec, *, title: str | None = None) -> Section:
    """The run's section (key ``disaggregated``): tiles, the per-leg breakdown, the legs' and
    the pools' tables, failures when any (the distributions are ``distributions_view``)."""
    bar = leg_breakdown(res)
    return Section(
        key="disaggregated",
        title=title or f"disaggregated run, {layout_label(spec)} over {spec.link}",
        kpis=_kpis(res),
        tables=[leg_table(res), pools_table(res, spec), figures_table(res, spec), *_failure_tables(res)],
        series=[bar] if bar is not None else [],
        verdicts=_verdicts(res),
        text=[
            "TTFT, TPOT and E2E count every leg: prefill queue, prefill, KV transfer, decode queue, decode."
        ],
    )


def distributions_view(res: PDResult, *, bins: int = 40) -> Section:
    """TTFT/TPOT/E2E over every leg (the SLO marked) and each leg's own distribution."""
    return Section(
        key="disaggregated.distributions",
        title="distributions: latencies over every leg, and each leg",
        histograms=_histograms(res, bins),
    )


def disagg_sections(res: PDResult, spec: DisaggSpec, *, title: str | None = None) -> list[Section]:
    """The sections of a disaggregated run, as the document, the report and the web show them."""
    return [disagg_view(res, spec, title=title), distributions_view(res)]


__all__ = [
    "LEG_ORDER",
    "disagg_sections",
    "disagg_view",
    "distributions_view",
    "layout_label",
    "leg_breakdown",
    "leg_table",
    "pools_table",
]
