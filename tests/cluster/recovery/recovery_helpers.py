"""Shared inputs of the recovery-planner tests: the seeds' records and small survivors."""

from __future__ import annotations

import copy
from typing import Any

from servesim.cluster.recovery import TargetState
from servesim.engine import LinearStepTime

# The model the seeds' verdicts hold under (examples/inputs/README.md: on the default 8B on one H100,
# job-801's recompute is faster than its migration); the records carry it as their context.
SEED_CONTEXT: dict[str, Any] = {"model": "llama-3.1-405b-fp8", "tp": 8}

# The seeds' two examples (issue 6), as records of the seeds' shape.
SEED_801_802: dict[str, Any] = {
    "interrupted_node": "node-7",
    "preemption_timestamp": "2025-03-01T12:00:00Z",
    "network_bandwidth_gbps": 10,
    "context": SEED_CONTEXT,
    "active_jobs": [
        {"job_id": "job-801", "prompt_tokens": 1024, "generated_tokens": 128, "kv_cache_checkpointed": True},
        {"job_id": "job-802", "prompt_tokens": 2048, "generated_tokens": 64, "kv_cache_checkpointed": False},
    ],
}
SEED_990: dict[str, Any] = {
    "interrupted_node": "node-9",
    "preemption_timestamp": "2025-03-01T12:05:00Z",
    "network_bandwidth_gbps": 1,
    "context": SEED_CONTEXT,
    "active_jobs": [
        {"job_id": "job-990", "prompt_tokens": 8192, "generated_tokens": 512, "kv_cache_checkpointed": True},
    ],
}


def seed(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(record)
    out.update(changes)
    return out


def job(job_id: str, prompt: int, generated: int, checkpointed: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "prompt_tokens": prompt,
        "generated_tokens": generated,
        "kv_cache_checkpointed": checkpointed,
        **extra,
    }


def record(jobs: list[Any], gbps: float = 10.0, **extra: Any) -> dict[str, Any]:
    return {
        "interrupted_node": "node-0",
        "preemption_timestamp": "2025-01-01T00:00:00Z",
        "network_bandwidth_gbps": gbps,
        "active_jobs": jobs,
        **extra,
    }


def linear_target(name: str, free_blocks: int = 10_000, free_slots: int = 64, **kw: Any) -> TargetState:
    """A survivor timed by the engine's linear step-time model (fast, independent of servesim.perf)."""
    return TargetState(
        name=name, step_time=LinearStepTime(), free_blocks=free_blocks, free_slots=free_slots, **kw
    )
