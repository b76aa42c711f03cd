"""The GPU types compared (``services.gpu_types``), for people: one row per type, the rule, the pick.

``gpu_types_view`` is a ``Section`` (the CLI prints it; the web and the report can show it): a
table of each type's price and its source, whether the model fits, the recommendation's replicas
x TP, $/hour, $ per 1M output tokens and GPU-hours a day, and why each other type was not chosen;
its text states the rule and the answer.
"""

from __future__ import annotations

from servesim.services.gpu_types import GpuTypesAnswer
from servesim.views.model import Column, Section, Table


def _fit(ok: bool, meets: bool | None) -> str:
    if not ok:
        return "no"
    return "yes" if meets is None else ("met" if meets else "missed")


def gpu_types_table(ans: GpuTypesAnswer) -> Table:
    cols = [
        Column(key="gpu", label="GPU", kind="str"),
        Column(key="usd_per_gpu_hour", label="$/GPU-hour", kind="float", decimals=3),
        Column(key="slo", label="fits / SLO", kind="str"),
        Column(key="layout", label="replicas x TP", kind="str"),
        Column(key="usd_per_hour", label="$/hour", kind="float", decimals=2),
        Column(key="usd_per_1m_output_tokens", label="$/1M output tokens", kind="float", decimals=3),
        Column(key="gpu_hours_per_day", label="GPU-hours/day", kind="float", decimals=0),
        Column(key="why", label="why not / reason", kind="str"),
    ]
    rows = []
    for r in ans.rows:
        layout = f"{r.replicas} x {r.tensor_parallel_size}" if r.replicas is not None else "-"
        mark = "* " if r.gpu == ans.cheapest else ""
        rows.append(
            [
                mark + r.gpu,
                r.usd_per_gpu_hour,
                _fit(r.feasible, r.meets_slo),
                layout,
                r.usd_per_hour,
                r.usd_per_1m_output_tokens,
                r.gpu_hours_per_day,
                "chosen" if r.gpu == ans.cheapest else (r.reason or ""),
            ]
        )
    notes = [f"{r.gpu}: {r.price_source}" for r in ans.rows]
    return Table(key="gpu_types", title="GPU types (* chosen)", columns=cols, rows=rows, notes=notes)


def gpu_types_lines(ans: GpuTypesAnswer) -> list[str]:
    """The rule, then the answer in one sentence (with its $/hour, $/1M output, GPU-hours a day)."""
    out = [f"rule: {ans.rule}"]
    best = next((r for r in ans.rows if r.gpu == ans.cheapest), None)
    if best is None:
        out.append(
            "cheapest GPU type: none meets the SLO (each row says why); widen the space or relax the SLO"
        )
        return out
    hour = "n/a" if best.usd_per_hour is None else f"${best.usd_per_hour:,.2f}/hour"
    per_m = "n/a" if best.usd_per_1m_output_tokens is None else f"${best.usd_per_1m_output_tokens:,.3g}"
    out.append(
        f"cheapest GPU type: {best.gpu}, {best.replicas} replica(s) x TP {best.tensor_parallel_size} = "
        f"{best.gpus} GPU(s): {hour}, {per_m} per 1M output tokens, "
        f"{best.gpu_hours_per_day or 0:,.0f} GPU-hours a day"
    )
    return out


def gpu_types_view(ans: GpuTypesAnswer) -> Section:
    return Section(
        key="gpu_types",
        title="The cheapest deployment across GPU types",
        tables=[gpu_types_table(ans)],
        text=gpu_types_lines(ans),
    )


__all__ = ["gpu_types_lines", "gpu_types_table", "gpu_types_view"]
