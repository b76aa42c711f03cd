"""The typed event stream tells the same story as the results: one arrival per request, a first
token at its TTFT, a finish at its E2E, every preemption and step; the fast path emits exactly the
naive loop's events; observing a run never changes it; a cluster reports its failures and each
recovery decision."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, examples, step_models, traces

import servesim
from servesim.cluster import FailureEvent, Replica, simulate_cluster
from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.events import (
    EventRecorder,
    FirstToken,
    Progress,
    RecoveryDecision,
    ReplicaDown,
    RequestAdmitted,
    RequestArrived,
    RequestFinished,
    RequestPreempted,
    RequestRejected,
    StepEvent,
    StepLogWriter,
)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_events_match_the_results_and_the_naive_loop(data: st.DataObject) -> None:
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    model = data.draw(step_models)
    fast_rec, naive_rec = EventRecorder(), EventRecorder()
    fast = simulate(trace, config, model, observers=[fast_rec])
    simulate(trace, config, model, fast=False, observers=[naive_rec])
    assert fast_rec.events == naive_rec.events  # the stream does not depend on the fast path
    unobserved = simulate(trace, config, model)
    pd.testing.assert_frame_equal(unobserved.requests, fast.requests)  # watching changes nothing
    assert unobserved.summary == fast.summary

    by_type: dict[type, list[object]] = {}
    for e in fast_rec.events:
        by_type.setdefault(type(e), []).append(e)
    req = fast.requests.set_index("req_id")
    arrived = [e.req_id for e in by_type.get(RequestArrived, [])]  # type: ignore[attr-defined]
    assert sorted(arrived) == sorted(req.index)
    steps = by_type.get(StepEvent, [])
    assert [e.start_s for e in steps] == fast.steps["start_s"].tolist()  # type: ignore[attr-defined]
    for e in by_type.get(FirstToken, []):
        assert isinstance(e, FirstToken)
        assert np.isclose(e.ttft_s * 1e3, req.loc[e.req_id, "ttft_ms"])
    finished = by_type.get(RequestFinished, [])
    assert len(finished) == fast.summary.num_finished
    for e in finished:
        assert isinstance(e, RequestFinished)
        assert e.time_s == req.loc[e.req_id, "finish_s"] and e.outcome == req.loc[e.req_id, "outcome"]
    assert len(by_type.get(RequestPreempted, [])) == fast.summary.num_preemptions
    rejected = Counter(e.reason for e in by_type.get(RequestRejected, []))  # type: ignore[attr-defined]
    assert rejected["prompt_too_long"] == fast.summary.num_rejected_prompt_too_long
    admitted = {e.req_id for e in by_type.get(RequestAdmitted, [])}  # type: ignore[attr-defined]
    assert admitted == set(req.index[req["first_scheduled_s"].notna()])
    (last,) = by_type[Progress][-1:]
    assert isinstance(last, Progress) and last.done == last.total == len(trace)


def test_step_log_writer_writes_the_step_log_records(tmp_path: Path) -> None:
    trace = servesim.open_trace("poisson_20_rps", num_requests=150, seed=2)
    records: list[dict[str, object]] = []
    path = tmp_path / "steps.jsonl"
    with StepLogWriter(str(path)) as writer:
        simulate(trace, EngineConfig(max_num_seqs=16), observers=[writer], step_log=records.append)
    lines = path.read_text().splitlines()
    assert lines == [json.dumps(r, separators=(",", ":")) for r in records]
    assert "replica" not in records[0]


def test_a_cluster_reports_failures_and_each_recovery_decision() -> None:
    trace = servesim.open_trace("poisson_30_rps", num_requests=600, seed=1)
    cfg = EngineConfig(max_num_seqs=64, num_gpu_blocks=4000)
    replicas = [Replica(f"n{k}", cfg, LinearStepTime()) for k in range(3)]
    rec = EventRecorder()
    result = simulate_cluster(
        trace, replicas, failures=[FailureEvent(node="n1", time_s=5.0, recover_after_s=5.0)], observers=[rec]
    )
    (down,) = [e for e in rec.events if isinstance(e, ReplicaDown)]
    assert down.replica == "n1" and down.num_interrupted > 0
    decisions = [e for e in rec.events if isinstance(e, RecoveryDecision)]
    assert [(d.req_id, d.strategy, d.to_replica) for d in decisions] == list(
        zip(result.moves["req_id"], result.moves["strategy"], result.moves["to_node"], strict=True)
    )
    steps = Counter(e.replica for e in rec.events if isinstance(e, StepEvent))
    assert steps == Counter(result.steps["replica"])
    arrivals = [e for e in rec.events if isinstance(e, RequestArrived)]
    assert len(arrivals) == len(trace) and all(e.replica is None for e in arrivals)
