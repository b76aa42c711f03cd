"""Failures in a disaggregated cluster: a lost prefill replica (its prefills run again elsewhere,
the KV it held for transfers is lost), a lost decode replica (its KV re-transferred from the
prefill side or recomputed, as the recovery planner's cost model decides), the outbound link of
a prefill replica, and the P/D invariants over random failure times (docs/invariants.md)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.cluster.config import FailureEvent, RouterSpec
from servesim.cluster.pd import PDCluster, PDRun, parse_pool_node
from servesim.cluster.pd_results import pd_result
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.simulate import Replica
from servesim.engine import ConstantStepTime, EngineConfig
from servesim.errors import InputError
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace

STEP = 0.01
RR = RouterSpec(policy="round_robin")


def _ctx(gbps: float = 400.0, setup_s: float = 0.0) -> RecoveryContext:
    return RecoveryContext(
        model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=gbps, setup_latency_s=setup_s
    )


def _rep(name: str, blocks: int = 4000, budget: int = 256) -> Replica:
    return Replica(
        name,
        EngineConfig(
            num_gpu_blocks=blocks, enable_prefix_caching=True, max_num_batched_tokens=budget, max_num_seqs=64
        ),
        ConstantStepTime(step_time_s=STEP),
    )


def _trace(rows: list[tuple[float, int, int]]) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o}
            for i, (a, p, o) in enumerate(rows)
        ],
        source="t",
    )


def _run(rows, n_p, n_d, ctx, fails=(), **kw) -> PDRun:  # type: ignore[no-untyped-def]
    return PDCluster(
        _trace(rows),
        [_rep(f"p{i}") for i in range(n_p)],
        [_rep(f"d{i}") for i in range(n_d)],
        ctx,
        failures=[FailureEvent(node=n, time_s=t, recover_after_s=back) for n, t, back in fails],
        decode_router=RR,
        prefill_router=RR,
        **kw,
    ).run()


def _legs_add_up(run: PDRun, ctx: RecoveryContext) -> None:
    for r in pd_result(run, ctx.bytes_total(1)).requests:
        legs = r.prefill_queue_s + r.prefill_s + r.decode_queue_s + r.transfer_s + r.decode_s
        assert legs == pytest.approx(r.e2e_s, abs=1e-9)
        assert min(r.prefill_queue_s, r.prefill_s, r.decode_queue_s, r.transfer_s, r.decode_s) >= -1e-9


def test_two_transfers_from_one_prefill_replica_share_its_outbound_link() -> None:
    """Two 512-token prompts prefilled in one step go to d0 and d1 (round robin) at 10 ms: both
    inbound links are free, but p0's outbound link carries one at a time, so the second lands at
    10 ms + 2 x (setup + wire)."""
    ctx = _ctx(gbps=5.0, setup_s=0.005)
    run = PDCluster(
        _trace([(0.0, 512, 2), (0.0, 512, 2)]),
        [_rep("p0", budget=2048)],
        [_rep("d0"), _rep("d1")],
        ctx,
        decode_router=RR,
    ).run()
    a, b = sorted(run.transfers.values(), key=lambda x: x.start_s)
    assert {a.decode, b.decode} == {"d0", "d1"}
    one = 0.005 + ctx.transfer_s(512)
    assert a.ready_s == b.ready_s == pytest.approx(STEP)
    assert a.end_s == pytest.approx(STEP + one)
    assert b.start_s == pytest.approx(a.end_s)
    assert b.end_s == pytest.approx(STEP + 2 * one)


def test_lost_decode_replica_mid_decode_recomputes_on_the_other() -> None:
    """r0 (100 tokens, 50 out) decodes on d0; d0 is lost at 0.2 s: the prefill side freed its KV
    when it landed, so it is recomputed (prompt + outputs so far) on d1, once."""
    ctx = _ctx()
    run = _run([(0.0, 100, 50)], 1, 2, ctx, [("d0", 0.2, None)])
    assert [(r.action, r.node, r.target) for r in run.recoveries] == [("recompute", "d0", "d1")]
    d = run.decode_req[0]
    assert d.num_output == 50 and run.decode_of[0] == 1
    assert d.recomputed_tokens > 100  # the prompt and the outputs it had
    assert len(run.legs) == 1 and run.legs[0].landed and run.legs[0].decode == "d0"
    _legs_add_up(run, ctx)


def test_lost_decode_replica_mid_transfer_re_transfers_on_a_fast_link() -> None:
    """A 4096-token prompt (16 prefill steps, 160 ms) whose KV is in flight to d0 when d0 is lost:
    the prefill side still holds it; reading it again (~12 ms at 400 Gbit/s) beats 16 steps of
    recompute, so it is a second leg to d1, and only that one lands."""
    ctx = _ctx(gbps=400.0)
    t_fail = 0.16 + 0.5 * ctx.transfer_s(4096)
    run = _run([(0.0, 4096, 5)], 1, 2, ctx, [("decode:0", t_fail, None)])
    assert [r.action for r in run.recoveries] == ["re-transfer"]
    assert [(x.decode, x.landed) for x in run.legs] == [("d0", False), ("d1", True)]
    assert run.legs[0].end_s == pytest.approx(t_fail)
    assert run.decode_req[0].first_token > run.transfers[0].end_s
    assert run.decode_req[0].recomputed_tokens == 0
    _legs_add_up(run, ctx)


def test_lost_decode_replica_mid_transfer_recomputes_on_a_slow_link() -> None:
    """Same, over 1 Gbit/s (a 4 s read): recomputing the prompt on d1 is cheaper, and the
    prefill side frees the KV nobody will read."""
    ctx = _ctx(gbps=1.0)
    run = _run([(0.0, 4096, 5)], 1, 2, ctx, [("d0", 1.0, None)])
    assert [r.action for r in run.recoveries] == ["recompute"]
    assert "recompute" in run.recoveries[0].reason
    assert [x.landed for x in run.legs] == [False]
    assert 0 not in run.transfers
    assert run.prefill[0].kv_connector.sent[0] < 1.1  # type: ignore[union-attr]
    _legs_add_up(run, ctx)


def test_lost_prefill_replica_mid_prefill_runs_it_again_on_the_other() -> None:
    ctx = _ctx()
    run = _run([(0.0, 4096, 5)], 2, 1, ctx, [("p0", 0.05, None)])
    assert [(r.action, r.target) for r in run.recoveries] == [("re-prefill", "p1")]
    assert [(x.prefill, x.landed) for x in run.legs] == [("p1", True)]
    _legs_add_up(run, ctx)


def test_lost_prefill_replica_mid_transfer_prefills_on_the_decode_replica() -> None:
    """p0 is lost while d0 reads r0's KV from it: the read fails and d0 recomputes the prompt
    itself (vLLM's load-failure policy "recompute"); no leg landed."""
    ctx = _ctx(gbps=1.0)
    run = _run([(0.0, 4096, 5)], 2, 1, ctx, [("p0", 1.0, None)])
    assert [(r.action, r.target) for r in run.recoveries] == [("prefill-on-decode", "d0")]
    assert [x.landed for x in run.legs] == [False] and not run.transfers
    assert run.decode_req[0].first_scheduled >= 1.0
    _legs_add_up(run, ctx)


def test_all_decode_replicas_lost_parks_until_one_is_back() -> None:
    ctx = _ctx()
    run = _run([(0.0, 100, 30), (0.5, 100, 3)], 1, 1, ctx, [("d0", 0.1, 1.0)])
    assert not run.parked and all(d.finish_time > 1.1 for d in run.decode_req.values())
    run = _run([(0.0, 100, 30), (0.5, 100, 3)], 1, 1, ctx, [("d0", 0.1, None)])
    assert sorted(run.parked) == [0, 1]
    assert pd_result(run, ctx.bytes_total(1)).summary.num_unfinished == 2


def test_pool_node_names() -> None:
    assert parse_pool_node("decode:1", 1, 2) == ("decode", 1)
    assert parse_pool_node("p0", 1, 2) == ("prefill", 0)
    for bad in ("decode:2", "x0", "prefill:a", "n0"):
        with pytest.raises(InputError):
            parse_pool_node(bad, 1, 2)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    fails=st.lists(
        st.tuples(
            st.sampled_from(["p0", "p1", "d0", "d1"]),
            st.floats(0.0, 3.0),
            st.one_of(st.none(), st.floats(0.05, 2.0)),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda f: f[0],
    ),
    gbps=st.sampled_from([1.0, 25.0, 400.0]),
    blocks=st.sampled_from([300, 4000]),
)
def test_random_failures_lose_nothing_and_keep_the_invariants(
    seed: int, fails: list[tuple[str, float, float | None]], gbps: float, blocks: int
) -> None:
    import random

    rng = random.Random(seed)
    rows = [(rng.uniform(0, 3), rng.randint(8, 1500), rng.randint(1, 60)) for _ in range(40)]
    ctx = _ctx(gbps=gbps, setup_s=0.001)
    run = PDCluster(
        _trace(rows),
        [_rep(f"p{i}", blocks) for i in range(2)],
        [_rep(f"d{i}", blocks) for i in range(2)],
        ctx,
        failures=[FailureEvent(node=n, time_s=t, recover_after_s=b) for n, t, b in fails],
        short_prompt_tokens=rng.choice([0, 64]),
    ).run()  # check_pd_invariants ran: none lost, one landed leg at most, none decoded early
    parked = set(run.parked)
    assert len(run.decode_req) == 40
    for idx, d in run.decode_req.items():
        assert idx in parked or d.num_output == rows[int(d.req_id[1:])][2]
    if parked:  # only when every decode replica was down for good
        assert all(b is None for n, _, b in fails if n.startswith("d"))
    for x in run.legs:
        assert x.end_s >= x.start_s >= x.ready_s
    _legs_add_up(run, ctx)
