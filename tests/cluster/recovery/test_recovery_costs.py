"""The cost model term by term: break-even, its monotonicity, stale snapshots, prefix hits, links."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from recovery_helpers import job, linear_target, record

from servesim.cluster.recovery import (
    ContextSpec,
    JobSpec,
    RecoveryContext,
    Strategy,
    TargetState,
    break_even_gbps,
    build_context,
    build_step_time,
    cold_restart_cost,
    decide_job,
    default_targets,
    migrate_cost,
    plan_recovery,
    prefill_timeline,
)
from servesim.engine import BatchComposition, ConstantStepTime, LinearStepTime
from servesim.perf import kv_bytes_per_token, load_catalog


def spec_targets(model: str, tp: int, **kw: object) -> tuple[RecoveryContext, TargetState]:
    spec = ContextSpec(model=model, tp=tp, **kw)  # type: ignore[arg-type]
    st, _ = build_step_time(spec)
    return build_context(spec, 10.0), default_targets(spec, st, 1_000_000)[0]


def be_of(ctx: RecoveryContext, t: TargetState, n: int, **jkw: object) -> float | None:
    j = JobSpec(job_id="j", prompt_tokens=n - 1, generated_tokens=1, kv_cache_checkpointed=True, **jkw)  # type: ignore[arg-type]
    return break_even_gbps(ctx, cold_restart_cost(j, t), migrate_cost(j, ctx, t))


def test_context_uses_the_shared_kv_formula() -> None:
    cat = load_catalog()
    for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("llama-3.1-405b-fp8", 8)):
        ctx = build_context(ContextSpec(model=name, tp=tp), 10)
        assert ctx.kv_bytes_per_token_per_rank == kv_bytes_per_token(cat.model(name), tp)
        assert ctx.bytes_total(100) == 100 * tp * kv_bytes_per_token(cat.model(name), tp)


def test_transfer_time_per_rank_links_and_shared_link() -> None:
    ctx, _ = spec_targets("llama-3.1-70b", 4)
    per_rank = ctx.transfer_s(1000)
    assert per_rank == pytest.approx(1000 * 81_920 * 8 / (10e9 * 0.9))
    shared = dataclasses.replace(ctx, nic_per_rank=False)
    assert shared.transfer_s(1000) == pytest.approx(4 * per_rank)
    assert ctx.transfer_s(1000, 20.0) == pytest.approx(per_rank / 2)


def test_break_even_is_where_both_times_are_equal() -> None:
    ctx, t = spec_targets("llama-3.1-405b-fp8", 8)
    j = JobSpec(job_id="j", prompt_tokens=3000, generated_tokens=200, kv_cache_checkpointed=True)
    be = break_even_gbps(ctx, cold_restart_cost(j, t), migrate_cost(j, ctx, t))
    assert be is not None
    at = ctx.with_bandwidth(be)
    m = migrate_cost(j, at, t)
    assert m is not None
    assert m.total_s == pytest.approx(cold_restart_cost(j, t).total_s, rel=1e-9)
    assert decide_job(j, ctx.with_bandwidth(be * 1.001), [t]).strategy is Strategy.MIGRATE_STATE
    assert decide_job(j, ctx.with_bandwidth(be * 0.999), [t]).strategy is Strategy.COLD_RESTART


def test_more_kv_bytes_per_token_raises_the_break_even() -> None:
    """Same compute, half the KV bytes (fp8 KV on the same survivors): exactly half the break-even."""
    ctx, t = spec_targets("llama-3.1-70b", 4)
    fp8 = dataclasses.replace(ctx, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token_per_rank * 2 == ctx.kv_bytes_per_token_per_rank
    for n in (1152, 8704):
        a, b = be_of(ctx, t, n), be_of(fp8, t, n)
        assert a is not None and b is not None
        assert b == pytest.approx(a / 2)


def test_larger_kv_at_similar_compute_raises_the_break_even() -> None:
    """Llama-2-7B (MHA: 512 KiB/token) vs Llama-3.1-8B (GQA: 128 KiB/token), similar FLOPs per token."""
    for n in (1152, 8704):
        mha = be_of(*spec_targets("llama-2-7b", 1), n)
        gqa = be_of(*spec_targets("llama-3.1-8b", 1), n)
        assert mha is not None and gqa is not None and mha > 2 * gqa


def test_across_llama_3_1_sizes_the_break_even_falls() -> None:
    """KV bytes grow slower than prefill FLOPs (8 KV heads at every size): bigger models migrate sooner."""
    for n in (1152, 8704):
        b8 = be_of(*spec_targets("llama-3.1-8b", 1), n)
        b70 = be_of(*spec_targets("llama-3.1-70b", 4), n)
        b405 = be_of(*spec_targets("llama-3.1-405b-fp8", 8), n)
        assert b8 is not None and b70 is not None and b405 is not None
        assert b8 > b70 > b405


def test_more_tokens_lower_the_break_even_at_whole_chunks() -> None:
    """Prefill attention grows with the square of the tokens, the transfer linearly; the setup and
    the resume step are fixed. Within a chunk the curve saw-tooths (a new chunk adds a step)."""
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-405b-fp8", 8)):
        ctx, t = spec_targets(model, tp)
        bes = [be_of(ctx, t, 2048 * k) for k in range(1, 12)]
        assert all(b is not None for b in bes)
        assert all(a >= b for a, b in itertools.pairwise(bes))  # type: ignore[operator]
        assert bes[0] > bes[-1] * 1.1  # type: ignore[operator]


def test_tiny_jobs_never_pay_for_the_setup() -> None:
    ctx, t = spec_targets("llama-3.1-405b-fp8", 8)
    assert be_of(ctx, t, 2) is None
    j = JobSpec(job_id="j", prompt_tokens=1, generated_tokens=1, kv_cache_checkpointed=True)
    d = decide_job(j, ctx.with_bandwidth(1e6), [t])
    assert d.strategy is Strategy.COLD_RESTART and d.break_even_gbps is None
    assert "never" in d.reason


@pytest.mark.parametrize("n", [1152, 8704])
def test_busier_survivor_lowers_the_break_even(n: int) -> None:
    """The cold restart's prefill shares every step with the target's decode batch (budget and
    time); the migrated job needs one step. More decodes, longer contexts: migration wins sooner.
    (From idle to the first decode batch the resumed job's own step, 1 token then 33, crosses
    vLLM's one-shot/two-shot all-reduce switch on 8 GPUs, which offsets that by a fraction of a
    percent; so the busy states are compared with each other, and the busiest with idle.)"""
    ctx, idle = spec_targets("llama-3.1-405b-fp8", 8)
    at_idle = be_of(ctx, idle, n)
    previous = None
    for decodes, mean_ctx in ((32, 2000), (64, 4000), (127, 8000)):
        busy = dataclasses.replace(idle, running_decodes=decodes, decode_ctx_sum=decodes * mean_ctx)
        be = be_of(ctx, busy, n)
        assert be is not None and (previous is None or be < previous)
        previous = be
    assert at_idle is not None and previous is not None and previous < at_idle


def test_queue_wait_counts_for_both_strategies() -> None:
    ctx, idle = spec_targets("llama-3.1-405b-fp8", 8)
    queued = dataclasses.replace(idle, queued_prefill_tokens=3 * 2048 + 100)
    j = JobSpec(job_id="j", prompt_tokens=1000, generated_tokens=10, kv_cache_checkpointed=True)
    c0, c1 = cold_restart_cost(j, idle), cold_restart_cost(j, queued)
    m0, m1 = migrate_cost(j, ctx, idle), migrate_cost(j, ctx, queued)
    assert m0 is not None and m1 is not None
    step = idle.step_time.step_time(BatchComposition(0, 0, [(2048, 0)]))
    assert c1.queue_wait_s == pytest.approx(3 * step) == m1.queue_wait_s
    assert c0.queue_wait_s == 0 == m0.queue_wait_s
    assert c1.total_s > c0.total_s and m1.total_s > m0.total_s


def test_prefill_is_chunked_by_the_budget_left_by_decodes() -> None:
    t = linear_target("t", max_num_batched_tokens=1000, running_decodes=200, decode_ctx_sum=200 * 50)
    tl = prefill_timeline(t, 2000, 0, 0)
    assert tl.steps == 3  # 800 + 800 + 400
    lin = LinearStepTime()
    expect = sum(
        lin.step_time(BatchComposition(200, 10_000, [(c, p)])) for c, p in ((800, 0), (800, 800), (400, 1600))
    )
    assert tl.prefill_s == pytest.approx(expect)
    # A queue tail shares the job's first step.
    tl2 = prefill_timeline(t, 500, 0, 900)
    assert tl2.steps == 2
    assert tl2.queue_wait_s == pytest.approx(lin.step_time(BatchComposition(200, 10_000, [(800, 0)])))
    assert tl2.prefill_s == pytest.approx(lin.step_time(BatchComposition(200, 10_000, [(100, 0), (500, 0)])))


def test_stale_checkpoint_moves_up_to_its_offset_and_recomputes_the_rest() -> None:
    ctx, t = spec_targets("llama-3.1-405b-fp8", 8)
    fresh = JobSpec(job_id="j", prompt_tokens=4000, generated_tokens=1000, kv_cache_checkpointed=True)
    stale = JobSpec(
        job_id="j",
        prompt_tokens=4000,
        generated_tokens=1000,
        kv_cache_checkpointed=True,
        checkpoint_offset_tokens=4200,
    )
    m_fresh, m_stale = migrate_cost(fresh, ctx, t), migrate_cost(stale, ctx, t)
    assert m_fresh is not None and m_stale is not None
    assert (m_fresh.moved_tokens, m_fresh.recompute_tokens, m_fresh.forward_tokens) == (5000, 0, 1)
    assert (m_stale.moved_tokens, m_stale.recompute_tokens, m_stale.forward_tokens) == (4200, 800, 800)
    assert m_stale.transfer_s == pytest.approx(ctx.transfer_s(4200))
    # The recomputed tail attends to the moved prefix.
    resumed = dataclasses.replace(t, queued_prefill_tokens=0)
    assert m_stale.prefill_s == pytest.approx(prefill_timeline(resumed, 800, 4200, 0).prefill_s)
    d = decide_job(stale, ctx.with_bandwidth(100), [t])
    assert d.strategy is Strategy.MIGRATE_STATE and d.stale_checkpoint
    assert (d.moved_tokens, d.recompute_tokens, d.recompute_required) == (4200, 800, True)
    assert d.bytes_to_move == ctx.bytes_total(4200)
    assert "covers 4200 of 5000" in d.reason
    # In blocks: 262 blocks of 16 = 4192 tokens.
    blocks = JobSpec(
        job_id="j",
        prompt_tokens=4000,
        generated_tokens=1000,
        kv_cache_checkpointed=True,
        checkpoint_offset_blocks=262,
    )
    mb = migrate_cost(blocks, ctx, t)
    assert mb is not None and (mb.moved_tokens, mb.recompute_tokens) == (4192, 808)


def test_a_staler_checkpoint_needs_more_bandwidth() -> None:
    ctx, t = spec_targets("llama-3.1-405b-fp8", 8)
    bes = []
    for off in (8000, 6000, 4000, 2000):
        j = JobSpec(
            job_id="j",
            prompt_tokens=7000,
            generated_tokens=1000,
            kv_cache_checkpointed=True,
            checkpoint_offset_tokens=off,
        )
        bes.append(break_even_gbps(ctx, cold_restart_cost(j, t), migrate_cost(j, ctx, t)))
    assert all(b is not None for b in bes)
    # Moving less also saves less compute; per moved token the saving falls as the tail grows.
    assert bes[0] < bes[-1]  # type: ignore[operator]


def test_prefix_hits_on_the_target_reduce_the_recompute() -> None:
    t = linear_target("t", cached_prefix_tokens={"j": 1000, "k": 5000})
    j = JobSpec(job_id="j", prompt_tokens=1500, generated_tokens=100, kv_cache_checkpointed=False)
    c = cold_restart_cost(j, t)
    assert c.prefix_hit_tokens == 992  # whole blocks of 16
    assert c.recompute_tokens == 1600 - 992
    # Capped at N - 1 and block aligned (vLLM's lookup): a fully cached 1600-token job recomputes a block.
    k = JobSpec(job_id="k", prompt_tokens=1500, generated_tokens=100, kv_cache_checkpointed=True)
    ck = cold_restart_cost(k, t)
    assert ck.prefix_hit_tokens == 1584 and ck.recompute_tokens == 16
    ctx = RecoveryContext(load_catalog().model("llama-3.1-8b"))
    mk = migrate_cost(k, ctx, t)
    assert mk is not None and mk.moved_tokens == 16 and mk.recompute_tokens == 0


def test_a_snapshot_inside_the_cached_prefix_moves_nothing() -> None:
    t = linear_target("t", cached_prefix_tokens={"j": 2000})
    ctx = RecoveryContext(load_catalog().model("llama-3.1-8b"), bandwidth_gbps=1e6)
    j = JobSpec(
        job_id="j",
        prompt_tokens=2500,
        generated_tokens=10,
        kv_cache_checkpointed=True,
        checkpoint_offset_tokens=1000,
    )
    d = decide_job(j, ctx, [t])
    assert d.strategy is Strategy.COLD_RESTART and d.break_even_gbps is None
    assert d.recompute_tokens == 2510 - 2000


def test_the_resume_step_is_one_decode_on_the_target() -> None:
    t = TargetState(name="t", step_time=ConstantStepTime(step_time_s=0.02), free_blocks=10**6, free_slots=10)
    ctx = RecoveryContext(load_catalog().model("llama-3.1-8b"), bandwidth_gbps=10, setup_latency_s=0.005)
    j = JobSpec(job_id="j", prompt_tokens=5000, generated_tokens=0, kv_cache_checkpointed=True)
    m = migrate_cost(j, ctx, t)
    assert m is not None
    assert m.prefill_s == pytest.approx(0.02)
    assert m.total_s == pytest.approx(0.005 + ctx.transfer_s(5000) + 0.02)
    c = cold_restart_cost(j, t)
    assert c.prefill_s == pytest.approx(0.02 * math.ceil(5000 / 2048))


def test_plan_accepts_cluster_context_from_the_record() -> None:
    plan = plan_recovery(
        record(
            [job("a", 1000, 10), job("b", 1000, 10)],
            context={"survivors": 2},
            cluster=[{"name": "x", "running_decodes": 3, "mean_decode_ctx": 100}, {"name": "y"}],
        )
    )
    assert [t.name for t in plan.targets] == ["x", "y"]
    assert plan.targets[0].free_slots_before == 128 - 3


def test_the_cluster_planner_weighs_the_stall_a_recompute_puts_on_busy_decodes() -> None:
    """Hand-worked: a cold restart's 1,500-token prefill rides with 100 running decodes, each of
    which waits for those longer steps; a migration's one-token resume barely slows them."""
    ctx = RecoveryContext(load_catalog().model("llama-3.1-8b"), bandwidth_gbps=10.0)
    busy = linear_target("busy", max_num_batched_tokens=2048, running_decodes=100, decode_ctx_sum=100 * 800)
    j = JobSpec(job_id="j", prompt_tokens=1400, generated_tokens=100, kv_cache_checkpointed=True)
    cold, mig = cold_restart_cost(j, busy), migrate_cost(j, ctx, busy)
    assert mig is not None
    lin = LinearStepTime()
    alone = lin.step_time(BatchComposition(100, 80_000, []))
    with_chunk = lin.step_time(BatchComposition(100, 80_000, [(1500, 0)]))  # 1,948 tokens of budget left
    assert cold.prefill_s == pytest.approx(with_chunk)
    assert cold.load_s == pytest.approx(100 * (with_chunk - alone))
    resume = lin.step_time(BatchComposition(101, 80_000 + 1500, []))  # the resumed token is a decode
    assert mig.load_s == pytest.approx(100 * (resume - alone))
    # On its own time the recompute is sooner; counting the stall on the others, migration wins.
    assert cold.total_s < mig.total_s and mig.score_s < cold.score_s
    alone_plan = decide_job(j, ctx, [busy])
    weighed = decide_job(j, ctx, [busy], weigh_load=True)
    assert alone_plan.strategy is Strategy.COLD_RESTART and weighed.strategy is Strategy.MIGRATE_STATE
    assert weighed.cold_restart_load_ms == pytest.approx(1000 * cold.load_s, abs=1e-5)
    assert "stalling the survivor's decodes" in weighed.reason
    # An idle survivor has no decodes to stall: both ways choose the same.
    idle = linear_target("idle", max_num_batched_tokens=2048)
    assert decide_job(j, ctx, [idle]).strategy == decide_job(j, ctx, [idle], weigh_load=True).strategy
