"""Survivor capacity: free blocks and slots, placement, waiting jobs and their wait."""

from __future__ import annotations

from recovery_helpers import job, linear_target, record

from servesim.cluster.recovery import (
    CapacityStatus,
    JobSpec,
    RecoveryContext,
    Release,
    decide_job,
    place,
    plan_recovery,
)
from servesim.perf import load_catalog

CTX = RecoveryContext(load_catalog().model("llama-3.1-8b"), bandwidth_gbps=10)


def test_jobs_go_to_the_least_loaded_survivor_deterministically() -> None:
    busy = linear_target("busy", queued_prefill_tokens=20_000)
    idle = linear_target("idle")
    j = JobSpec(job_id="j", prompt_tokens=1000, generated_tokens=10, kv_cache_checkpointed=False)
    assert decide_job(j, CTX, [busy, idle]).target == "idle"
    twins = [linear_target("a"), linear_target("b")]
    assert decide_job(j, CTX, twins).target == "a"  # ties: the earlier survivor
    plan = plan_recovery(record([job(f"j{i}", 1000, 10, False) for i in range(4)]), CTX, twins)
    assert [d.target for d in plan.scheduled_migrations] == ["a", "b", "a", "b"]
    assert plan.targets[0].jobs == ["j0", "j2"] and plan.targets[0].running_decodes == 2


def test_place_takes_blocks_and_slot_and_queues_the_recompute() -> None:
    t = linear_target("t", free_blocks=500, free_slots=3)
    j = JobSpec(job_id="j", prompt_tokens=1000, generated_tokens=10, kv_cache_checkpointed=False)
    d = decide_job(j, CTX, [t])
    after = place(t, j, d)
    assert d.blocks_needed == 64  # ceil(1010 / 16)
    assert (after.free_blocks, after.free_slots, after.running_decodes) == (436, 2, 1)
    assert after.decode_ctx_sum == 1010 and after.queued_prefill_tokens == 1010
    assert (t.free_blocks, t.free_slots) == (500, 3)  # decide/place are pure


def test_insufficient_capacity_lists_waiting_jobs_with_their_wait() -> None:
    # Room for one 64-block job now; another 100 blocks free up at 2 s; a third job never fits.
    t = linear_target("t", free_blocks=70, free_slots=1, releases=(Release(2.0, 100, 1),))
    jobs = [job("first", 1000, 10, False), job("second", 1000, 10, False), job("third", 1000, 10, False)]
    plan = plan_recovery(record(jobs), CTX, [t])
    d = {x.job_id: x for x in plan.scheduled_migrations}
    assert plan.capacity_status is CapacityStatus.INSUFFICIENT
    assert [w.job_id for w in plan.waiting_jobs] == ["second", "third"]
    assert d["first"].capacity_wait_ms == 0 and not d["first"].waits_for_capacity
    assert d["second"].capacity_wait_ms == 2000.0
    assert d["second"].est_recovery_ms is not None and d["second"].est_recovery_ms > 2000.0
    assert d["second"].est_recovery_ms == round(2000.0 + d["second"].cold_restart_ms, 6)
    assert d["third"].est_recovery_ms is None and d["third"].capacity_wait_ms is None
    assert "no known release" in d["third"].reason
    waits = {w.job_id: w.wait_ms for w in plan.waiting_jobs}
    assert waits == {"second": 2000.0, "third": None}
    # All three still get exactly one strategy and count in the totals.
    assert plan.total_recompute_tokens == 3 * 1010


def test_slots_limit_too() -> None:
    t = linear_target("t", free_blocks=100_000, free_slots=2)
    plan = plan_recovery(record([job(f"j{i}", 100, 1, False) for i in range(3)]), CTX, [t])
    assert plan.capacity_status is CapacityStatus.INSUFFICIENT
    assert [w.job_id for w in plan.waiting_jobs] == ["j2"]


def test_sufficient_when_everything_fits() -> None:
    plan = plan_recovery(record([job(f"j{i}", 100, 1) for i in range(5)]), CTX, [linear_target("t")])
    assert plan.capacity_status is CapacityStatus.SUFFICIENT and plan.waiting_jobs == []


def test_default_survivors_have_the_memory_models_capacity() -> None:
    from servesim.cluster.recovery import ContextSpec, usable_blocks
    from servesim.perf import kv_capacity

    spec = ContextSpec()
    assert usable_blocks(spec) == kv_capacity("llama-3.1-8b", "h100", 1).usable_blocks  # the default
    plan = plan_recovery(record([job("a", 10, 1)]))
    assert [t.name for t in plan.targets] == ["survivor-1", "survivor-2", "survivor-3"]
    assert plan.targets[0].free_blocks_before == usable_blocks(spec)
    assert plan.targets[0].free_slots_before == 128
    # A job larger than a whole survivor's cache waits, with no known end.
    huge = usable_blocks(spec) * 16 + 1
    big = plan_recovery(record([job("big", huge, 0, False)]), context={"survivors": 1})
    assert big.capacity_status is CapacityStatus.INSUFFICIENT
    assert big.scheduled_migrations[0].est_recovery_ms is None
