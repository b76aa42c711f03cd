"""Starvation: long low-priority jobs preempted again and again under the priority policy are
flagged STARVED (with an event), and servesim's mitigation bounds their preemptions."""

from __future__ import annotations

import pytest

from servesim.engine import EngineConfig, LinearStepTime, simulate
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
