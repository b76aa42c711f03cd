"""The online disaggregated fleet (``servesim.OnlinePDFleet``, what ``servesim emulate
--prefill-replicas/--decode-replicas`` drives): a trace fed request by request at its arrival
times gives the batch ``PDCluster.run()`` figures; an abort in any phase frees every block on both
sides; rolling records keep memory bounded and the clients' figures right."""

from __future__ import annotations

import math

import pytest

from servesim import ConstantStepTime, EngineConfig, RecoveryContext
from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import PDCluster
from servesim.cluster.pd_results import pd_result
from servesim.cluster.simulate import Replica
from servesim.engine.engine import TraceArrays
from servesim.engine.request import OUTCOME_UNFINISHED
from servesim.errors import ConfigError, InputError
from servesim.online import OnlinePDFleet, OnlinePDRequest
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace

STEP = 0.01


def _ctx(gbps: float = 5.0) -> RecoveryContext:
    return RecoveryContext(
        model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=gbps, setup_latency_s=0.005
    )


def _rep(name: str, blocks: int = 4000, mml: int | None = 2048) -> Replica:
    return Replica(
        name,
        EngineConfig(num_gpu_blocks=blocks, enable_prefix_caching=True, max_model_len=mml),
        ConstantStepTime(step_time_s=STEP),
    )


def _rows(n: int, shared: bool) -> list[dict[str, object]]:
    """Prompts of 40..440 tokens; ``shared``: each a 32-token system prompt (two of them) ahead of
    its own blocks, so the prefill router's prefix-aware pick and the prefix cache matter."""
    out: list[dict[str, object]] = []
    for i in range(n):
        prompt = 40 + (i * 37) % 400
        row: dict[str, object] = {
            "req_id": f"r{i}",
            "arrival_time_s": 0.004 * i,
            "prompt_len": prompt,
            "output_len": 3 + i % 9,
        }
        if shared:
            row["hash_ids"] = [1000 + i % 2, 1002 + i % 2] + [10_000 * i + b for b in range(prompt // 16 - 2)]
        out.append(row)
    return out


def _fleet(**kw: object) -> OnlinePDFleet:
    return OnlinePDFleet(
        [_rep("p0"), _rep("p1")],
        [_rep("d0"), _rep("d1")],
        _ctx(),
        short_prompt_tokens=64,
        **kw,  # type: ignore[arg-type]
    )


def _feed(fleet: OnlinePDFleet, trace: Trace) -> list[OnlinePDRequest]:
    """``trace`` submitted one arrival at a time, the clock advanced in between, then to the end."""
    arr = TraceArrays(trace, trim_hash_ids=False)
    reqs = []
    for i in range(arr.n):
        fleet.advance_until(arr.arrival[i])
        ids = arr.hash_ids[i]
        reqs.append(
            fleet.submit(
                arr.req_id[i],
                arr.arrival[i],
                arr.prompt_len[i],
                arr.output_len[i],
                hash_ids=None if ids is None else list(ids),
                hash_block_size=arr.hash_block_size or 0,
            )
        )
    fleet.advance_until(math.inf)
    return reqs


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize(
    "failures",
    [
        [],
        [FailureEvent(node="d1", time_s=0.05, recover_after_s=0.1)],
        [FailureEvent(node="p0", time_s=0.06, recover_after_s=0.05)],
    ],
)
def test_a_trace_fed_online_gives_the_batch_run(shared: bool, failures: list[FailureEvent]) -> None:
    trace = Trace.from_records(_rows(60, shared), hash_block_size=16 if shared else None)
    batch = PDCluster(
        trace,
        [_rep("p0"), _rep("p1")],
        [_rep("d0"), _rep("d1")],
        _ctx(),
        short_prompt_tokens=64,
        failures=failures,
    ).run()
    fleet = _fleet()
    for f in failures:
        fleet.fail(f.node, f.time_s, f.recover_after_s)
    reqs = _feed(fleet, trace)
    fleet.check_invariants()
    # what each client saw: the decode leg's first token and finish, its output and outcome
    seen = [(q.req_id, q.first_token_s, q.finish_s, q.num_output, q.outcome) for q in reqs]
    want = [
        (d.req_id, d.first_token, d.finish_time, d.num_output, "finished")
        for _, d in sorted(batch.decode_req.items())
    ]
    assert seen == want
    assert [fleet.replica_of(q) for q in reqs] == [
        batch.decode[batch.decode_of[i]].name for i in sorted(batch.decode_req)
    ]
    if shared:  # the prompts' shared blocks were found cached on the prefill side
        assert sum(m.prefix_cache_hits for m in fleet.replica_metrics() if m.pool == "prefill") > 0
    online = fleet.cluster.finish()
    bpt = fleet.link.bytes_total(1)
    rows = pd_result(online, bpt).requests
    assert rows == pd_result(batch, bpt).requests
    assert [(r.recovered, r.decode_replica) for r in rows] == [
        (r.recovered, r.decode_replica) for r in pd_result(batch, bpt).requests
    ]
    # the emulator's per-leg split is pd_results' (the same formulas)
    for q, row in zip(reqs, rows, strict=True):
        legs = fleet.legs(q)
        assert legs is not None
        for leg in ("prefill_queue", "prefill", "decode_queue", "transfer", "decode"):
            assert legs.get(leg, ("", 0.0))[1] == pytest.approx(getattr(row, f"{leg}_s"), abs=1e-12), leg
        assert legs["decode"][0] == row.decode_replica
        if row.prefill_replica is not None:
            assert legs["prefill"][0] == row.prefill_replica


def _blocks_all_free(fleet: OnlinePDFleet) -> None:
    c = fleet.cluster
    for e in c.p_eng + c.d_eng:
        assert e.pool.usage() == 0.0, e.name  # nothing allocated: every block back in the pool
        conn = c._conn(e)
        assert conn.pending_sends() == [] and not conn.has_pending_loads(), e.name
        assert not e.live, e.name
        e.assert_invariants()


PHASES = ("prefill queue", "prefill", "link queue", "transfer", "decode")


def _phase(fleet: OnlinePDFleet, q: OnlinePDRequest) -> str | None:
    """Where ``q`` is now (None: not arrived, done, or between the phases of PHASES)."""
    run = fleet.cluster.run_
    idx = q._r.idx
    if q.done or idx not in run.decode_req:
        return None
    pr = run.prefill_req.get(idx)
    if pr is not None and pr.outcome == OUTCOME_UNFINISHED:
        return "prefill queue" if pr.first_scheduled < 0 else "prefill"
    x = run.transfers.get(idx)
    if x is not None and run.receiver[idx].receiving(idx):
        return "link queue" if fleet.now < x.start_s else "transfer"
    return "decode" if q.num_output > 0 else None


@pytest.mark.parametrize("gbps", [5.0, 50.0])
def test_an_abort_in_any_phase_frees_every_block_on_both_sides(gbps: float) -> None:
    """40 requests of 300..1500-token prompts, one prefill replica, a slow link; every other one's
    client leaves in a phase of its own (PHASES: in the prefill queue, prefilling, its KV queued
    for the link or on it, decoding). Both legs end aborted, every block of both pools comes back,
    a read in flight is cut (marked an abort, not a failed transfer), the rest are served."""
    fleet = OnlinePDFleet([_rep("p0", 3000)], [_rep("d0", 3000), _rep("d1", 3000)], _ctx(gbps))
    reqs = [fleet.submit(f"r{i}", 0.002 * i, 300 + (i * 131) % 1200, 40) for i in range(40)]
    target = {id(q): PHASES[(i // 2) % len(PHASES)] for i, q in enumerate(reqs) if i % 2}
    hit: set[str] = set()
    aborted: set[int] = set()
    t = 0.0
    while fleet.next_time() < math.inf:
        t += 0.001
        fleet.advance_until(t)
        for q in reqs:
            phase = _phase(fleet, q)
            if id(q) not in aborted and phase is not None and target.get(id(q)) == phase:
                fleet.abort(q, t)
                aborted.add(id(q))
                hit.add(phase)
        fleet.check_invariants()
    assert hit == set(PHASES)
    _blocks_all_free(fleet)
    for q in reqs:
        assert q.outcome == ("aborted" if id(q) in aborted else "finished"), q.req_id
    legs = fleet.cluster.run_.legs
    assert any(x.aborted and not x.landed for x in legs)  # a read cut mid-flight
    assert all(x.landed or x.aborted for x in legs)  # none failed: no replica was lost
    fleet.cluster.finish()  # docs/invariants.md's P/D invariants, aborts allowed


def test_an_abort_after_the_finish_or_twice_changes_nothing() -> None:
    fleet = _fleet()
    q = fleet.submit("a", 0.0, 200, 3)
    fleet.advance_until(math.inf)
    assert q.outcome == "finished"
    fleet.abort(q, fleet.now)
    fleet.abort(q, fleet.now + 1)
    fleet.advance_until(math.inf)
    assert q.outcome == "finished" and q.num_output == 3
    _blocks_all_free(fleet)


def test_a_lost_replica_is_injected_online_and_checked_as_a_plan() -> None:
    fleet = _fleet()
    fleet.fail("d0", 0.5, 1.0)
    with pytest.raises(InputError, match=r"'d0' fails at 0\.7 s while already down"):
        fleet.fail("d0", 0.7)
    with pytest.raises(InputError, match="no replica 'd7'"):
        fleet.fail("d7", 1.0)
    fleet.advance_until(1.0)
    with pytest.raises(InputError, match="in the past"):
        fleet.cluster.inject_failure("p1", 0.2)
    fleet.fail("decode:1", 2.0)  # the pool:index spelling names the same replica
    assert [(f.node, f.pool, f.time_s) for f in fleet.cluster.run_.failures] == [
        ("d0", "decode", 0.5),
        ("d1", "decode", 2.0),
    ]


def test_every_replica_needs_its_max_model_len_online() -> None:
    with pytest.raises(ConfigError, match="replicas d0: an online fleet needs max_model_len set"):
        OnlinePDFleet([_rep("p0")], [_rep("d0", mml=None)], _ctx())


def test_rolling_records_stay_bounded_and_the_clients_figures_right() -> None:
    trace = Trace.from_records(_rows(300, False))
    plain = _fleet()
    want = [(q.first_token_s, q.finish_s, q.num_output) for q in _feed(plain, trace)]
    rolling = _fleet(rolling_records=True)
    rolling.cluster.roll_records(16, 16)  # small, to see it trim
    reqs = _feed(rolling, trace)
    assert [(q.first_token_s, q.finish_s, q.num_output) for q in reqs] == want
    c = rolling.cluster
    assert len(c.run_.decode_req) <= 32 and len(c._origin) <= 32
    assert len(c.run_.legs) <= 32 and c.legs_base > 0
    for e in c.p_eng + c.d_eng:
        assert len(e.rec.step_end) <= 32 and e.rec.request_top - e.rec.request_base <= 32
        for col in (c._conn(e).recv_done, c._conn(e).sent, c._conn(e).recv_started):
            assert len(col) <= 32
    rolling.check_invariants()
