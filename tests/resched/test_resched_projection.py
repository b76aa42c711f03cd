"""Completion projections: a step loop timed by the step-time model of each actual batch."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resched_strategies import problems

from servesim.engine import BatchComposition, ConstantStepTime, EngineConfig, LinearStepTime, simulate
from servesim.resched import Job, project, reschedule
from servesim.traces.schema import Trace


class Spy:
    """A step-time model that records every batch it is asked about."""

    def __init__(self, step_s: float = 0.01) -> None:
        self.step_s = step_s
        self.batches: list[tuple[int, int, list[tuple[int, int]]]] = []

    def step_time(self, batch: BatchComposition) -> float:
        self.batches.append((batch.num_decodes, batch.decode_ctx_sum, list(batch.prefill_chunks)))
        return self.step_s


def _req(rid: str, processed: int, remaining: int, sla: float = 1e6, **kw: Any) -> dict[str, Any]:
    r = {"req_id": rid, "tokens_processed": processed, "tokens_remaining": remaining, "sla_budget_ms": sla}
    return r | kw


def test_step_compositions_of_a_shared_batch() -> None:
    # a: 100 processed -> 96 reused; first step recomputes 4 + its pending token (chunk of 5 at ctx 96).
    # b: prefilling at 40 of 300 -> 32 reused; 268-token chunk at ctx 32, then it decodes.
    spy = Spy()
    plan = reschedule(
        {
            "batch_capacity": 2,
            "interrupted_requests": [_req("a", 100, 3), _req("b", 40, 2, prompt_len=300)],
            "policy": "fcfs",
        },
        step_time=spy,
    )
    spy.batches = spy.batches[-3:]  # the shared projection comes after the solo ones
    assert spy.batches == [
        (0, 0, [(5, 96), (268, 32)]),
        (2, 102 + 301, []),  # a decodes at context 102, b at 301
        (1, 103, []),
    ]
    a, b = plan.requests
    assert (a.completion_ms, b.completion_ms) == pytest.approx((30.0, 20.0))


def test_waiting_for_a_slot_and_for_the_token_budget() -> None:
    # Budget 100, nothing cached: a recomputes 250 + 1 tokens in chunks 100, 100, 51; b (16 + 1
    # tokens) is admitted only in the first step with budget left, the third, then decodes.
    spy = Spy()
    plan = reschedule(
        {
            "batch_capacity": 2,
            "interrupted_requests": [_req("a", 250, 1), _req("b", 16, 2)],
            "policy": "fcfs",
            "cache_survives": False,
            "max_num_batched_tokens": 100,
        },
        step_time=spy,
    )
    assert spy.batches[-4:] == [
        (0, 0, [(100, 0)]),
        (0, 0, [(100, 100)]),
        (0, 0, [(51, 200), (17, 0)]),
        (1, 18, []),
    ]
    a, b = plan.requests
    assert (a.admitted_ms, a.completion_ms) == pytest.approx((0.0, 30.0))
    assert (b.admitted_ms, b.completion_ms) == pytest.approx((20.0, 40.0))
    # One slot: b waits for a to finish.
    one = reschedule(
        {"batch_capacity": 1, "interrupted_requests": [_req("a", 250, 1), _req("b", 16, 2)]},
        policy="fcfs",
        step_time=ConstantStepTime(step_time_s=0.01),
    )
    times = [t for p in one.requests for t in (p.admitted_ms, p.completion_ms)]
    assert times == pytest.approx([0, 10, 10, 30])


@settings(max_examples=60, deadline=None)
@given(problems(), st.floats(1.01, 5.0))
def test_slower_steps_give_later_completions(data: dict[str, Any], factor: float) -> None:
    data = data | {"policy": "fcfs"}  # same order, so times scale exactly
    fast = reschedule(data, step_time=ConstantStepTime(step_time_s=0.002))
    slow = reschedule(data, step_time=ConstantStepTime(step_time_s=0.002 * factor))
    for f, s in zip(fast.requests, slow.requests, strict=True):
        assert s.completion_ms == pytest.approx(f.completion_ms * factor)
        assert s.completion_ms > f.completion_ms
    heavier = reschedule(data, step_time=LinearStepTime(base_s=0.007 * factor))
    lighter = reschedule(data, step_time=LinearStepTime())
    for h, li in zip(heavier.requests, lighter.requests, strict=True):
        assert h.completion_ms > li.completion_ms


@settings(max_examples=80, deadline=None)
@given(problems(), st.booleans())
def test_doubling_capacity_never_makes_the_last_completion_later(data: dict[str, Any], linear: bool) -> None:
    model = LinearStepTime() if linear else ConstantStepTime(step_time_s=0.01)
    budget = data.get("max_num_batched_tokens")
    if budget is not None and budget < 2 * data["batch_capacity"]:
        data = data | {"max_num_batched_tokens": 2 * data["batch_capacity"]}
    small = reschedule(data, step_time=model)
    big = reschedule(data, step_time=model, batch_capacity=2 * data["batch_capacity"])
    assert big.rescheduled_queue == small.rescheduled_queue  # the order does not depend on capacity
    # Constant steps: the number of steps never grows. Linear: the per-token and attention terms
    # sum to the same total in any schedule; only a request's pending token may be computed as
    # the end of a recompute chunk in one schedule and as a decode in the other, which moves at
    # most one context-length decode term per request.
    slack_ms = 1e-9
    if linear:
        assert isinstance(model, LinearStepTime)
        slack_ms += sum(
            1000 * model.per_decode_ctx_s * (r["tokens_processed"] + r["tokens_remaining"])
            for r in data["interrupted_requests"]
        )
    assert big.makespan_ms <= small.makespan_ms + slack_ms


@settings(max_examples=60, deadline=None)
@given(problems(max_requests=8))
def test_enough_capacity_and_slack_means_no_violation(data: dict[str, Any]) -> None:
    reqs = data["interrupted_requests"]
    step_ms = 4.0
    # Every request gets a slot at once, the budget fits every first chunk at once, so each one
    # takes exactly its own number of steps: the first (recompute) step plus one per further token.
    budget = sum(r.get("prompt_len", 0) + r["tokens_processed"] + 1 for r in reqs) + 8
    for r in reqs:
        r["sla_budget_ms"] = step_ms * r["tokens_remaining"] + 1e-6
    cap = max(len(reqs), 1)
    plan = reschedule(
        data | {"batch_capacity": cap, "max_num_batched_tokens": max(budget, cap)},
        step_time=ConstantStepTime(step_time_s=step_ms / 1000),
    )
    assert not plan.sla_violation_projected
    for p in plan.requests:
        assert p.admitted_ms == 0.0
        assert p.completion_ms == pytest.approx(step_ms * p.tokens_remaining)
    # ... and with generous SLAs under the linear model too, whatever the capacity.
    for r in reqs:
        r["sla_budget_ms"] = 1e9
    assert not reschedule(data).sla_violation_projected


def test_one_slot_a_too_short_budget_violates() -> None:
    plan = reschedule(
        {"batch_capacity": 1, "interrupted_requests": [_req("a", 16, 10, 80.0), _req("b", 16, 10, 80.0)]},
        step_time=ConstantStepTime(step_time_s=0.005),
    )
    # a: 10 steps (50 ms) in time; b waits 50 ms then needs 50 ms more: 100 > 80.
    assert [p.violates for p in plan.requests] == [False, True]
    assert plan.requests[1].slack_ms == pytest.approx(-20.0)
    assert plan.num_violations == 1 and plan.sla_violation_projected


jobs = st.lists(
    st.builds(
        lambda n, c, s: Job(n, min(c, n - 1), s),
        st.integers(1, 3000),
        st.integers(0, 3000),
        st.integers(1, 60),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs, st.integers(1, 6), st.integers(0, 600), st.booleans())
def test_decode_stretches_change_nothing(js: list[Job], cap: int, extra: int, linear: bool) -> None:
    model = LinearStepTime() if linear else ConstantStepTime(step_time_s=0.01)
    budget = cap + extra
    assert project(js, cap, budget, model) == project(js, cap, budget, model, fast=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(1, 700), st.integers(1, 40)), min_size=1, max_size=10),
    st.integers(1, 5),
    st.integers(0, 400),
    st.booleans(),
)
def test_projection_equals_the_engine_on_fresh_requests(
    reqs: list[tuple[int, int]], cap: int, extra: int, linear: bool
) -> None:
    """Requests interrupted before computing anything (tokens_processed 0, prompt_len L) are new
    requests: the projection must time them exactly as the engine's scheduler does (all arriving
    now, FCFS, enough KV blocks, no shared prefixes)."""
    model = LinearStepTime() if linear else ConstantStepTime(step_time_s=0.01)
    budget = max(cap, 16) + extra
    plan = reschedule(
        {
            "batch_capacity": cap,
            "max_num_batched_tokens": budget,
            "policy": "fcfs",
            "interrupted_requests": [
                _req(f"q{i}", 0, out, prompt_len=prompt) for i, (prompt, out) in enumerate(reqs)
            ],
        },
        step_time=model,
    )
    trace = Trace.from_records(
        [
            {"req_id": f"q{i}", "arrival_time_s": 0.0, "prompt_len": p, "output_len": o}
            for i, (p, o) in enumerate(reqs)
        ],
        source="resched-test",
    )
    blocks = sum(-(-(p + o) // 16) for p, o in reqs) + 8
    cfg = EngineConfig(max_num_seqs=cap, max_num_batched_tokens=budget, num_gpu_blocks=blocks)
    df = simulate(trace, cfg, model).requests.set_index("req_id")
    for p in plan.requests:
        assert p.admitted_ms == pytest.approx(1000 * df.loc[p.req_id, "first_scheduled_s"], abs=1e-6)
        assert p.completion_ms == pytest.approx(1000 * df.loc[p.req_id, "finish_s"], abs=1e-6)
