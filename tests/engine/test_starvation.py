"""Starvation: long low-priority jobs preempted again and again under the priority policy are
flagged STARVED (with an event), and servesim's mitigation bounds their preemptions."""

from __future__ import annotations

import pytest

from servesim.engine import ConstantStepTime, EngineConfig, LinearStepTime, simulate
from servesim.traces import Trace


def bursty_trace() -> Trace:
    rows = [
        {
            "req_id": f"long{i}",
            "arrival_time_s": 0.1 * i,
            "prompt_len": 3000,
            "output_len": 800,
            "priority": 5,
        }
        for i in range(6)
    ]
    rows += [
        {
            "req_id": f"s{b}-{j}",
            "arrival_time_s": 1.0 + 2.5 * b + 0.01 * j,
            "prompt_len": 600,
            "output_len": 150,
            "priority": 0,
            "tenant": "interactive",
        }
        for b in range(8)
        for j in range(24)
    ]
    return Trace.from_records(rows)


def run(mitigation: str, threshold: int = 3):  # type: ignore[no-untyped-def]
    config = EngineConfig(
        num_gpu_blocks=1200,
        policy="priority",
        max_num_seqs=64,
        starvation_threshold=threshold,
        starvation_mitigation=mitigation,
    )
    return simulate(bursty_trace(), config, LinearStepTime(), check_invariants=True)


def test_starvation_is_detected_without_mitigation() -> None:
    result = run("none")
    s = result.summary
    assert s.num_starved >= 3
    assert s.max_preemptions_per_request > 3  # vLLM keeps picking the same victims
    assert s.by_priority["5"].num_starved == s.num_starved  # only the low-priority class
    assert s.by_priority["0"].num_preemptions == 0
    events = result.starvation
    assert set(events["priority"]) == {5}
    assert (events["lost_tokens"] >= 3000).all()  # they lose their whole long context each time
    # the event is raised exactly when a request reaches the threshold
    third = result.preemptions.groupby("req_id").nth(2)
    assert sorted(third["req_id"]) == sorted(events["req_id"])


@pytest.mark.parametrize("mitigation", ["protect", "boost"])
def test_mitigation_bounds_preemptions_per_request(mitigation: str) -> None:
    unmitigated = run("none").summary
    s = run(mitigation).summary
    assert s.max_preemptions_per_request <= 3 < unmitigated.max_preemptions_per_request
    assert s.num_finished == unmitigated.num_finished == 6 + 8 * 24
    assert s.fairness_priority is not None and unmitigated.fairness_priority is not None
    assert s.fairness_priority > unmitigated.fairness_priority


def test_threshold_is_configurable() -> None:
    assert run("none", threshold=1).summary.num_starved > run("none", threshold=5).summary.num_starved


def test_per_tenant_metrics_and_fairness() -> None:
    s = run("none").summary
    assert list(s.by_tenant) == ["interactive"]  # requests without a tenant are not a class
    t = s.by_tenant["interactive"]
    assert t.num_requests == 8 * 24 and t.num_finished == t.num_requests
    assert s.fairness_tenant is None  # one class: nothing to compare
    assert 0 < s.fairness_priority <= 1  # type: ignore[operator]


ROWS_TWO_STARVED = [  # hypothesis found it: q3 and q10 each need 39-40 of the 40 usable blocks
    ("q0", 0.0593, 193, 5, 2), ("q1", 0.0593, 392, 58, 0), ("q2", 0.1093, 157, 61, 2),
    ("q3", 0.1093, 550, 62, 0), ("q4", 0.2324, 254, 18, 1), ("q5", 0.3863, 108, 53, 0),
    ("q6", 0.3863, 355, 17, 1), ("q7", 0.492, 178, 18, 1), ("q8", 0.492, 399, 14, 1),
    ("q9", 0.6013, 75, 43, 0), ("q10", 0.6113, 599, 32, 0), ("q11", 0.6707, 189, 58, 0),
    ("q12", 0.8139, 283, 27, 0), ("q13", 0.8139, 44, 68, 1),
]  # fmt: skip


@pytest.mark.parametrize("mitigation", ["protect", "boost"])
def test_two_starved_requests_that_fill_the_cache_both_finish(mitigation: str) -> None:
    """Once everyone running is STARVED, vLLM's rule picks the victim among them: the older
    request keeps its blocks and finishes (sparing all of them used to livelock the run)."""
    trace = Trace.from_records(
        [
            {"req_id": q, "arrival_time_s": t, "prompt_len": p, "output_len": o, "priority": pr}
            for q, t, p, o, pr in ROWS_TWO_STARVED
        ]
    )
    config = EngineConfig(
        max_num_seqs=4,
        max_num_batched_tokens=632,
        block_size=16,
        num_gpu_blocks=41,
        enable_chunked_prefill=False,
        enable_prefix_caching=False,
        long_prefill_token_threshold=64,
        policy="priority",
        watermark=0.0,
        scheduler_reserve_full_isl=False,
        starvation_threshold=2,
        starvation_mitigation=mitigation,
    )
    for fast in (True, False):
        s = simulate(
            trace, config, ConstantStepTime(step_time_s=0.015625), fast=fast, check_invariants=True
        ).summary
        assert s.num_finished == len(ROWS_TWO_STARVED)
        assert s.num_starved >= 1
