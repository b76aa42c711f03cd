"""Hypothesis strategies and small helpers for the rescheduling tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

SEED_1: dict[str, Any] = {
    "batch_capacity": 4,
    "interrupted_requests": [
        {"req_id": "req-101", "tokens_processed": 512, "tokens_remaining": 16, "sla_budget_ms": 150},
        {"req_id": "req-102", "tokens_processed": 64, "tokens_remaining": 400, "sla_budget_ms": 1200},
    ],
}
SEED_2: dict[str, Any] = {
    "batch_capacity": 1,
    "interrupted_requests": [
        {"req_id": "req-201", "tokens_processed": 4096, "tokens_remaining": 2048, "sla_budget_ms": 100},
    ],
}


@st.composite
def requests(draw: st.DrawFn, i: int, max_remaining: int = 120) -> dict[str, Any]:
    processed = draw(st.integers(0, 3000))
    r: dict[str, Any] = {
        "req_id": f"r{i}",
        "tokens_processed": processed,
        "tokens_remaining": draw(st.integers(1, max_remaining)),
        "sla_budget_ms": draw(st.floats(0.0, 3000.0, allow_nan=False)),
    }
    if draw(st.booleans()):
        r["priority"] = draw(st.integers(-2, 3))
    if draw(st.booleans()):
        r["prompt_len"] = draw(st.integers(1, 3500))
    if draw(st.booleans()):
        r["preemptions"] = draw(st.integers(0, 5))
    if draw(st.booleans()):
        r["waited_ms"] = draw(st.floats(0.0, 8000.0, allow_nan=False))
    if draw(st.integers(0, 3)) == 0:
        r["cached_tokens"] = draw(st.integers(0, processed))
    return r


@st.composite
def problems(draw: st.DrawFn, max_requests: int = 10, max_remaining: int = 120) -> dict[str, Any]:
    n = draw(st.integers(0, max_requests))
    cap = draw(st.integers(1, 8))
    data: dict[str, Any] = {
        "batch_capacity": cap,
        "interrupted_requests": [draw(requests(i, max_remaining)) for i in range(n)],
        "block_size": draw(st.sampled_from([1, 8, 16, 32, 64])),
        "cache_survives": draw(st.booleans()),
    }
    if draw(st.booleans()):
        data["max_num_batched_tokens"] = draw(st.integers(2 * cap, 4096))
    if draw(st.booleans()):
        data["step_time_ms"] = draw(st.floats(0.1, 20.0))
    # shuffle ids so that input order and id order differ
    perm = draw(st.permutations(range(n)))
    for r, k in zip(data["interrupted_requests"], perm, strict=True):
        r["req_id"] = f"r{k}"
    return data
