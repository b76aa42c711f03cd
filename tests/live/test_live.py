"""The live stepping API: a run advanced piecewise (steps, time, pauses anywhere) gives exactly the
result of the batch call, a single step is one engine step, and snapshots are exact mid-run."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, step_models, traces

from servesim import SLO, EngineConfig, LinearStepTime, LiveClusterRun, LiveRun, open_trace, simulate
from servesim.cluster import FailureEvent, Replica, simulate_cluster
from servesim.engine import ConstantStepTime
from servesim.engine.engine import Engine
from servesim.errors import InputError
from servesim.events import (
    Event,
    EventRecorder,
    RecoveryDecision,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
    RequestPreempted,
    RequestRejected,
    RequestStarved,
)
from servesim.traces import Trace


def assert_same(live: object, batch: object) -> None:
    a, b = live.summary, batch.summary  # type: ignore[attr-defined]
    assert a.model_dump_json() == b.model_dump_json()
    pd.testing.assert_frame_equal(live.requests, batch.requests)  # type: ignore[attr-defined]


def drive(run: LiveRun | LiveClusterRun, plan: list[tuple[str, float]]) -> list[Event]:
    """Advance by a plan of ('steps', n) and ('time', dt) moves, reading snapshots between."""
    t = 0.0
    notices: list[Event] = []
    for kind, x in plan:
        if run.done:
            break
        if kind == "steps":
            run.advance_steps(int(x))
        else:
            t = max(t, run.now) + x
            run.advance_until(t)
        run.snapshot()
        notices += run.events()
    return notices


plans = st.lists(
    st.one_of(
        st.tuples(st.just("steps"), st.integers(0, 7)),
        st.tuples(st.just("time"), st.sampled_from([0.0, 0.01, 0.05, 0.3, 1.0])),
    ),
    max_size=40,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_a_run_driven_piecewise_equals_simulate(data: st.DataObject) -> None:
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    model = data.draw(step_models)
    batch = simulate(trace, config, model)
    run = LiveRun(trace, config, model)
    drive(run, data.draw(plans))
    assert_same(run.finish(), batch)


def test_a_step_is_one_engine_step_and_snapshots_match_the_naive_engine() -> None:
    """Step by step next to the naive loop (fast=False, no decode group): every running
    request's computed tokens and outputs agree at every step."""
    trace = open_trace("bursty", num_requests=60, seed=1)
    config = EngineConfig(num_gpu_blocks=400, max_num_seqs=16, max_num_batched_tokens=512)
    run = LiveRun(trace, config, LinearStepTime())
    naive = Engine(trace, config, LinearStepTime(), fast=False)
    decode_seen = prefill_seen = 0
    while not run.done:
        before = run.step
        assert run.advance_steps(1) == 1
        assert run.step == before + 1
        pending = naive.begin_step()
        assert pending is not None
        naive.end_step(pending)
        snap = run.snapshot()
        got = [(s.req_id, s.computed_tokens, s.num_output, s.phase) for s in snap.running]
        want = [
            (
                r.req_id,
                r.num_computed,
                r.num_output,
                "prefill" if r.num_tokens - r.num_computed > 1 else "decode",
            )
            for r in naive.scheduler.running
        ]
        assert got == want
        assert [s.req_id for s in snap.waiting] == [r.req_id for r in naive.scheduler.waiting]
        assert snap.kv_blocks_used == naive.pool.usable_blocks - naive.pool.num_free
        decode_seen += sum(s.phase == "decode" for s in snap.running)
        prefill_seen += sum(s.phase == "prefill" for s in snap.running)
        assert snap.time_s == run.now == naive.now
    assert decode_seen and prefill_seen
    assert_same(run.finish(), simulate(trace, config, LinearStepTime()))


def test_prefill_chunks_are_numbered_at_the_step_cap() -> None:
    trace = Trace.from_records([{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 1000, "output_len": 4}])
    run = LiveRun(
        trace,
        EngineConfig(max_num_batched_tokens=256, num_gpu_blocks=200),
        ConstantStepTime(step_time_s=0.01),
    )
    seen = []
    for _ in range(4):
        run.advance_steps(1)
        (slot,) = run.snapshot().running
        seen.append((slot.phase, slot.chunk, slot.chunks, slot.computed_tokens))
    assert seen == [
        ("prefill", 2, 4, 256),
        ("prefill", 3, 4, 512),
        ("prefill", 4, 4, 768),
        ("decode", 0, 0, 1000),
    ]


def test_rolling_figures_and_notices_follow_the_run() -> None:
    trace = open_trace("bursty", num_requests=300, seed=3)
    config = EngineConfig(num_gpu_blocks=500, max_num_seqs=32, queue_timeout_s=20.0)
    run = LiveRun(trace, config, LinearStepTime(), window_s=10.0)
    assert run.snapshot().ttft_p50_ms is None
    kinds: list[str] = []
    while not run.done:
        run.advance_until(run.now + 2.0)
        snap = run.snapshot()
        kinds += [type(e).__name__ for e in run.events()]
        if snap.ttft_p50_ms is not None:
            assert snap.ttft_p50_ms <= snap.ttft_p99_ms  # type: ignore[operator]
    result = run.finish()
    s = result.summary
    assert kinds.count("RequestPreempted") == s.num_preemptions
    assert kinds.count("RequestRejected") == s.num_rejected_queue_timeout
    assert s.num_preemptions and s.num_rejected_queue_timeout
    assert snap.num_closed == len(trace) and snap.done
    with pytest.raises(InputError):
        run.advance_steps(1)


def _replicas(n: int) -> list[Replica]:
    cfg = EngineConfig(num_gpu_blocks=900, max_num_seqs=16, max_num_batched_tokens=1024)
    return [Replica(f"n{i}", cfg, ConstantStepTime(step_time_s=0.01)) for i in range(n)]


@pytest.mark.parametrize("recovery", ["planner", "migrate", "restart"])
def test_a_cluster_driven_live_with_an_injected_failure_equals_simulate_cluster(recovery: str) -> None:
    trace = open_trace("poisson_40_rps", num_requests=300, seed=5)
    run = LiveClusterRun(trace, _replicas(3), recovery=recovery)
    while run.now < 2.0:
        run.advance_steps(5)
    run.advance_until(2.5)
    snap = run.snapshot()
    assert snap.replicas[1].running  # the victim is busy
    event = run.inject_failure("n1", recover_after_s=1.5)
    assert event.time_s == 2.5
    notices = drive(run, [("time", 0.2), ("steps", 3)] * 50)
    nodes = [(type(e).__name__, e.replica) for e in notices if isinstance(e, ReplicaDown | ReplicaUp)]
    assert nodes == [("ReplicaDown", "n1"), ("ReplicaUp", "n1")]
    assert sum(isinstance(e, RecoveryDecision) for e in notices) == len(run.sim.moves) > 0
    result = run.finish()
    batch = simulate_cluster(
        trace,
        _replicas(3),
        failures=[FailureEvent(node="n1", time_s=2.5, recover_after_s=1.5)],
        recovery=recovery,
    )
    assert_same(result, batch)
    pd.testing.assert_frame_equal(result.moves, batch.moves)
    assert len(result.moves) and set(result.moves["from_node"]) == {"n1"}


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    n_req=st.integers(0, 120),
    seed=st.integers(0, 5),
    fail_at=st.sampled_from([0.0, 0.3, 1.0, 2.0]),
    back=st.sampled_from([None, 0.5]),
    plan=plans,
)
def test_any_piecewise_cluster_run_equals_simulate_cluster(
    n_req: int, seed: int, fail_at: float, back: float | None, plan: list[tuple[str, float]]
) -> None:
    trace = open_trace("poisson_40_rps", num_requests=n_req, seed=seed) if n_req else Trace.empty()
    fail = [FailureEvent(node="n0", time_s=fail_at, recover_after_s=back)]
    run = LiveClusterRun(trace, _replicas(2), failures=fail)
    drive(run, plan)
    assert_same(run.finish(), simulate_cluster(trace, _replicas(2), failures=fail))


def test_bad_failures_are_refused_with_a_clear_error() -> None:
    run = LiveClusterRun(open_trace("poisson_40_rps", num_requests=50, seed=1), _replicas(2))
    with pytest.raises(InputError, match="no replica 'n9'"):
        run.inject_failure("n9")
    run.advance_until(0.5)
    run.inject_failure("n0")
    with pytest.raises(InputError, match="already down"):
        run.inject_failure("n0")
    run.advance_until(math.inf)
    assert run.done


def test_a_request_timeline_tells_its_story() -> None:
    trace = open_trace("poisson_40_rps", num_requests=120, seed=2)
    run = LiveClusterRun(trace, _replicas(2), recovery="restart")
    run.advance_until(1.0)
    busy = run.snapshot().replicas[0].running[0].req_id
    assert run.timeline(busy).state == "running"
    run.inject_failure("n0")
    run.advance_until(1.0001)
    later = run.timeline(busy)
    assert any("COLD_RESTART n0->n1" in text for _t, text in later.events)
    assert run.timeline(trace.df["req_id"].iloc[-1]).state == "not arrived"
    run.finish()
    done = run.timeline(busy)
    assert done.state == "finished" and done.replica == "n1"
    assert done.events[0][1] == "arrived"
    with pytest.raises(InputError, match="no request"):
        run.timeline("nope")


def test_the_interrupted_jobs_come_in_the_reschedulers_sla_aware_order() -> None:
    trace = open_trace("poisson_40_rps", num_requests=200, seed=2)
    run = LiveClusterRun(trace, _replicas(2), slo=SLO(e2e_ms=3000))
    assert run.recovery_queue() is None
    run.advance_until(2.0)
    victims = {s.req_id for s in run.snapshot().replicas[0].running if s.computed_tokens}
    run.inject_failure("n0")
    run.advance_until(2.0001)
    plan = run.recovery_queue()
    assert plan is not None and plan.policy == "sla-aware"
    assert set(plan.rescheduled_queue) == victims
    assert all(p.violates == (p.slack_ms < 0) for p in plan.requests)


WATCHED = (
    RequestPreempted,
    RequestStarved,
    RequestRejected,
    ReplicaWarning,
    ReplicaDown,
    ReplicaUp,
    RecoveryDecision,
)


def test_the_events_read_from_the_records_are_the_ones_the_engine_emits() -> None:
    """events() (free: read from the records) against an observer of the same run (the
    engine's own emission): the same events, in time order."""
    trace = open_trace("bursty", num_requests=300, seed=3)
    config = EngineConfig(num_gpu_blocks=500, max_num_seqs=32, queue_timeout_s=20.0, starvation_threshold=2)
    seen = EventRecorder(*WATCHED)
    run = LiveRun(trace, config, LinearStepTime(), observers=[seen])
    got = drive(run, [("time", 0.7), ("steps", 5)] * 400)
    run.finish()
    got += run.events()
    assert sorted(got, key=repr) == sorted(seen.events, key=repr)
    assert [e.time_s for e in got] == sorted(e.time_s for e in got)  # type: ignore[union-attr]
    assert {type(e) for e in got} == {RequestPreempted, RequestStarved, RequestRejected}


def test_the_cluster_events_read_from_the_records_are_the_ones_it_emits() -> None:
    trace = open_trace("poisson_40_rps", num_requests=300, seed=5)
    fail = [FailureEvent(node="n0", time_s=1.0, warning_s=0.2, recover_after_s=1.0)]
    seen = EventRecorder(*WATCHED)
    run = LiveClusterRun(trace, _replicas(3), failures=fail, kv_checkpointing="on_warning", observers=[seen])
    got = drive(run, [("time", 0.3), ("steps", 7)] * 100)
    run.inject_failure("n2")
    run.finish()
    got += run.events()
    assert sorted(got, key=repr) == sorted(seen.events, key=repr)
    assert {ReplicaWarning, ReplicaDown, ReplicaUp, RecoveryDecision} <= {type(e) for e in got}


def test_a_live_run_notices_each_503_by_its_limit() -> None:
    trace = open_trace("bursty", num_requests=300, seed=3)
    config = EngineConfig(max_num_seqs=16, max_num_queued_reqs=40, max_num_queued_tokens=30000)
    run = LiveRun(trace, config, LinearStepTime(), window_s=10.0)
    reasons: list[str] = []
    while not run.done:
        run.advance_until(run.now + 2.0)
        reasons += [e.reason for e in run.events() if type(e).__name__ == "RequestRejected"]
    adm = run.finish().summary.admission
    assert adm is not None and adm.num_rejected > 0
    assert reasons.count("max_num_queued_reqs") == adm.num_rejected_queued_reqs
    assert reasons.count("max_num_queued_tokens") == adm.num_rejected_queued_tokens


def test_an_aborted_request_is_no_refusal_in_the_live_notices() -> None:
    """A client that goes away (OUTCOME_ABORTED) ends its request, but the API server refused
    nothing: no "rejected" notice (it once read as "prompt_too_long")."""
    trace = open_trace("bursty", num_requests=40, seed=3)
    run = LiveRun(trace, EngineConfig(max_num_seqs=8), LinearStepTime(), window_s=10.0)
    run.advance_until(run.now + 0.5)
    live = list(run.engine.live.values())  # arrived, not yet closed
    assert live
    assert run.engine.abort(live[0], run.now)
    rejected: list[str] = []
    while not run.done:
        run.advance_until(run.now + 2.0)
        rejected += [e.req_id for e in run.events() if type(e).__name__ == "RequestRejected"]
    assert live[0].req_id not in rejected
