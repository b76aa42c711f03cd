"""The recovery planner: one decision per interrupted job, and the plan for a failure event.

For the cluster simulation the entry point is ``decide_job(job, context, targets)`` (pure: it
reads the survivors' state and returns a ``JobDecision``) with ``place(target, job, decision)``
to update a survivor's state afterwards. ``plan_recovery`` does exactly that for every valid job
of an event, in input order, and adds capacity status, waiting jobs and totals.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servesim.cluster.recovery.costs import (
    RecoveryContext,
    Release,
    StrategyCost,
    TargetState,
    break_even_gbps,
    cold_restart_cost,
    migrate_cost,
)
from servesim.cluster.recovery.models import (
    CapacityStatus,
    ContextSpec,
    ContextSummary,
    JobDecision,
    JobSpec,
    RecoveryInput,
    RecoveryPlan,
    Strategy,
    TargetSpec,
    TargetSummary,
    WaitingJob,
    parse_events,
    parse_input,
)
from servesim.engine.simulate import describe_model
from servesim.engine.step_time import StepTimeModel
from servesim.errors import InputError
from servesim.perf import Catalog, build_step_time_model, kv_capacity, load_catalog
from servesim.perf.catalog import resolve_gpu, resolve_model


def _ms(seconds: float) -> float:
    return round(1000.0 * seconds, 6)


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"


def _gbps(x: float) -> str:
    return f"{x:.3g} Gbps"


def _bytes(n: int) -> str:
    return f"{n / 1e6:.3g} MB" if n < 1e9 else f"{n / 1e9:.3g} GB"


# ------------------------------------------------------------------------------ context and targets
def build_context(
    spec: ContextSpec, bandwidth_gbps: float, catalog: Catalog | None = None
) -> RecoveryContext:
    """The ``RecoveryContext`` of a record's context (model resolved from the catalog)."""
    model = resolve_model(spec.model, catalog or load_catalog())
    return RecoveryContext(
        model=model,
        tp=spec.tp,
        kv_dtype=spec.kv_dtype,
        bandwidth_gbps=bandwidth_gbps,
        transfer_efficiency=spec.transfer_efficiency,
        setup_latency_s=spec.setup_latency_ms / 1000.0,
        nic_per_rank=spec.nic_per_rank,
        block_size=spec.block_size,
    )


def build_step_time(spec: ContextSpec, catalog: Catalog | None = None) -> tuple[StepTimeModel, list[str]]:
    """The survivors' roofline step-time model and the extrapolation warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_step_time_model(
            spec.model,
            spec.gpu,
            spec.tp,
            spec.profile,
            catalog=catalog or load_catalog(),
            kv_dtype=spec.kv_dtype,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
        )
    return model, [str(w.message) for w in caught]


def usable_blocks(spec: ContextSpec, catalog: Catalog | None = None) -> int:
    """KV blocks an idle survivor has free: the memory model's usable blocks (null block excluded)."""
    cat = catalog or load_catalog()
    cap = kv_capacity(
        resolve_model(spec.model, cat),
        resolve_gpu(spec.gpu, cat),
        spec.tp,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        block_size=spec.block_size,
        kv_dtype=spec.kv_dtype,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_num_seqs=spec.max_num_seqs,
    )
    return cap.usable_blocks


def target_from_spec(t: TargetSpec, spec: ContextSpec, step_time: StepTimeModel, blocks: int) -> TargetState:
    """A survivor from JSON; missing free blocks/slots come from the memory model and max_num_seqs
    minus what its running decodes hold."""
    b = spec.block_size
    ctx_sum = t.ctx_sum
    held = -(-ctx_sum // b) + t.running_decodes if t.running_decodes else 0
    free_blocks = t.free_blocks if t.free_blocks is not None else max(0, blocks - held)
    free_slots = t.free_slots if t.free_slots is not None else max(0, spec.max_num_seqs - t.running_decodes)
    return TargetState(
        name=t.name,
        step_time=step_time,
        free_blocks=free_blocks,
        free_slots=free_slots,
        block_size=b,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        running_decodes=t.running_decodes,
        decode_ctx_sum=ctx_sum,
        queued_prefill_tokens=t.queued_prefill_tokens,
        cached_prefix_tokens=dict(t.cached_prefix_tokens),
        releases=tuple(Release(r.after_ms / 1000.0, r.blocks, r.slots) for r in t.releases),
    )


def default_targets(spec: ContextSpec, step_time: StepTimeModel, blocks: int) -> list[TargetState]:
    """``spec.survivors`` idle survivors ``survivor-1..n``: all blocks and slots free, nothing queued."""
    return [
        target_from_spec(TargetSpec(name=f"survivor-{i + 1}"), spec, step_time, blocks)
        for i in range(spec.survivors)
    ]


# ------------------------------------------------------------------------------ one job
def _reason(
    job: JobSpec,
    context: RecoveryContext,
    chosen: StrategyCost,
    cold: StrategyCost,
    mig: StrategyCost | None,
    be: float | None,
    covered: int,
    weigh_load: bool = False,
) -> str:
    n = job.num_tokens
    bw = _gbps(context.bandwidth_gbps) + (" per rank" if context.nic_per_rank and context.tp > 1 else "")
    be_text = f"break-even {_gbps(be)}" if be is not None else "migration never wins here"
    hit = f" ({cold.prefix_hit_tokens} prefix-cached)" if cold.prefix_hit_tokens else ""
    if mig is None:
        return f"no KV checkpoint: recompute {cold.recompute_tokens} of {n} tokens{hit} {_s(cold.total_s)}"
    stale = (
        f"; checkpoint covers {covered} of {n} tokens, {mig.recompute_tokens} recomputed"
        if covered < n
        else ""
    )
    if mig.moved_tokens == 0:
        return (
            f"checkpoint adds nothing to the target's prefix cache ({covered} tokens covered, "
            f"{cold.prefix_hit_tokens} cached): recompute {cold.recompute_tokens} tokens {_s(cold.total_s)}"
        )
    moved = _bytes(context.bytes_total(mig.moved_tokens))
    link = f"link wait {_s(mig.link_wait_s)} + " if mig.link_wait_s > 0 else ""
    mig_terms = (
        f"{link}setup {_s(mig.setup_s)} + transfer {_s(mig.transfer_s)} ({moved} at {bw}) + "
        f"{mig.forward_tokens}-token resume {_s(mig.prefill_s)}"
    )
    loaded = weigh_load and (cold.load_s > 0 or mig.load_s > 0)
    c_load = f" + {_s(cold.load_s)} stalling the survivor's decodes" if loaded else ""
    m_load = f" + {_s(mig.load_s)} stalling its decodes" if loaded else ""
    if chosen.strategy is Strategy.MIGRATE_STATE:
        return (
            f"migrate {_s(mig.total_s)} ({mig_terms}){m_load} < recompute {cold.recompute_tokens} "
            f"tokens{hit} {_s(cold.total_s)}{c_load}; {be_text}{stale}"
        )
    return (
        f"recompute {cold.recompute_tokens} tokens{hit} {_s(cold.total_s)}{c_load} <= migrate "
        f"{_s(mig.total_s)} ({mig_terms}){m_load}; {be_text}{stale}"
    )


def _choose(cold: StrategyCost, mig: StrategyCost | None, weigh_load: bool = False) -> StrategyCost:
    """The option that gets the job back sooner; with ``weigh_load``, the lower own time + load
    on the survivor's decodes (``StrategyCost.score_s``)."""
    if mig is None or mig.moved_tokens == 0:
        return cold
    if weigh_load:
        return mig if mig.score_s < cold.score_s else cold
    return mig if mig.total_s < cold.total_s else cold


def decide_job(
    job: JobSpec, context: RecoveryContext, targets: Sequence[TargetState], *, weigh_load: bool = False
) -> JobDecision:
    """Strategy and survivor for one interrupted job, from the survivors' current state.

    For every survivor both strategies are costed; the job goes where it is back soonest (a free
    slot and its blocks now, else the earliest release that frees them: ``capacity_wait``), ties
    to the earlier survivor in ``targets``. If no survivor can ever fit it, it is costed on the one
    closest to fitting and ``est_recovery_ms`` is None. Pure: ``targets`` are not changed.

    ``weigh_load`` (what the cluster simulation's planner uses) adds to each option the delay it
    puts on the survivor's running decodes (``StrategyCost.load_s``), both for the strategy and for
    the survivor; without it (the stand-alone plan) each job is simply back as soon as it can be.
    """
    if not targets:
        raise InputError("no survivor to recover onto: targets is empty")
    n = job.num_tokens
    covered = job.checkpoint_covered_tokens(context.block_size)
    best: tuple[float, int] | None = None
    pick = 0
    costed: list[tuple[float | None, StrategyCost, StrategyCost, StrategyCost | None, int]] = []
    for i, t in enumerate(targets):
        need = t.blocks_needed(job)
        wait = t.capacity_wait_s(need)
        cold = cold_restart_cost(job, t)
        mig = migrate_cost(job, context, t)
        chosen = _choose(cold, mig, weigh_load)
        costed.append((wait, chosen, cold, mig, need))
        if wait is not None:
            key = (wait + (chosen.score_s if weigh_load else chosen.total_s), i)
            if best is None or key < best:
                best, pick = key, i
    if best is None:  # nowhere, ever: report it against the survivor closest to fitting
        pick = max(
            range(len(targets)),
            key=lambda i: (targets[i].free_blocks + sum(r.blocks for r in targets[i].releases), -i),
        )
    wait, chosen, cold, mig, need = costed[pick]
    target = targets[pick]
    be = break_even_gbps(context, cold, mig, weigh_load=weigh_load)
    reason = _reason(job, context, chosen, cold, mig, be, covered, weigh_load)
    if wait is None:
        reason = (
            f"waits for capacity: needs {need} blocks and a slot, no survivor has them and no known "
            f"release frees them (closest: {target.name}); " + reason
        )
    elif wait > 0:
        reason = f"waits {_s(wait)} for capacity on {target.name}; " + reason
    return JobDecision(
        job_id=job.job_id,
        strategy=chosen.strategy,
        target=target.name,
        recompute_required=chosen.recompute_tokens > 0,
        recompute_tokens=chosen.recompute_tokens,
        reused_tokens=chosen.reused_tokens,
        moved_tokens=chosen.moved_tokens,
        prefix_hit_tokens=chosen.prefix_hit_tokens,
        bytes_to_move=context.bytes_total(chosen.moved_tokens),
        bytes_per_rank=context.bytes_per_rank(chosen.moved_tokens),
        num_tokens=n,
        checkpoint_covered_tokens=covered,
        stale_checkpoint=job.kv_cache_checkpointed and covered < n,
        blocks_needed=need,
        est_recovery_ms=None if wait is None else _ms(wait + chosen.total_s),
        cold_restart_ms=_ms(cold.total_s),
        migrate_ms=None if mig is None else _ms(mig.total_s),
        capacity_wait_ms=None if wait is None else _ms(wait),
        queue_wait_ms=_ms(chosen.queue_wait_s),
        setup_ms=_ms(chosen.setup_s),
        transfer_ms=_ms(chosen.transfer_s),
        prefill_ms=_ms(chosen.prefill_s),
        link_wait_ms=_ms(chosen.link_wait_s),
        cold_restart_load_ms=_ms(cold.load_s),
        migrate_load_ms=None if mig is None else _ms(mig.load_s),
        break_even_gbps=None if be is None else round(be, 6),
        waits_for_capacity=wait is None or wait > 0,
        reason=reason,
    )


def place(target: TargetState, job: JobSpec, decision: JobDecision) -> TargetState:
    """The survivor after taking ``job``: its blocks and slot are taken (possibly going negative
    for a job that waits for releases), the tokens it computes join the queue ahead of later
    arrivals, and it becomes one of the running decodes."""
    link = target.link_wait_s
    if decision.strategy is Strategy.MIGRATE_STATE and decision.moved_tokens > 0:
        link += (decision.setup_ms + decision.transfer_ms) / 1000.0
    return dataclasses.replace(
        target,
        link_wait_s=link,
        free_blocks=target.free_blocks - decision.blocks_needed,
        free_slots=target.free_slots - 1,
        running_decodes=target.running_decodes + 1,
        decode_ctx_sum=target.decode_ctx_sum + job.num_tokens,
        queued_prefill_tokens=target.queued_prefill_tokens + decision.recompute_tokens,
    )


# ------------------------------------------------------------------------------ one event
def _assumptions(
    context: RecoveryContext, default_cluster: bool, survivors: int, notes: list[str]
) -> list[str]:
    link = (
        f"each of the {context.tp} TP ranks moves its KV shard over its own link of the given bandwidth"
        if context.nic_per_rank
        else f"all {context.tp} TP ranks share one link of the given bandwidth"
    )
    out = [
        "nothing was executed or sent: this is a plan for human review",
        f"KV transfer: {link}, at {context.transfer_efficiency:g} efficiency, plus "
        f"{context.setup_latency_s * 1000:g} ms setup per job",
        "a snapshot without an offset holds the job's whole sequence (prompt + generated)",
        "the last token of a migrated job is run once more for its logits (vLLM); it is timed, not counted "
        "as recomputed",
        "jobs are placed in input order, each where it is back soonest; placed jobs become decodes and their "
        "recomputed tokens queue ahead of later jobs on the same survivor",
    ]
    if default_cluster:
        out.append(
            f"{survivors} idle survivors of the same model/GPU/TP (no --cluster given): no prefix-cache hits"
        )
    out += [f"step-time model: {n}" for n in notes]
    return out


def _survivors(
    inp: RecoveryInput, cat: Catalog, targets: Sequence[TargetState] | None
) -> tuple[list[TargetState], list[str], bool]:
    """The survivors to plan onto (the given ``targets``, else the record's ``cluster``, else idle
    ones), the step-time model's notes, and whether they are the assumed idle ones."""
    spec = inp.context
    if targets is not None:
        states = list(targets)
        if not states:
            raise InputError("no survivor to recover onto: targets is empty")
        return states, [], False
    step_time, notes = build_step_time(spec, cat)
    blocks = usable_blocks(spec, cat)
    if inp.cluster:
        return [target_from_spec(t, spec, step_time, blocks) for t in inp.cluster], notes, False
    return default_targets(spec, step_time, blocks), notes, True


def _decide_all(
    inp: RecoveryInput,
    ctx: RecoveryContext,
    states: list[TargetState],
    on_decision: Callable[[JobDecision], None] | None,
) -> list[JobDecision]:
    """Every valid job in input order, each placed on its survivor (``states`` is updated)."""
    index = {t.name: i for i, t in enumerate(states)}
    if len(index) != len(states):
        raise InputError("survivor names must be unique")
    decisions: list[JobDecision] = []
    for job in inp.active_jobs:
        d = decide_job(job, ctx, states)
        if d.est_recovery_ms is not None and d.target is not None:
            i = index[d.target]
            states[i] = place(states[i], job, d)
        decisions.append(d)
        if on_decision is not None:
            on_decision(d)
    return decisions


def _target_summaries(
    before: Sequence[TargetState], after: Sequence[TargetState], decisions: Sequence[JobDecision]
) -> list[TargetSummary]:
    assigned: dict[str, list[str]] = {t.name: [] for t in after}
    for d in decisions:
        if d.target is not None:
            assigned[d.target].append(d.job_id)
    return [
        TargetSummary(
            name=a.name,
            free_blocks_before=b.free_blocks,
            free_slots_before=b.free_slots,
            free_blocks_after=a.free_blocks,
            free_slots_after=a.free_slots,
            running_decodes=a.running_decodes,
            queued_prefill_tokens=a.queued_prefill_tokens,
            jobs=assigned[a.name],
        )
        for b, a in zip(before, after, strict=True)
    ]


def _context_summary(ctx: RecoveryContext, gpu: str, first: TargetState) -> ContextSummary:
    return ContextSummary(
        model=ctx.model.name,
        gpu=gpu,
        tp=ctx.tp,
        kv_dtype=ctx.kv_dtype,
        kv_bytes_per_token_per_rank=ctx.kv_bytes_per_token_per_rank,
        network_bandwidth_gbps=ctx.bandwidth_gbps,
        transfer_efficiency=ctx.transfer_efficiency,
        setup_latency_ms=round(ctx.setup_latency_s * 1000.0, 9),
        nic_per_rank=ctx.nic_per_rank,
        block_size=ctx.block_size,
        max_num_batched_tokens=first.max_num_batched_tokens,
        step_time_model=describe_model(first.step_time),
    )


def plan_recovery(
    data: RecoveryInput | Mapping[str, Any],
    context: RecoveryContext | Mapping[str, Any] | None = None,
    targets: Sequence[TargetState] | None = None,
    *,
    catalog: Catalog | None = None,
    on_decision: Callable[[JobDecision], None] | None = None,
    **overrides: Any,
) -> RecoveryPlan:
    """Plan the recovery of every valid job of one failure record.

    ``data``: a ``RecoveryInput`` or the seeds' record (parsed leniently: bad jobs are listed in
    ``invalid_jobs``). ``context``: a ``RecoveryContext``, or a mapping of ``ContextSpec`` fields
    merged over the record's ``context`` (default: docs, "Default context"); the record's
    ``network_bandwidth_gbps`` always applies. ``targets``: the survivors;
    default from the record's ``cluster``, else ``context.survivors`` idle survivors.
    ``overrides`` replace record fields. ``on_decision`` is called after each job (progress).
    """
    if isinstance(context, Mapping):
        overrides["context"] = dict(context)
        context = None
    inp = data if isinstance(data, RecoveryInput) and not overrides else parse_input(data, **overrides)
    cat = catalog or load_catalog()
    ctx = (context or build_context(inp.context, inp.network_bandwidth_gbps, cat)).with_bandwidth(
        inp.network_bandwidth_gbps
    )
    states, notes, default_cluster = _survivors(inp, cat, targets)
    before = list(states)
    decisions = _decide_all(inp, ctx, states, on_decision)
    waiting = [
        WaitingJob(
            job_id=d.job_id,
            target=d.target,
            blocks_needed=d.blocks_needed,
            wait_ms=d.capacity_wait_ms,
            reason=d.reason.split("; ")[0],
        )
        for d in decisions
        if d.waits_for_capacity
    ]
    return RecoveryPlan(
        interrupted_node=inp.interrupted_node,
        preemption_timestamp=inp.preemption_timestamp,
        batch_id=inp.batch_id,
        total_recompute_tokens=sum(d.recompute_tokens for d in decisions),
        total_bytes_to_move=sum(d.bytes_to_move for d in decisions),
        num_migrations=sum(d.strategy is Strategy.MIGRATE_STATE for d in decisions),
        num_cold_restarts=sum(d.strategy is Strategy.COLD_RESTART for d in decisions),
        scheduled_migrations=decisions,
        invalid_jobs=list(inp.invalid_jobs),
        capacity_status=CapacityStatus.INSUFFICIENT if waiting else CapacityStatus.SUFFICIENT,
        waiting_jobs=waiting,
        break_even_gbps={d.job_id: d.break_even_gbps for d in decisions},
        targets=_target_summaries(before, states, decisions),
        context=_context_summary(ctx, inp.context.gpu if targets is None else "(given targets)", states[0]),
        assumptions=_assumptions(ctx, default_cluster, len(states), notes),
    )


def plan_events(data: Any, *, catalog: Catalog | None = None, **overrides: Any) -> list[RecoveryPlan]:
    """Plan every record of a failure log (one record or a list), in order."""
    cat = catalog or load_catalog()
    return [plan_recovery(inp, catalog=cat) for inp in parse_events(data, **overrides)]
