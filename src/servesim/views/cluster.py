"""The view of a cluster run with failures: recovery strategies side by side, the planner's
per-request decisions, and what the failure cost the interrupted requests.

Reads the ``servesim cluster --json`` document (its ``strategies`` rows, ``failures``, and the
optional ``decisions`` / ``num_starved`` sections), so a saved run renders without re-simulating.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servesim.views.glossary import define
from servesim.views.model import Column, Kpi, Section, Table, Verdict

STRATEGY_COLUMNS = [
    Column(key="strategy", label="recovery", kind="str"),
    Column(key="num_finished", label="finished", kind="int"),
    Column(key="num_unfinished", label="unfinished", kind="int"),
    Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", help=define("ttft_ms")),
    Column(key="e2e_p99_ms", label="E2E p99", unit="ms", help=define("e2e_ms")),
    Column(key="interrupted", label="interrupted", kind="int", help="Requests taken off a failed replica."),
    Column(
        key="interrupted_e2e_p99_ms",
        label="interrupted E2E p99",
        unit="ms",
        help="E2E p99 of those requests.",
    ),
    Column(
        key="migrated", label="migrated", kind="int", help="Recovered by moving their KV (MIGRATE_STATE)."
    ),
    Column(key="restarted", label="restarted", kind="int", help="Recovered by recomputing (COLD_RESTART)."),
    Column(key="tokens_recomputed", label="recomputed", unit="tokens", kind="int"),
    Column(key="gb_moved", label="moved", unit="GB", decimals=2, help="KV bytes sent over the link."),
]

DECISION_COLUMNS = [
    Column(key="req_id", label="request", kind="str"),
    Column(key="time_s", label="at", unit="s", decimals=2),
    Column(key="from_node", label="from", kind="str"),
    Column(key="to_node", label="to", kind="str"),
    Column(key="strategy", label="strategy", kind="str"),
    Column(key="tokens_moved", label="KV moved", unit="tokens", kind="int"),
    Column(key="recompute_tokens", label="recomputed", unit="tokens", kind="int"),
    Column(
        key="delay_s",
        label="transfer",
        unit="ms",
        decimals=1,
        help="Time until the request reaches its target.",
    ),
]


OFFLOAD_COLUMNS = [
    Column(key="run", label="run", kind="str"),
    Column(key="replica", label="replica", kind="str"),
    Column(
        key="gpu_hit_pct",
        label="GPU hit",
        unit="%",
        help="Prompt tokens found in the GPU prefix cache (first admissions, as vLLM).",
    ),
    Column(
        key="cpu_hit_pct",
        label="CPU hit",
        unit="%",
        help="Of the tokens beyond the GPU hit, those the CPU tier supplied (vLLM's connector stats).",
    ),
    Column(key="loaded_tokens", label="loaded", unit="tokens", kind="int", help="Loaded from the CPU tier."),
    Column(key="stored_tokens", label="stored", unit="tokens", kind="int", help="Stored to the CPU tier."),
    Column(
        key="recomputed_tokens",
        label="recomputed",
        unit="tokens",
        kind="int",
        help="Computed again after a preemption.",
    ),
    Column(key="chunks_evicted", label="evicted", unit="chunks", kind="int"),
]


def _pct(x: Any) -> float | None:
    return None if x is None else 100.0 * float(x)


def offload_table(tiers: Mapping[str, Any]) -> Table:
    """The replicas' CPU offload tiers under each run: the fleet's row, then each replica's."""
    rows: list[list[Any]] = []
    for run, doc in tiers.items():
        for name, off in [("fleet", doc["fleet"]), *doc.get("replicas", {}).items()]:
            rows.append(
                [
                    run,
                    name,
                    _pct(off.get("gpu_hit_rate")),
                    _pct(off.get("cpu_hit_rate")),
                    off["loaded_tokens"],
                    off["stored_tokens"],
                    off["recomputed_tokens"],
                    off["chunks_evicted"],
                ]
            )
    return Table(
        key="offload_tiers",
        title="CPU offload tiers (fleet, then each replica)",
        columns=OFFLOAD_COLUMNS,
        rows=rows,
        notes=["a replica back from a failure starts with an empty tier; the fleet row sums every tier"],
    )


LORA_COLUMNS = [
    Column(key="strategy", label="run", kind="str"),
    Column(key="replica", label="replica", kind="str"),
    Column(key="max_loras", label="max_loras", kind="int", help="Adapters a replica's batch may hold."),
    Column(
        key="skipped_request_steps",
        label="slot waits",
        kind="int",
        help="Request-steps a waiting request was left behind because its adapter would exceed max_loras.",
    ),
    Column(key="gpu_loads", label="GPU loads", kind="int", help="Adapters copied into a GPU slot."),
    Column(key="disk_reads", label="disk reads", kind="int", help="Of them, read from disk first."),
    Column(key="load_s", label="load", unit="s", decimals=2, help="Step time the loads added."),
]


def lora_table(adapters: Mapping[str, Any]) -> Table:
    """The replicas' LoRA adapters under each run: the fleet's row (the replicas' sums), then each
    replica's."""
    rows: list[list[Any]] = []
    for run, doc in adapters.items():
        for name, lo in [("fleet", doc["fleet"]), *doc.get("replicas", {}).items()]:
            rows.append([run, name, *(lo.get(c.key) for c in LORA_COLUMNS[2:])])
    return Table(
        key="lora",
        title="LoRA adapters (fleet, then each replica)",
        columns=LORA_COLUMNS,
        rows=rows,
        notes=[
            "each replica applies its own max_loras and loads into its own slots; the fleet row sums "
            "the waits and loads (a replica back from a failure loads its adapters again)"
        ],
    )


def _strategy_cell(row: Mapping[str, Any], key: str) -> Any:
    """A strategy row's value; the interrupted requests' latency is missing when none was."""
    if key == "interrupted_e2e_p99_ms" and not row.get("interrupted"):
        return None
    return row.get(key)


def cluster_view(doc: Mapping[str, Any], *, max_decisions: int = 50) -> Section:
    rows = list(doc.get("strategies", []))
    failures = list(doc.get("failures", []))
    compared = bool(failures) or len(rows) > 1  # an older document ran every strategy without one
    # without a failure the recovery columns would all be zero: the run's own figures only
    columns = STRATEGY_COLUMNS if compared else STRATEGY_COLUMNS[:5]
    table = Table(
        key="strategies",
        title="recovery strategies compared (same trace, same failures)"
        if compared
        else "one run: no failure injected, nothing to recover",
        columns=columns,
        rows=[[_strategy_cell(r, c.key) for c in columns] for r in rows],
    )
    text = [
        "failures: "
        + "; ".join(
            f"{f['node']} at {float(f['time_s']):g} s"
            + (f", back after {float(f['recover_after_s']):g} s" if f.get("recover_after_s") else "")
            for f in failures
        )
        if failures
        else "no failure injected"
    ]
    link = doc.get("link") or {}
    if link:
        text.append(
            f"KV of {link.get('model')} over {link.get('bandwidth_gbps')} Gbit/s per TP rank, "
            f"checkpointing {link.get('kv_checkpointing')}"
        )
    tables = [table]
    if doc.get("offload"):
        tables.append(offload_table(doc["offload"]))
    if doc.get("lora"):
        tables.append(lora_table(doc["lora"]))
    decisions = _decisions_table(doc, max_decisions)
    if decisions is not None:
        tables.append(decisions)
    kpis, verdicts = _recovery_judgement(doc, rows)
    return Section(
        key="cluster", title="cluster with failures", kpis=kpis, tables=tables, verdicts=verdicts, text=text
    )


def _decisions_table(doc: Mapping[str, Any], max_decisions: int) -> Table | None:
    """The planner's decision for each interrupted request, the first ``max_decisions`` of them
    (a long failure interrupts thousands; the note says how many were left out)."""
    decisions = list(doc.get("decisions") or [])
    if not decisions:
        return None
    shown = decisions[:max_decisions]
    return Table(
        key="decisions",
        title="the planner's decision for each interrupted request",
        columns=DECISION_COLUMNS,
        rows=[
            [(float(d[c.key]) * 1000 if c.key == "delay_s" else d.get(c.key)) for c in DECISION_COLUMNS]
            for d in shown
        ],
        notes=[f"first {len(shown)} of {len(decisions)}"] if len(shown) < len(decisions) else [],
    )


def _recovery_judgement(doc: Mapping[str, Any], rows: list[Any]) -> tuple[list[Kpi], list[Verdict]]:
    """The best recovery strategy's E2E p99 against the run without the failure, whether any
    strategy lost requests, and the STARVED count when the document has one."""
    kpis: list[Kpi] = []
    verdicts: list[Verdict] = []
    base = next((r for r in rows if r.get("strategy") == "no failure"), None)
    best = min(
        (r for r in rows if r.get("strategy") != "no failure"), key=lambda r: r["e2e_p99_ms"], default=None
    )
    if best is not None:
        kpis.append(
            Kpi(
                key="best_recovery_e2e_p99_ms",
                label=f"E2E p99 ({best['strategy']})",
                value=best["e2e_p99_ms"],
                unit="ms",
                help=define("e2e_ms"),
            )
        )
        kpis.append(
            Kpi(
                key="interrupted",
                label="interrupted requests",
                value=best["interrupted"],
                unit=None,
                decimals=0,
            )
        )
        lost = [r["strategy"] for r in rows if r.get("num_unfinished")]
        verdicts.append(
            Verdict(
                key="recovery",
                label="recovery",
                status="fail" if lost else "pass",
                text=(
                    f"{best['strategy']} recovers best: E2E p99 {best['e2e_p99_ms']:,.0f} ms"
                    + (f" vs {base['e2e_p99_ms']:,.0f} ms without the failure" if base else "")
                    + (f"; requests left unfinished under {', '.join(lost)}" if lost else "; no request lost")
                ),
            )
        )
    starved = doc.get("num_starved")
    if starved is not None:
        kpis.append(
            Kpi(key="starved", label="STARVED", value=starved, unit=None, decimals=0, help=define("starved"))
        )
        verdicts.append(
            Verdict(
                key="starvation",
                label="starvation",
                status="warn" if starved else "pass",
                text=f"{starved} requests were preempted often enough to be flagged STARVED"
                if starved
                else "no request was flagged STARVED",
            )
        )
    return kpis, verdicts


__all__ = ["cluster_view"]
