"""Prefill/decode disaggregation on a cluster: hand-worked timing of one request, the link queue,
the per-leg split adding up to E2E, and the P/D invariants (docs/invariants.md)."""

from __future__ import annotations

import math
import random

import pytest

from servesim.cluster.pd import PDCluster, check_pd_invariants, link_preset, link_presets
from servesim.cluster.pd_results import pd_result
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.simulate import Replica
from servesim.engine import ConstantStepTime, EngineConfig
from servesim.errors import InputError, InternalError
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace

STEP = 0.01


def _ctx(gbps: float = 5.0, setup_s: float = 0.005) -> RecoveryContext:
    return RecoveryContext(
        model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=gbps, setup_latency_s=setup_s
    )


def _rep(name: str, blocks: int = 4000) -> Replica:
    return Replica(
        name,
        EngineConfig(num_gpu_blocks=blocks, enable_prefix_caching=True),
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


def test_one_request_hand_worked() -> None:
    """P prefills 100 tokens in [0, 10 ms) and finishes (max_tokens 1); D allocates 7 blocks at
    10 ms and pulls 112 tokens' KV: due at 10 ms + 5 ms + transfer_s(112); D reports it at the
    first step end at or after that, then one step recomputes the last prompt token and samples
    the first token, three more decode."""
    ctx = _ctx()
    run = PDCluster(_trace([(0.0, 100, 4)]), [_rep("p0")], [_rep("d0")], ctx).run()
    x = run.transfers[0]
    assert (x.blocks, x.tokens, x.ready_s, x.start_s) == (7, 112, pytest.approx(0.01), pytest.approx(0.01))
    due = 0.01 + 0.005 + ctx.transfer_s(112)
    assert x.end_s == pytest.approx(due)
    landed = math.ceil(due / STEP - 1e-9) * STEP
    d = run.decode_req[0]
    assert d.first_token == pytest.approx(landed + STEP)
    assert d.finish_time == pytest.approx(landed + 4 * STEP)
    assert d.recomputed_tokens == 0 and d.num_output == 4
    # the prefill replica kept the blocks until the transfer landed (its first step end after it)
    p_conn = run.prefill[0].kv_connector
    assert p_conn.sent[0] == pytest.approx(landed)  # type: ignore[union-attr]
    row = pd_result(run, ctx.bytes_total(1)).requests[0]
    assert row.prefill_queue_s == 0.0
    assert row.prefill_s == pytest.approx(STEP)
    assert row.decode_queue_s == pytest.approx(0.0)
    assert row.transfer_s == pytest.approx(landed - STEP)
    assert row.decode_s == pytest.approx(4 * STEP)
    assert row.ttft_s == pytest.approx(landed + STEP)
    assert row.tpot_s == pytest.approx(STEP)


def test_transfers_to_one_decode_replica_queue_on_its_link() -> None:
    ctx = _ctx(gbps=1.0)
    run = PDCluster(_trace([(0.0, 512, 2), (0.0, 512, 2)]), [_rep("p0")], [_rep("d0")], ctx).run()
    a, b = run.transfers[0], run.transfers[1]
    assert b.start_s == pytest.approx(a.end_s)  # the second waits for the first
    assert b.end_s - b.start_s == pytest.approx(a.end_s - a.start_s)


def test_short_prompts_prefill_on_the_decode_replica() -> None:
    rows = [(0.01 * i, 30 if i % 2 else 300, 5) for i in range(20)]
    run = PDCluster(_trace(rows), [_rep("p0")], [_rep("d0")], _ctx(), short_prompt_tokens=64).run()
    assert run.local == {i for i in range(20) if i % 2}
    assert set(run.transfers) == {i for i in range(20) if not i % 2}


@pytest.mark.parametrize("n_p,n_d", [(1, 1), (1, 2), (2, 1)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_traffic_keeps_the_invariants_and_legs_add_up(n_p: int, n_d: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = [(rng.uniform(0, 5), rng.randint(8, 1500), rng.randint(1, 80)) for _ in range(150)]
    blocks = rng.choice([300, 4000])  # 300: KV pressure, decodes preempted after their KV landed
    ctx = _ctx(gbps=rng.choice([1.0, 25.0, 400.0]))
    run = PDCluster(
        _trace(rows),
        [_rep(f"p{i}", blocks) for i in range(n_p)],
        [_rep(f"d{i}", blocks) for i in range(n_d)],
        ctx,
        short_prompt_tokens=rng.choice([0, 64]),
    ).run()  # check_pd_invariants ran at the end
    res = pd_result(run, ctx.bytes_total(1))
    assert len(res.requests) == 150
    for r in res.requests:
        legs = r.prefill_queue_s + r.prefill_s + r.decode_queue_s + r.transfer_s + r.decode_s
        assert legs == pytest.approx(r.e2e_s, abs=1e-9)
        assert min(r.prefill_queue_s, r.prefill_s, r.decode_queue_s, r.transfer_s, r.decode_s) >= -1e-12
    assert res.summary.num_disaggregated == len(run.transfers)


def test_the_invariant_check_catches_a_missing_transfer() -> None:
    run = PDCluster(_trace([(0.0, 100, 3), (0.0, 200, 3)]), [_rep("p0")], [_rep("d0")], _ctx()).run()
    del run.transfers[1]
    with pytest.raises(InternalError, match="never transferred"):
        check_pd_invariants(run)


def test_link_presets_carry_sources() -> None:
    presets = link_presets()
    assert {"rdma-400g", "nvlink-h100", "tcp-100g"} <= set(presets)
    assert all("bandwidth_gbps" in p.sources for p in presets.values())
    with pytest.raises(InputError, match="unknown link"):
        link_preset("carrier-pigeon")


def _sla_trace(rows: list[tuple[float, int, int, float | None]]) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o, "sla_ttft_ms": s}
            for i, (a, p, o, s) in enumerate(rows)
        ],
        source="t",
    )


def test_slo_judges_each_request_by_every_leg_hand_counted() -> None:
    """Five isolated requests of one 100-token prompt (10 s apart, nothing shared): each lands its
    KV after the same L seconds, so its E2E is L + outputs x 10 ms and its TPOT 10 ms (one-token
    outputs: TPOT counts as 0). An E2E cap of L + 60 ms keeps outputs 1, 2 and 4; the 2-output one
    carries its own trace SLA of TTFT <= 1 ms and fails it. Good: outputs 1 and 4, 2 of 5."""
    from servesim.engine.results import SLO

    outs = [1, 2, 4, 8, 16]
    rows = [(10.0 * i, 100, o, 1.0 if o == 2 else None) for i, o in enumerate(outs)]
    ctx = _ctx()
    run = PDCluster(_sla_trace(rows), [_rep("p0")], [_rep("d0")], ctx).run()
    plain = pd_result(run, ctx.bytes_total(1))
    landed = plain.requests[0].e2e_s - STEP  # L: the first request's E2E less its one decode step
    for r, o in zip(plain.requests, outs, strict=True):
        assert r.e2e_s == pytest.approx(landed + o * STEP)
    cap = (landed + 6 * STEP) * 1000.0
    res = pd_result(run, ctx.bytes_total(1), SLO(e2e_ms=cap))
    s = res.summary
    assert [r.good for r in res.requests] == [True, False, True, False, False]
    assert (s.num_good, s.good_fraction) == (2, 0.4)
    span = 40.0 + landed + 16 * STEP  # first arrival to the last completion
    assert s.goodput == pytest.approx(2 / span)
    # a TPOT cap under the 10 ms step: only the one-token output (TPOT counted 0) is good
    tight = pd_result(run, ctx.bytes_total(1), SLO(tpot_ms=5.0))
    assert [r.good for r in tight.requests] == [True, False, False, False, False]
    # without an SLO the document has no SLO key at all
    dumped = plain.model_dump(mode="json")
    assert not {"slo", "num_good", "goodput", "good_fraction"} & set(dumped["summary"])
    assert "good" not in dumped["requests"][0]
