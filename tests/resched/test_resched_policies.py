"""Each policy's order on hand-made cases, the permutation property, and aging (no starvation)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from resched_strategies import problems

from servesim.engine import ConstantStepTime
from servesim.resched import Policy, reschedule

STEP = ConstantStepTime(step_time_s=0.005)  # 5 ms per step: solo service = 5 ms x steps


def _req(rid: str, processed: int, remaining: int, sla: float, **kw: Any) -> dict[str, Any]:
    r = {"req_id": rid, "tokens_processed": processed, "tokens_remaining": remaining, "sla_budget_ms": sla}
    return r | kw


# Solo service at 5 ms/step (cache kept, so one recompute step + remaining - 1 decodes = remaining
# steps): a 50 ms, b 500 ms, c 100 ms, d 1000 ms, e 25 ms.
CASE = [
    _req("a", 512, 10, 400.0, priority=2),  # slack 350
    _req("b", 64, 100, 520.0, priority=0),  # slack 20
    _req("c", 300, 20, 80.0, priority=1),  # slack -20: cannot make it
    _req("d", 1000, 200, 1100.0, priority=1),  # slack 100
    _req("e", 32, 5, 20.0, priority=0),  # slack -5: cannot make it
]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fcfs", ["a", "b", "c", "d", "e"]),
        ("priority", ["b", "e", "c", "d", "a"]),  # priority, then input order
        ("least-slack-first", ["c", "e", "b", "d", "a"]),
        ("shortest-remaining", ["e", "a", "c", "b", "d"]),
        ("sla-aware", ["b", "d", "a", "e", "c"]),  # can meet (by slack), then the rest (shortest first)
    ],
)
def test_policy_orders(policy: str, expected: list[str]) -> None:
    plan = reschedule({"batch_capacity": 2, "interrupted_requests": CASE}, policy=policy, step_time=STEP)
    assert plan.rescheduled_queue == expected
    assert plan.policy == Policy(policy)
    slack = {p.req_id: p.solo_slack_ms for p in plan.requests}
    assert slack == pytest.approx({"a": 350.0, "b": 20.0, "c": -20.0, "d": 100.0, "e": -5.0})


def test_policy_names_accept_underscores_and_default_is_sla_aware() -> None:
    assert Policy("least_slack_first") is Policy.least_slack_first
    assert Policy("SLA_AWARE") is Policy.sla_aware
    assert (
        reschedule({"batch_capacity": 1, "interrupted_requests": CASE}, step_time=STEP).policy
        is Policy.sla_aware
    )


def test_sla_aware_saves_what_can_be_saved() -> None:
    # One slot. Least-slack would start with c (hopeless) and make b late too; sla-aware skips c.
    plan_lsf = reschedule(
        {"batch_capacity": 1, "interrupted_requests": CASE}, policy="least-slack-first", step_time=STEP
    )
    plan_sla = reschedule({"batch_capacity": 1, "interrupted_requests": CASE}, step_time=STEP)
    assert plan_sla.num_violations < plan_lsf.num_violations
    assert not {p.req_id: p.violates for p in plan_sla.requests}["b"]


def test_aging_by_preemptions_and_by_wait_goes_first_oldest_first() -> None:
    reqs = [
        *CASE,
        _req("p", 16, 50, 1e6, preemptions=3),  # preempted 3 times: aged
        _req("w1", 16, 50, 1e6, waited_ms=6000.0),  # waited past 5000 ms: aged, oldest
        _req("w2", 16, 50, 1e6, waited_ms=5000.0, preemptions=1),
    ]
    for policy in ("priority", "least-slack-first", "shortest-remaining", "sla-aware"):
        plan = reschedule({"batch_capacity": 2, "interrupted_requests": reqs}, policy=policy, step_time=STEP)
        assert plan.rescheduled_queue[:3] == ["w1", "w2", "p"], policy
        assert [p.aged for p in plan.requests] == [True] * 3 + [False] * 5
    fcfs = reschedule({"batch_capacity": 2, "interrupted_requests": reqs}, policy="fcfs", step_time=STEP)
    assert fcfs.rescheduled_queue == [r["req_id"] for r in reqs]  # arrival order needs no aging
    off = reschedule(
        {"batch_capacity": 2, "interrupted_requests": reqs, "aging_wait_ms": None, "aging_preemptions": None},
        step_time=STEP,
    )
    assert not any(p.aged for p in off.requests)
    assert off.rescheduled_queue[:2] == ["b", "d"]


def _admission_round(policy: str, aging_wait_ms: float | None, rounds: int = 60) -> int | None:
    """An old, long request ("old") against a stream of new tight-SLA requests: each round (100 ms)
    two new ones arrive and the one free slot takes the head of the plan; everyone left waits
    100 ms more (its SLA budget shrinks by as much). Returns the round "old" is admitted in."""
    queue = [_req("old", 64, 300, 400.0, priority=1)]
    for rnd in range(rounds):
        queue += [_req(f"n{rnd}.{k}", 64, 10, 200.0) for k in range(2)]
        plan = reschedule(
            {
                "batch_capacity": 1,
                "interrupted_requests": queue,
                "aging_wait_ms": aging_wait_ms,
                "aging_preemptions": None,
            },
            policy=policy,
            step_time=STEP,
        )
        head = plan.rescheduled_queue[0]
        if head == "old":
            return rnd
        queue = [
            r
            | {
                "waited_ms": r.get("waited_ms", 0.0) + 100.0,
                "sla_budget_ms": max(r["sla_budget_ms"] - 100.0, 0.0),
            }
            for r in queue
            if r["req_id"] != head
        ]
    return None


@pytest.mark.parametrize("policy", ["priority", "shortest-remaining", "sla-aware", "least-slack-first"])
def test_aging_bounds_the_wait_under_a_stream_of_urgent_requests(policy: str) -> None:
    # Aged once it has waited 500 ms (5 rounds); being the oldest, it goes first from then on.
    rnd = _admission_round(policy, aging_wait_ms=500.0)
    assert rnd is not None and rnd <= 5


@pytest.mark.parametrize("policy", ["priority", "shortest-remaining", "sla-aware"])
def test_without_aging_the_old_request_starves(policy: str) -> None:
    assert _admission_round(policy, aging_wait_ms=None) is None


@settings(max_examples=80, deadline=None)
@given(problems())
def test_every_policy_orders_a_permutation_aged_first_oldest_first(data: dict[str, Any]) -> None:
    ids = [r["req_id"] for r in data["interrupted_requests"]]
    for policy in Policy:
        plan = reschedule(data, policy=policy)
        assert sorted(plan.rescheduled_queue) == sorted(ids)
        assert len(set(plan.rescheduled_queue)) == len(ids)
        assert [p.req_id for p in plan.requests] == plan.rescheduled_queue
        assert [p.position for p in plan.requests] == list(range(len(ids)))
        if policy is Policy.fcfs:
            assert plan.rescheduled_queue == ids
            continue
        aged = [p.aged for p in plan.requests]
        assert aged == sorted(aged, reverse=True)  # all aged requests come first
        by_id = {r["req_id"]: r for r in data["interrupted_requests"]}
        waits = [by_id[p.req_id].get("waited_ms", 0.0) for p in plan.requests if p.aged]
        assert waits == sorted(waits, reverse=True)  # oldest first
        # admission follows the queue
        starts = [p.admitted_ms for p in plan.requests]
        assert starts == sorted(starts)
