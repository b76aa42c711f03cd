"""A disaggregated run's human output (``servesim cluster --prefill-replicas N --decode-replicas
M``, the dashboard's ``--headless``): each leg's share of the time, the pools, the failures."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from servesim.cli.common import emit, said_written
from servesim.cli.render import print_section
from servesim.report.documents import cluster_answer_document
from servesim.services.cluster import (
    LEGS,
    RECOVERY_ACTIONS,
    DisaggregatedAnswer,
    PDResult,
    PDSummary,
    link_preset,
)
from servesim.views.disagg import disagg_view


def print_pd(answer: DisaggregatedAnswer, as_json: bool, written: Path | None = None) -> None:
    """The disaggregated run's summary; ``--json`` (and ``--out``): its ``disaggregated`` document
    (``report.documents.cluster_answer_document``: the pools, the ``ClusterSpec`` it ran, the
    result and its view), the one every interface writes for the same run; ``written``: the
    ``--out`` file."""
    if (as_json or written is not None) and emit(
        cluster_answer_document(answer), as_json=as_json, out=written
    ):
        return
    res, spec, title = answer.result, answer.pools, answer.title
    timed_as = answer.prepared.resolved.timed_as
    s = res.summary
    link = link_preset(spec.link)
    out = Console(highlight=False)
    out.print(title)
    out.print(f"timed as: {timed_as}")
    short = (
        f"short prompts (< {spec.short_prompt_tokens} tokens) prefilled on the decode replica: {s.num_local}"
        if spec.short_prompt_tokens
        else "short-prompt threshold off"
        + (f" ({s.num_local} prefilled on a decode replica after a loss)" if s.num_local else "")
    )
    out.print(
        f"{spec.prefill.replicas}P{spec.decode.replicas}D, link {spec.link} "
        f"({link.bandwidth_gbps:g} Gbit/s per TP rank, {link.setup_latency_ms:g} ms setup), {short}"
    )
    if not s.num_requests:  # as simulate says it: no latency of nobody, no "pass"
        why = (
            f"{s.num_rejected} rejected, {s.num_unfinished} never decoded"
            if s.num_rejected or s.num_unfinished
            else "no requests"
        )
        out.print(f"no request was served ({why}): nothing to measure (--json gives the empty report)")
        if res.failures:
            print_pd_failures(out, res)
        said_written(written)
        return
    tpot50 = f"{s.tpot_p50_ms:.1f}" if s.tpot_p50_ms is not None else "-"
    tpot99 = f"{s.tpot_p99_ms:.1f}" if s.tpot_p99_ms is not None else "-"
    out.print(f"TTFT p50/p99 {s.ttft_p50_ms:.1f} / {s.ttft_p99_ms:.1f} ms")
    out.print(f"TPOT p50/p99 {tpot50} / {tpot99} ms")
    out.print(f"E2E  p50/p99 {s.e2e_p50_ms:.1f} / {s.e2e_p99_ms:.1f} ms")
    out.print(f"output tokens/s {s.output_tokens_per_s:.1f}; KV moved {s.transfer_gb:.3f} GB")
    if s.num_rejected:
        out.print(
            f"rejected (not in the latencies): {s.num_rejected} of "
            f"{s.num_requests + s.num_rejected + s.num_unfinished}"
        )
    for line in slo_lines(s):
        out.print(line)
    out.print(f"per leg over {s.num_disaggregated} disaggregated requests (mean / p50 / p99 ms):")
    for leg in LEGS:
        x = s.legs[leg]
        out.print(f"  {leg:<14} {x.mean_ms:10.1f} {x.p50_ms:10.1f} {x.p99_ms:10.1f}")
    out.print(f"  link wait p99 {s.link_wait_p99_ms:.1f} ms (part of transfer)")
    if res.failures:
        print_pd_failures(out, res)
    print_section(disagg_view(res, spec, title=title), out, tables=["pools"], verdicts=False, text=False)
    said_written(written)


def slo_lines(s: PDSummary) -> list[str]:
    """The SLO's verdict, as ``simulate`` words it: each p99 against its cap, then the goodput
    and how many requests were good (nothing without an SLO)."""
    if s.slo is None or s.num_good is None or s.goodput is None:
        return []
    p99 = {"ttft_ms": s.ttft_p99_ms, "tpot_ms": s.tpot_p99_ms, "e2e_ms": s.e2e_p99_ms}
    parts = []
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")):
        cap = getattr(s.slo, key)
        if cap is None:
            continue
        got = p99[key]
        verdict = "n/a" if got is None else ("pass" if got <= cap else "FAIL")
        shown_p99 = "-" if got is None else f"{got:.1f}"
        parts.append(f"{label} p99 {shown_p99} ms vs {cap:g} ms {verdict}")
    total = s.num_requests + s.num_unfinished
    return [
        "SLO: " + "; ".join(parts),
        f"goodput {s.goodput:.2f} req/s ({s.num_good:,} of {total:,} requests meet the SLO, "
        f"{(s.good_fraction or 0.0):.1%})",
    ]


def print_pd_failures(out: Console, res: PDResult) -> None:
    """What failed, and what became of the requests it held."""
    s = res.summary
    out.print("failures:")
    for f in res.failures:
        back = f", back after {f.recover_after_s:g} s" if f.recover_after_s is not None else ", not back"
        out.print(f"  {f.node} ({f.pool}) lost at {f.time_s:g} s{back}: {f.requests} requests touched")
    out.print("recovered (requests):")
    for action, what in RECOVERY_ACTIONS.items():
        n = s.recoveries.get(action, 0)
        if n:
            out.print(f"  {action:<17} {n:6d}  {what}")
    if not s.recoveries:
        out.print("  none: no request was on a lost replica")
    out.print(
        f"transfers: {s.transfer_legs} legs, {s.cut_transfers} cut off by a loss; "
        f"unfinished (no decode replica came back): {s.num_unfinished}"
    )


__all__ = ["print_pd", "print_pd_failures", "slo_lines"]
