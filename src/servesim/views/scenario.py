"""A scenario's answer in words: the table ``servesim scenario`` prints, and its reasons.

Why: the answer's fields are numbers, verdicts and sentences; its ``reasons`` and ``capacity`` are
structures that a table cell cannot show as they are (a Python dict of 17-digit floats). The table
holds the scalar answers, rounded as every other table rounds them; the capacity is one sentence;
the reasons follow as the sentences ``views.tuning.reason_text`` makes of them.
"""

from __future__ import annotations

from typing import Any

from servesim.tuning.scenario import BatchScenarioResult, ScenarioResult
from servesim.tuning.scenario_explain import ScenarioCapacity
from servesim.views.tuning import reason_text

#: Fields said below the table (sentences) or in the context line, not in it.
NOT_IN_TABLE = frozenset({"details", "reasons", "capacity"})


def cell(value: Any) -> str:
    """One answer as a table cell: floats to one decimal with thousands separators."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def _ttft(ms: float | None) -> str:
    return "" if ms is None else f" (TTFT p99 {ms:,.1f} ms)"


def capacity_text(capacity: ScenarioCapacity | None) -> str:
    """What makes an overloaded scenario stable, in one line ("-" when it is stable)."""
    if capacity is None:
        return "-"
    parts = []
    if capacity.replicas is not None:
        ttft = (
            ""
            if capacity.replicas_ttft_p99_ms is None
            else f" (TTFT p99 {capacity.replicas_ttft_p99_ms:,.1f} ms)"
        )
        parts.append(f"{capacity.replicas} replicas{ttft}")
    if capacity.kv_blocks is not None:
        ttft = "" if capacity.kv_ttft_p99_ms is None else f" (TTFT p99 {capacity.kv_ttft_p99_ms:,.1f} ms)"
        parts.append(f"one replica with {capacity.kv_blocks:,} KV blocks{ttft}")
    found = " or ".join(parts) if parts else "no replica count or KV size tried keeps the queue stable"
    return f"{found}; one replica completes {capacity.service_rps:,.2f} req/s"


def scenario_rows(result: ScenarioResult) -> list[tuple[str, str]]:
    """(field, value) of the table: every scalar answer; an empty batch says "no requests" for
    the estimates it could not make; a load scenario's capacity as a sentence."""
    data: dict[str, Any] = result.model_dump(mode="python", exclude=set(NOT_IN_TABLE))
    empty = isinstance(result, BatchScenarioResult) and result.simulated_batch_count == 0
    rows = [(k, "no requests" if empty and k.startswith("estimated_") else cell(v)) for k, v in data.items()]
    if not isinstance(result, BatchScenarioResult):
        rows.append(("capacity", capacity_text(result.capacity)))
    return rows


def reason_lines(result: ScenarioResult) -> list[str]:
    """The reasons behind a load scenario's recommendation, one sentence each (none for a batch)."""
    if isinstance(result, BatchScenarioResult):
        return []
    return [reason_text(r) for r in result.reasons]


__all__ = ["capacity_text", "cell", "reason_lines", "scenario_rows"]
