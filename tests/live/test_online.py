"""Online runs (``servesim.online``, what the emulator drives): a trace submitted request by request
at its arrival times gives the batch run's records, and an abort frees the request's KV blocks."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, traces

from servesim import ConstantStepTime, EngineConfig, LinearStepTime, open_trace
from servesim.cluster import FailureEvent, Replica, cluster_simulator
from servesim.engine.engine import Engine, TraceArrays
from servesim.engine.request import RUNNING, WAITING, Request
from servesim.online import OnlineFleet, OnlineRequest
from servesim.traces import Trace

RECORD_COLUMNS = ("first_scheduled", "first_token", "finish", "num_output", "outcome", "preemptions")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def submit_trace_online(fleet: OnlineFleet, trace: Trace) -> None:
    """Feed ``trace`` to ``fleet`` one arrival at a time, advancing the clock in between."""
    arrays = TraceArrays(trace, trim_hash_ids=False)
    for i in range(arrays.n):
        fleet.advance_until(arrays.arrival[i])
        r = fleet.sim.make_request(
            arrays.req_id[i],
            arrays.arrival[i],
            arrays.prompt_len[i],
            arrays.output_len[i],
            priority=arrays.priority[i],
            hash_ids=arrays.hash_ids[i],
            hash_block_size=arrays.hash_block_size or 0,
            group=arrays.group[i],
            prefix_len=arrays.prefix_len[i],
        )
        fleet.sim.submit(r)
    fleet.advance_until(math.inf)


def _column(rec: object, col: str, n: int) -> list[float]:
    values = list(getattr(rec, col))[:n]
    pad = math.nan if col in ("first_scheduled", "first_token", "finish") else 0
    return values + [pad] * (n - len(values))


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), fail_at=st.sampled_from([None, 0.0, 0.4, 1.5]), n_replicas=st.integers(1, 3))
def test_a_trace_submitted_online_gives_the_batch_records(
    data: st.DataObject, fail_at: float | None, n_replicas: int
) -> None:
    trace = data.draw(traces(max_requests=40))
    cfg = data.draw(configs(trace))
    step = LinearStepTime(base_s=0.004, per_token_s=2e-5, per_ctx_token_s=1e-7)
    failures = [] if fail_at is None else [FailureEvent(node="n0", time_s=fail_at, recover_after_s=0.5)]
    batch_sim = cluster_simulator(
        trace, [Replica(f"n{k}", cfg, step) for k in range(n_replicas)], failures=failures
    )
    batch = batch_sim.run()
    # Online, the context length cannot come from the trace: give the one the batch derived.
    online_cfg = cfg.model_copy(update={"max_model_len": batch.engines[0].max_model_len})
    fleet = OnlineFleet([Replica(f"n{k}", online_cfg, step) for k in range(n_replicas)])
    for f in failures:
        fleet.fail(f.node, f.time_s, f.recover_after_s)
    submit_trace_online(fleet, trace)
    online = fleet.sim.close()
    n = len(trace)
    assert len(online.engines) == len(batch.engines)
    for eo, eb in zip(online.engines, batch.engines, strict=True):
        for col in RECORD_COLUMNS:
            a, b = _column(eo.rec, col, n), _column(eb.rec, col, n)
            assert all(_same(x, y) for x, y in zip(a, b, strict=True)), col
        assert list(eo.rec.steps) == list(eb.rec.steps)
        assert list(eo.rec.durations) == list(eb.rec.durations)
    assert [(m.req_id, m.to_node, m.strategy, m.delay_s) for m in online.moves] == [
        (m.req_id, m.to_node, m.strategy, m.delay_s) for m in batch.moves
    ]


def _engine(fast: bool) -> Engine:
    cfg = EngineConfig(
        num_gpu_blocks=60, block_size=16, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512
    )
    return Engine(
        TraceArrays(Trace.empty()),
        cfg,
        ConstantStepTime(step_time_s=0.01),
        fast=fast,
        external_arrivals=True,
        check_invariants=True,
    )


@pytest.mark.parametrize("fast", [False, True])
def test_an_abort_frees_the_requests_blocks_and_the_run_stays_consistent(fast: bool) -> None:
    engine = _engine(fast)
    reqs = [Request(i, f"r{i}", 0.0, 100 + 10 * i, 40) for i in range(8)]  # more than max_num_seqs
    for r in reqs:
        engine.submit(r, 0.0)
    engine.run_until(0.115)  # twelve steps: prefills done, decoding (fast: in the decode group)
    assert engine.step == 12
    running = [r for r in reqs if r.status == RUNNING]
    waiting = [r for r in reqs if r.status == WAITING]
    assert running and waiting
    victim = running[1]
    free_before = engine.pool.num_free
    held = len(victim.blocks) if victim.sync_step < 0 else -(-engine.computed_tokens(victim) // 16)
    assert engine.abort(victim, engine.now)
    assert engine.pool.num_free == free_before + held  # its blocks went back to the pool
    assert not victim.blocks and victim not in engine.scheduler.running
    assert engine.abort(waiting[-1], engine.now)
    assert waiting[-1] not in list(engine.scheduler.waiting)
    assert not engine.abort(victim, engine.now)  # aborting twice is a no-op
    engine.run_until(math.inf)
    engine.finish()  # final invariants: every block back in the pool, nothing left running
    outcomes = [engine.rec.outcome[r.idx] for r in reqs]
    assert outcomes.count(5) == 2  # OUTCOME_ABORTED
    assert all(o == 1 for i, o in enumerate(outcomes) if reqs[i] not in (victim, waiting[-1]))


def test_an_abort_through_the_fleet_waits_for_the_step_in_flight_and_frees_the_kv() -> None:
    cfg = EngineConfig(num_gpu_blocks=400, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=2048)
    fleet = OnlineFleet([Replica("a", cfg, ConstantStepTime(step_time_s=0.01))])
    reqs = [fleet.submit(f"r{i}", 0.0, 300, 50) for i in range(3)]
    fleet.advance_until(0.105)  # ten steps ended, the eleventh in flight
    used = fleet.replica_metrics()[0].kv_usage
    fleet.abort(reqs[0], 0.105)
    fleet.advance_until(0.1051)
    assert not reqs[0].done  # the step in flight still holds it
    fleet.advance_until(0.111)  # that step ended at 0.11: the abort took effect
    assert reqs[0].done and reqs[0].outcome == "aborted"
    assert fleet.replica_metrics()[0].kv_usage < used
    fleet.check_invariants()
    fleet.advance_until(math.inf)
    assert [r.outcome for r in reqs[1:]] == ["finished", "finished"]
    assert reqs[1].num_output == 50


def test_a_failure_recovers_online_requests_by_the_planner() -> None:
    trace = open_trace("poisson_40_rps", num_requests=60, seed=3)
    cfg = EngineConfig(num_gpu_blocks=900, max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=4096)
    replicas = [Replica(f"n{i}", cfg, ConstantStepTime(step_time_s=0.01)) for i in range(2)]
    fleet = OnlineFleet(replicas)
    fleet.fail("n1", 0.8)
    submit_trace_online(fleet, trace)
    assert fleet.moves and {m.from_node for m in fleet.moves} == {"n1"}
    assert {m.strategy for m in fleet.moves} <= {"MIGRATE_STATE", "COLD_RESTART"}


def test_rolling_records_bound_memory_and_change_nothing_a_client_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The emulator's fleet runs for days: with ``rolling_records`` each engine keeps only its
    latest step rows, request columns and events, and every request still streams, finishes and
    counts exactly as with the whole record kept (preemptions included)."""
    import servesim.online as online

    monkeypatch.setattr(online, "ROLLING_STEPS", 256)
    monkeypatch.setattr(online, "ROLLING_REQUESTS", 16)
    trace = open_trace("bursty", num_requests=400, seed=5)
    cfg = EngineConfig(max_num_seqs=16, num_gpu_blocks=300, max_model_len=4096)
    step = LinearStepTime(base_s=0.004, per_token_s=2e-5, per_ctx_token_s=1e-7)

    def run(rolling: bool) -> tuple[OnlineFleet, list[tuple[float | None, float | None, int, str, float]]]:
        fleet = OnlineFleet([Replica("n0", cfg, step), Replica("n1", cfg, step)], rolling_records=rolling)
        fleet.fail("n1", 5.0, 2.0)  # a past incarnation's recorder is trimmed too
        arrays = TraceArrays(trace)
        reqs: list[OnlineRequest] = []
        lag: dict[int, float] = {}
        pending: set[int] = set()

        def advance(t: float) -> None:
            """Step by step, as the emulator's loop wakes, asking the async lag at the first token."""
            while True:
                nt = fleet.next_time()
                fleet.advance_until(t if nt >= t else math.nextafter(nt, math.inf))
                for j in [j for j in pending if reqs[j].first_token_s is not None]:
                    lag[j] = fleet.step_in_flight_at_arrival(reqs[j])
                    pending.discard(j)
                if nt >= t:
                    return

        for i in range(arrays.n):
            advance(arrays.arrival[i])
            reqs.append(
                fleet.submit(arrays.req_id[i], arrays.arrival[i], arrays.prompt_len[i], arrays.output_len[i])
            )
            pending.add(i)
        advance(math.inf)
        seen = [
            (q.first_token_s, q.finish_s, q.num_output, q.outcome, lag.get(j, 0.0))
            for j, q in enumerate(reqs)
        ]
        return fleet, seen

    whole, seen_whole = run(False)
    rolled, seen_rolled = run(True)
    assert seen_rolled == seen_whole  # every client's view, request by request
    assert rolled.replica_metrics() == whole.replica_metrics()  # /metrics counters and gauges
    assert sum(m.num_preemptions for m in whole.replica_metrics()) > 16  # events were dropped and counted
    steps_whole = sum(len(e.rec.step_end) for e in whole.sim.engines)
    for e in rolled.sim.engines:
        assert len(e.rec.step_end) <= 2 * 256 and len(e.rec.steps) == len(e.rec.step_end) * e.rec.step_size
        assert e.rec.request_top - e.rec.request_base <= 2 * 16
        assert len(e.rec.preemption_events) <= 2 * 16
    assert steps_whole > 4 * 2 * 256 * len(rolled.sim.engines)  # the whole record is far longer
    with pytest.raises(RuntimeError, match="no result"):
        rolled.sim.close()
