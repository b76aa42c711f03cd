"""``LivePDRun``: a prefill/decode-disaggregated cluster advanced piecewise is the one-go run
(``PDCluster.run()`` and ``pd_result``, request by request), and its snapshots say what a
disaggregated run adds: the pools, the requests waiting for their KV, the transfers, the legs."""

from __future__ import annotations

import math
import random

import pytest

from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import PDCluster
from servesim.cluster.pd_results import LEGS, PDResult, pd_result
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.simulate import Replica
from servesim.engine import ConstantStepTime, EngineConfig
from servesim.events import LegRecovered, ReplicaDown, ReplicaUp
from servesim.live import LivePDRun
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace

ROWS = [(0.004 * i, 40 + (i * 37) % 400, 3 + i % 9) for i in range(80)]


def _trace(rows: list[tuple[float, int, int]] = ROWS) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o}
            for i, (a, p, o) in enumerate(rows)
        ],
        source="t",
    )


def _ctx() -> RecoveryContext:
    # a slow link, so that transfers queue and overlap steps
    return RecoveryContext(
        model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=2.0, setup_latency_s=0.005
    )


def _pools() -> tuple[list[Replica], list[Replica]]:
    def rep(name: str) -> Replica:
        cfg = EngineConfig(num_gpu_blocks=4000, enable_prefix_caching=True, max_model_len=2048)
        return Replica(name, cfg, ConstantStepTime(step_time_s=0.01))

    return [rep("p0"), rep("p1")], [rep("d0"), rep("d1")]


FAILS = [
    [],
    [FailureEvent(node="d1", time_s=0.05, recover_after_s=0.1)],
    [FailureEvent(node="p0", time_s=0.06)],
]


def _one_go(failures: list[FailureEvent], short: int = 64) -> PDResult:
    p, d = _pools()
    c = PDCluster(_trace(), p, d, _ctx(), short_prompt_tokens=short, failures=failures)
    return pd_result(c.run(), c.link.bytes_total(1))


def _live(failures: list[FailureEvent], short: int = 64) -> LivePDRun:
    p, d = _pools()
    return LivePDRun(_trace(), p, d, _ctx(), short_prompt_tokens=short, failures=failures, link_name="slow")


@pytest.mark.parametrize("failures", FAILS)
@pytest.mark.parametrize("piece", ["time", "steps"])
def test_piecewise_with_snapshots_is_the_one_go_run(failures: list[FailureEvent], piece: str) -> None:
    live = _live(failures)
    t = 0.0
    snaps = 0
    while not live.done:
        if piece == "time":
            t += 0.0113
            live.advance_until(t)
        else:
            live.advance_steps(3)
        snap = live.snapshot()  # looking changes nothing
        live.events()
        snaps += 1
    assert snaps > 5
    assert snap.done and snap.num_closed == len(ROWS)  # done once every request has its outcome
    got = live.finish()
    want = _one_go(failures)
    assert got.model_dump() == want.model_dump()  # every request's figures, the summary, the failures


def test_snapshots_show_the_pools_the_kv_waits_and_the_transfers() -> None:
    live = _live([])
    seen_wait = seen_flying = False
    moved = 0.0
    while not live.done:
        live.advance_until(live.now + 0.005)
        snap = live.snapshot()
        assert [r.label for r in snap.replicas] == [
            "p0 (prefill)",
            "p1 (prefill)",
            "d0 (decode)",
            "d1 (decode)",
        ]
        pd = snap.pd
        assert pd is not None and pd.link == "slow" and pd.short_prompt_tokens == 64
        assert pd.waiting_for_kv == sum(r.kv_wait for r in snap.replicas)
        assert all(r.kv_wait == 0 for r in snap.replicas if r.role == "prefill")
        seen_wait |= pd.waiting_for_kv > 0
        seen_flying |= pd.transfers_in_flight > 0
        assert pd.kv_moved_gb >= moved  # KV moved so far only grows
        moved = pd.kv_moved_gb
    assert seen_wait and seen_flying
    res = live.finish()
    end = live.snapshot().pd
    assert end is not None
    s = res.summary
    # once done, the figures so far are the result's
    assert end.kv_moved_gb == pytest.approx(s.transfer_gb, rel=1e-12) and end.kv_moved_gb > 0
    assert end.transfers_landed == s.transfer_legs - s.cut_transfers
    assert end.num_disaggregated == s.num_disaggregated and end.num_local == s.num_local > 0
    assert end.link_wait_p99_ms == pytest.approx(s.link_wait_p99_ms)
    assert [x.leg for x in end.legs] == list(LEGS)
    for x in end.legs:
        assert x.mean_ms == pytest.approx(s.legs[x.leg].mean_ms, rel=1e-12)
        assert x.p99_ms == pytest.approx(s.legs[x.leg].p99_ms, rel=1e-12)


def test_latencies_and_counts_are_the_decode_legs() -> None:
    """A prefill leg's one token is not the client's first token: TTFT so far is the decode
    side's, and a request is done once (its decode leg), not twice."""
    live = _live([])
    live.advance_until(math.inf)
    snap = live.snapshot()
    res = live.finish()
    assert snap.num_finished == snap.num_closed == len(ROWS) == res.summary.num_requests
    ttft = sorted(r.ttft_s * 1e3 for r in res.requests)
    assert snap.ttft_p99_ms is not None and ttft[0] <= snap.ttft_p99_ms <= ttft[-1]
    assert snap.ttft_p50_ms is not None and snap.ttft_p50_ms > min(r.prefill_s for r in res.requests) * 1e3


def test_failures_in_either_pool_are_events() -> None:
    live = _live(
        [FailureEvent(node="d1", time_s=0.05, recover_after_s=0.1), FailureEvent(node="p0", time_s=0.06)]
    )
    events = []
    while not live.done:
        live.advance_until(live.now + 0.01)
        events += live.events()
        snap = live.snapshot()
        if 0.06 < live.now < 0.15:
            assert [r.alive for r in snap.replicas] == [False, True, True, False]
    res = live.finish()
    downs = [(e.replica, e.time_s, e.num_interrupted) for e in events if isinstance(e, ReplicaDown)]
    assert downs == [(f.node, f.time_s, f.requests) for f in res.failures]
    assert [(e.replica, e.time_s) for e in events if isinstance(e, ReplicaUp)] == [
        ("d1", pytest.approx(0.15))
    ]
    rec = [(e.req_id, e.action, e.target) for e in events if isinstance(e, LegRecovered)]
    assert rec == [(r.req_id, r.action, r.target) for r in res.recoveries] and rec


def test_a_timeline_goes_leg_by_leg() -> None:
    live = _live([])
    live.advance_until(math.inf)
    res = live.finish()
    row = next(r for r in res.requests if r.prefill_replica is not None)
    tl = live.timeline(row.req_id)
    texts = [what for _t, what in tl.events]
    assert tl.state == "finished" and tl.replica == row.decode_replica
    assert any(w.startswith(f"prefill scheduled on {row.prefill_replica}") for w in texts)
    assert any(w.startswith(f"KV pull {row.prefill_replica}->{row.decode_replica}") for w in texts)
    assert "KV landed" in texts and "first token" in texts
    assert [t for t, _ in tl.events] == sorted(t for t, _ in tl.events)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_mix_of_steps_and_time_is_the_one_go_run(seed: int) -> None:
    """Pauses anywhere (a step at a time, a little or a lot of time, looking in between), a
    failure of each pool on the way: still the one-go run, request by request."""
    rng = random.Random(seed)
    failures = [
        FailureEvent(node="p1", time_s=0.03 * seed),
        FailureEvent(node="d0", time_s=0.07, recover_after_s=0.05),
    ]
    live = _live(failures)
    while not live.done:
        if rng.random() < 0.5:
            live.advance_steps(rng.randint(1, 7))
        else:
            live.advance_until(live.now + rng.expovariate(1 / 0.02), max_steps=rng.choice([3, 50, 10**9]))
        if rng.random() < 0.3:
            live.snapshot(waiting_shown=rng.randint(0, 5))
            live.events()
    assert live.finish().model_dump() == _one_go(failures).model_dump()


def test_decode_legs_with_no_decode_replica_up_are_parked_until_one_is_back() -> None:
    p, d = _pools()
    live = LivePDRun(
        _trace(), p, d[:1], _ctx(), failures=[FailureEvent(node="d0", time_s=0.05, recover_after_s=0.2)]
    )
    live.advance_until(0.2)
    snap = live.snapshot()
    assert [r.alive for r in snap.replicas] == [True, True, False] and snap.num_parked > 0
    live.advance_until(0.3)
    assert live.snapshot().num_parked == 0
    p, d = _pools()
    whole = PDCluster(
        _trace(), p, d[:1], _ctx(), failures=[FailureEvent(node="d0", time_s=0.05, recover_after_s=0.2)]
    )
    assert live.finish() == pd_result(whole.run(), whole.link.bytes_total(1))
