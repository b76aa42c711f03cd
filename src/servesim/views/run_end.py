"""What a finished live run says where its batch was: the run's summary as lines of text.

Why: when the full-screen dashboard's run ends, the batch and the queue are empty; without this
the screen goes blank just when the run has its answer. The lines are the figures ``servesim
simulate`` / ``servesim cluster`` print (``views.simulation``'s latency table, totals and SLO
verdict; a disaggregated run's ``PDSummary``), worded here once for the dashboard.
"""

from __future__ import annotations

from typing import Any

from servesim.cluster.pd_results import PDResult
from servesim.cluster.results import ClusterResult
from servesim.engine.results import SimulationResult, SimulationSummary
from servesim.views.simulation import LATENCIES, slo_of, slo_verdict, totals_table


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f} ms"


def summary_lines(summary: SimulationSummary) -> list[str]:
    """Latency p50/p99 (with the SLO), then the totals and the SLO attainment, one line each."""
    lines = []
    for key, label, slo_field in LATENCIES:
        st = getattr(summary, key)
        if st.count == 0:
            continue
        limit = slo_of(summary.slo, slo_field)
        slo = "" if limit is None else f" (SLO {_ms(limit)})"
        lines.append(f"{label:<6} p50 {_ms(st.p50)} · p99 {_ms(st.p99)}{slo}")
    lines += [f"{row[0]}: {row[1]}" for row in totals_table(summary).rows]
    if summary.slo is not None:
        lines.append(f"SLO attainment: {slo_verdict(summary).text}")
    return lines


def pd_lines(result: PDResult) -> list[str]:
    s = result.summary
    lines = [
        f"requests: {s.num_requests:,} ({s.num_disaggregated:,} disaggregated, {s.num_local:,} local, "
        f"{s.num_rejected:,} rejected, {s.num_unfinished:,} unfinished)",
        f"TTFT   p50 {_ms(s.ttft_p50_ms)} · p99 {_ms(s.ttft_p99_ms)}",
        f"TPOT   p50 {_ms(s.tpot_p50_ms)} · p99 {_ms(s.tpot_p99_ms)}",
        f"E2E    p50 {_ms(s.e2e_p50_ms)} · p99 {_ms(s.e2e_p99_ms)}",
        f"throughput: {s.output_tokens_per_s:,.0f} output tok/s; KV moved {s.transfer_gb:,.2f} GB",
    ]
    if s.good_fraction is not None and s.num_good is not None:
        lines.append(
            f"SLO attainment: {s.num_good:,} of {s.num_requests:,} requests ({s.good_fraction:.1%}) "
            "finished within every SLO"
        )
    return lines


def run_end_lines(result: Any) -> list[str]:
    """The finished run's summary: one replica's, a cluster's (all requests), or a P/D run's."""
    if isinstance(result, SimulationResult):
        return summary_lines(result.summary)
    if isinstance(result, ClusterResult):
        return summary_lines(result.summary.cluster)
    if isinstance(result, PDResult):
        return pd_lines(result)
    return []


__all__ = ["pd_lines", "run_end_lines", "summary_lines"]
