"""The view of a rescheduling plan: the re-admission order, projected completions, SLA verdicts."""

from __future__ import annotations

from typing import Any

from servesim.resched.models import ReschedulePlan
from servesim.views.model import Column, Kpi, Section, Table, Verdict


def queue_table(plan: ReschedulePlan) -> Table:
    cols = [
        Column(key="position", label="#", kind="int"),
        Column(key="req_id", label="request", kind="str"),
        Column(key="tokens_remaining", label="remaining", unit="tokens", kind="int"),
        Column(
            key="reused_tokens",
            label="reused",
            unit="tokens",
            kind="int",
            help="Processed tokens recovered from the prefix cache.",
        ),
        Column(key="recomputed_tokens", label="recomputed", unit="tokens", kind="int"),
        Column(key="admitted_ms", label="admitted", unit="ms", help="When it gets a batch slot, from now."),
        Column(
            key="completion_ms", label="done", unit="ms", help="When its last token is produced, from now."
        ),
        Column(key="sla_budget_ms", label="SLA", unit="ms"),
        Column(key="slack_ms", label="slack", unit="ms", help="SLA budget minus projected completion."),
        Column(key="verdict", label="verdict", kind="str"),
    ]
    rows: list[list[Any]] = [
        [
            r.position,
            r.req_id,
            r.tokens_remaining,
            r.reused_tokens,
            r.recomputed_tokens,
            r.admitted_ms,
            r.completion_ms,
            r.sla_budget_ms,
            r.slack_ms,
            ("VIOLATES" if r.violates else "meets") + (" (aged)" if r.aged else ""),
        ]
        for r in plan.requests
    ]
    return Table(key="queue", title=f"re-admission order ({plan.policy})", columns=cols, rows=rows)


def resched_view(plan: ReschedulePlan) -> Section:
    status = "fail" if plan.sla_violation_projected else "pass"
    text = (
        f"{plan.num_violations} of {len(plan.requests)} requests projected to miss their SLA"
        if plan.sla_violation_projected
        else f"all {len(plan.requests)} requests projected within their SLA"
    )
    return Section(
        key="resched",
        title="rescheduling",
        kpis=[
            Kpi(
                key="prefix_cache_savings_tokens",
                label="cache savings",
                unit="tokens",
                value=float(plan.prefix_cache_savings_tokens),
                decimals=0,
            ),
            Kpi(
                key="recomputed_tokens",
                label="recomputed",
                unit="tokens",
                value=float(plan.recomputed_tokens),
                decimals=0,
            ),
            Kpi(key="makespan_ms", label="makespan", unit="ms", value=plan.makespan_ms, decimals=1),
        ],
        tables=[queue_table(plan)],
        verdicts=[Verdict(key="sla", label="SLA", status=status, text=text)],
        text=list(plan.assumptions),
    )


__all__ = ["queue_table", "resched_view"]
