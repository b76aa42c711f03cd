"""The view of a recovery plan: the decision matrix (job × MIGRATE_STATE / COLD_RESTART, costs)."""

from __future__ import annotations

from typing import Any

from servesim.cluster.recovery.models import RecoveryPlan
from servesim.views.model import Column, Kpi, Section, Table, Verdict


def decision_table(plan: RecoveryPlan) -> Table:
    """The decision matrix: one row per job (the reasons are the view's text: they are long)."""
    cols = [
        Column(key="job_id", label="job", kind="str"),
        Column(key="strategy", label="strategy", kind="str"),
        Column(key="target", label="target", kind="str"),
        Column(key="num_tokens", label="tokens", kind="int", help="Prompt plus generated tokens."),
        Column(
            key="recompute_tokens",
            label="recompute",
            kind="int",
            help="Tokens whose KV the target computes again.",
        ),
        Column(
            key="mb_moved", label="moved", unit="MB", help="KV bytes transferred, all TP ranks (0: restart)."
        ),
        Column(
            key="cold_restart_ms",
            label="cold",
            unit="ms",
            help="COLD_RESTART once admitted: queue + prefill.",
        ),
        Column(
            key="migrate_ms", label="migrate", unit="ms", help="MIGRATE_STATE: setup + transfer + the rest."
        ),
        Column(key="est_recovery_ms", label="est", unit="ms", help="Estimated time of the chosen strategy."),
        Column(key="waits", label="waits", kind="bool", help="Waits for capacity on the target."),
        Column(
            key="break_even_gbps",
            label="break-even",
            unit="Gbps",
            decimals=2,
            help="Link speed above which migrating beats recomputing (none: never).",
        ),
    ]
    rows: list[list[Any]] = [
        [
            d.job_id,
            str(d.strategy),
            d.target,
            d.num_tokens,
            d.recompute_tokens,
            d.bytes_to_move / 1e6,
            d.cold_restart_ms,
            d.migrate_ms,
            d.est_recovery_ms,
            d.waits_for_capacity,
            d.break_even_gbps,
        ]
        for d in plan.scheduled_migrations
    ]
    where = f"{plan.interrupted_node} @ {plan.preemption_timestamp}" + (
        f" ({plan.batch_id})" if plan.batch_id else ""
    )
    return Table(key="decisions", title=f"recovery plan for {where}", columns=cols, rows=rows)


def recovery_view(plan: RecoveryPlan) -> Section:
    tables = [decision_table(plan)]
    if plan.invalid_jobs:
        tables.append(
            Table(
                key="invalid_jobs",
                title="invalid jobs (excluded from the plan and the totals)",
                columns=[
                    Column(key="index", label="#", kind="int"),
                    Column(key="job_id", label="job", kind="str"),
                    Column(key="reason", label="reason", kind="str"),
                ],
                rows=[[j.index, j.job_id, j.reason] for j in plan.invalid_jobs],
            )
        )
    if plan.waiting_jobs:
        tables.append(
            Table(
                key="waiting_jobs",
                title="jobs waiting for capacity",
                columns=[
                    Column(key="job_id", label="job", kind="str"),
                    Column(key="target", label="target", kind="str"),
                    Column(key="blocks_needed", label="blocks", kind="int"),
                    Column(key="wait_ms", label="wait", unit="ms"),
                    Column(key="reason", label="reason", kind="str"),
                ],
                rows=[[w.job_id, w.target, w.blocks_needed, w.wait_ms, w.reason] for w in plan.waiting_jobs],
            )
        )
    cap = str(plan.capacity_status)
    status = "pass" if cap == "SUFFICIENT" else "fail"
    totals = (
        f"{cap}; {plan.num_migrations} MIGRATE_STATE, {plan.num_cold_restarts} COLD_RESTART; "
        f"total_recompute_tokens {plan.total_recompute_tokens:,}; "
        f"bytes to move {plan.total_bytes_to_move / 1e9:,.3f} GB"
    )
    return Section(
        key="recovery",
        title=f"recovery of {plan.interrupted_node}",
        kpis=[
            Kpi(
                key="total_recompute_tokens",
                label="recompute",
                value=float(plan.total_recompute_tokens),
                unit="tokens",
                decimals=0,
            ),
            Kpi(
                key="num_migrations",
                label="migrations",
                value=float(plan.num_migrations),
                unit=None,
                decimals=0,
            ),
            Kpi(
                key="num_cold_restarts",
                label="cold restarts",
                value=float(plan.num_cold_restarts),
                unit=None,
                decimals=0,
            ),
        ],
        tables=tables,
        verdicts=[Verdict(key="capacity", label="capacity", status=status, text=totals)],
        text=[f"{d.job_id}: {d.reason}" for d in plan.scheduled_migrations],
    )


__all__ = ["decision_table", "recovery_view"]
