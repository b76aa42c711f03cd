"""The view of a rescheduling plan: the re-admission order, projected completions, SLA verdicts."""

from __future__ import annotations

from typing import Any

from servesim.resched.models import ReschedulePlan
from servesim.views.model import Column, Kpi, Section, Table, Verdict


def queue_table(plan: ReschedulePlan, title: str | None = None) -> Table:
    cols = [
        Column(key="position", label="#", kind="int"),
        Column(key="req_id", label="req_id", kind="str"),
        Column(key="admitted_ms", label="start", unit="ms", help="When it gets a batch slot, from now."),
        Column(
            key="completion_ms", label="done", unit="ms", help="When its last token is produced, from now."
        ),
        Column(key="sla_budget_ms", label="SLA", unit="ms"),
        Column(key="slack_ms", label="slack", unit="ms", help="SLA budget minus projected completion."),
        Column(key="violates", label="misses SLA", kind="str"),
        Column(
            key="reused_tokens", label="reused", kind="int", help="Processed tokens recovered from the cache."
        ),
        Column(key="recomputed_tokens", label="recomputed", kind="int"),
    ]
    rows: list[list[Any]] = [
        [
            r.position + 1,
            r.req_id + (" (aged)" if r.aged else ""),
            r.admitted_ms,
            r.completion_ms,
            r.sla_budget_ms,
            r.slack_ms,
            "yes" if r.violates else "no",
            r.reused_tokens,
            r.recomputed_tokens,
        ]
        for r in plan.requests
    ]
    return Table(
        key="queue", title=title or f"re-admission order ({plan.policy.value})", columns=cols, rows=rows
    )


def resched_view(plan: ReschedulePlan, title: str | None = None) -> Section:
    """The re-admission order with projections, the savings and the SLA verdict, the timing."""
    verdict = (
        f"{plan.num_violations} of {len(plan.requests)} projected to miss their SLA"
        if plan.sla_violation_projected
        else "no SLA violation projected"
    )
    summary = (
        f"prefix-cache savings {plan.prefix_cache_savings_tokens:,} tokens, {plan.recomputed_tokens:,} "
        f"recomputed; {verdict}; last completion {plan.makespan_ms:,.1f} ms"
    )
    timing = plan.step_time_model
    shown = {k: v for k, v in timing.items() if k != "kind" and not isinstance(v, dict | list)}
    if isinstance(timing.get("profile"), dict):
        shown["profile"] = timing["profile"].get("name")
    params = ", ".join(f"{k}={v}" for k, v in shown.items())
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
            Kpi(key="makespan_ms", label="last completion", unit="ms", value=plan.makespan_ms, decimals=1),
        ],
        tables=[queue_table(plan, title)],
        verdicts=[
            Verdict(
                key="sla",
                label="SLA",
                status="fail" if plan.sla_violation_projected else "pass",
                text=summary,
            )
        ],
        text=[f"step time: {timing.get('kind', 'custom')} model ({params})"]
        + [f"assumed: {a}" for a in plan.assumptions],
    )


__all__ = ["queue_table", "resched_view"]
