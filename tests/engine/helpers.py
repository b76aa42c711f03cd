"""Small builders for engine tests: traces from tuples, and a run that keeps the step log."""

from __future__ import annotations

from typing import Any

from servesim.engine import ConstantStepTime, EngineConfig, SimulationResult, simulate
from servesim.traces.schema import Trace

STEP = 1 / 64  # exact in binary: arrivals placed on step boundaries stay there


def trace_of(*rows: tuple[Any, ...] | dict[str, Any]) -> Trace:
    """Rows as (req_id, arrival_step, prompt_len, output_len) tuples or full dicts."""
    records = []
    for row in rows:
        if isinstance(row, dict):
            records.append(row)
        else:
            rid, step, prompt, output = row
            records.append(
                {"req_id": rid, "arrival_time_s": step * STEP, "prompt_len": prompt, "output_len": output}
            )
    return Trace.from_records(records)


def run_steps(trace: Trace, **config: Any) -> tuple[SimulationResult, list[dict[str, Any]]]:
    """Simulate with every step taking ``STEP``; returns the result and the step log."""
    log: list[dict[str, Any]] = []
    result = simulate(
        trace,
        EngineConfig(**config),
        ConstantStepTime(step_time_s=STEP),
        step_log=log.append,
        check_invariants=True,
    )
    return result, log


def by_step(log: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Step log keyed by step index on the STEP grid (an idle engine skips indices, as vLLM's)."""
    return {round(d["start_s"] / STEP): d for d in log}
