"""The view of a recovery plan: the decision matrix (job × MIGRATE_STATE / COLD_RESTART, costs)."""

from __future__ import annotations

from typing import Any

from servesim.cluster.recovery.models import RecoveryPlan
from servesim.views.model import Column, Kpi, Section, Table, Verdict


def decision_table(plan: RecoveryPlan) -> Table:
    cols = [
        Column(key="job_id", label="job", kind="str"),
        Column(key="strategy", label="strategy", kind="str"),
        Column(key="target", label="target", kind="str"),
        Column(
            key="recompute_tokens",
            label="recompute",
            unit="tokens",
            kind="int",
            help="Tokens whose KV the target computes again.",
        ),
        Column(
            key="moved_tokens",
            label="moved",
            unit="tokens",
            kind="int",
            help="Tokens whose KV is transferred (0 for COLD_RESTART).",
        ),
        Column(
            key="migrate_ms", label="migrate", unit="ms", help="MIGRATE_STATE: setup + transfer + the rest."
        ),
        Column(key="cold_restart_ms", label="restart", unit="ms", help="COLD_RESTART: queue + prefill."),
        Column(
            key="est_recovery_ms", label="chosen", unit="ms", help="Estimated time of the chosen strategy."
        ),
        Column(
            key="break_even_gbps",
            label="break-even",
            unit="Gb/s",
            decimals=2,
            help="Link speed above which migrating beats recomputing.",
        ),
        Column(key="reason", label="why", kind="str"),
    ]
    rows: list[list[Any]] = [
        [
            d.job_id,
            str(d.strategy),
            d.target,
            d.recompute_tokens,
            d.moved_tokens,
            d.migrate_ms,
            d.cold_restart_ms,
            d.est_recovery_ms,
            d.break_even_gbps,
            d.reason,
        ]
        for d in plan.scheduled_migrations
    ]
    return Table(key="decisions", title=f"jobs of {plan.interrupted_node}", columns=cols, rows=rows)


def recovery_view(plan: RecoveryPlan) -> Section:
    tables = [decision_table(plan)]
    if plan.invalid_jobs:
        tables.append(
            Table(
                key="invalid_jobs",
                title="jobs left out",
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
    status = "pass" if str(plan.capacity_status) == "SUFFICIENT" else "warn"
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
        verdicts=[Verdict(key="capacity", label="capacity", status=status, text=str(plan.capacity_status))],
        text=list(plan.assumptions),
    )


__all__ = ["decision_table", "recovery_view"]
