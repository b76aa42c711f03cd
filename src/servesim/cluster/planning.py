"""The recovery planner as a cluster policy: each interrupted request is decided from the
survivors' real state at the failure time (``servesim.cluster.recovery.decide_job``)."""

from __future__ import annotations

from collections.abc import Sequence

from servesim.cluster.recovery import JobSpec, RecoveryContext, TargetState, decide_job
from servesim.cluster.router import Router
from servesim.cluster.simulate import Decision, Interrupted
from servesim.engine.replica import ReplicaView
from servesim.engine.request import Request


def target_state(replica: ReplicaView, name: str, job: Request, link_wait_s: float = 0.0) -> TargetState:
    """A survivor as the planner sees it: free blocks and slots, its decode batch, the prefill
    work queued ahead of a new arrival, and how much of ``job``'s prefix its cache holds."""
    decodes = ctx = queued = 0
    running = replica.running()
    for r in running:
        computed = replica.computed_tokens(r)
        if r.sync_step >= 0 or computed == r.prompt_len + r.num_output - 1:
            decodes += 1
            ctx += computed + 1
        else:
            queued += r.prompt_len + r.num_output - computed
    for r in replica.waiting():
        queued += r.prompt_len + r.num_output
    bs = replica.block_size
    config = replica.config
    return TargetState(
        name=name,
        step_time=replica.step_time,
        free_blocks=replica.kv_blocks_free,
        free_slots=max(0, config.max_num_seqs - len(running)),
        block_size=bs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        running_decodes=decodes,
        decode_ctx_sum=ctx,
        queued_prefill_tokens=queued,
        cached_prefix_tokens={job.req_id: replica.cached_prefix_blocks(job) * bs},
        link_wait_s=link_wait_s,
    )


def planner_policy(
    job: Interrupted,
    replicas: Sequence[ReplicaView],
    eligible: Sequence[int],
    ctx: RecoveryContext,
    router: Router,
) -> Decision:
    """MIGRATE_STATE or COLD_RESTART, and where: whichever costs least in the request's own time
    plus the delay it adds to the survivor's running decodes (``costs`` module), with transfers
    queued on the target's inbound link."""
    r = job.request
    ckpt = job.checkpointed_tokens
    spec = JobSpec(
        job_id=r.req_id,
        prompt_tokens=r.prompt_len,
        generated_tokens=r.num_output,
        kv_cache_checkpointed=ckpt > 0,
        checkpoint_offset_tokens=ckpt if ckpt > 0 else None,
    )
    waits = job.link_wait_s or (0.0,) * len(replicas)
    targets = [target_state(replicas[k], str(k), r, waits[k]) for k in eligible]
    d = decide_job(spec, ctx, targets, weigh_load=True)
    target = int(d.target) if d.target is not None else eligible[0]
    if d.strategy == "MIGRATE_STATE" and d.moved_tokens > 0:
        covered = d.prefix_hit_tokens + d.moved_tokens
        return Decision(
            "MIGRATE_STATE", target, ctx.setup_latency_s + ctx.transfer_s(d.moved_tokens), covered
        )
    return Decision("COLD_RESTART", target, 0.0, 0)
