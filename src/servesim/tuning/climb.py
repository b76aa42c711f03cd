"""A batch of trials evaluated: every valid trial's runs spread over the executor
(``evaluate_batch``), or first through the search rungs (``evaluate_rungs``, ``tuning.rungs``).

Why a module of its own: ``search`` keeps the study (ask, tell, storage); this is what one batch
costs, and the rungs are where that cost is cut. Each rung sends all the batch's jobs in one
``map`` (the prefix runs and the capacity probes together), so a batch pays one round trip to the
workers per rung, not one per trial.
"""

from __future__ import annotations

from typing import Any

from servesim.errors import InternalError
from servesim.tuning.choice import model_tolerance
from servesim.tuning.executors import Executor
from servesim.tuning.jobs import (
    EvalContext,
    PrefixCounts,
    PrefixJob,
    TrialJob,
    TrialOutcome,
    TrialRuns,
    constraint_names,
    finish_trial,
    plan_trial,
)
from servesim.tuning.rungs import (
    FULL,
    RUNG_NAMES,
    capacity_bar,
    capacity_stop,
    gpu_bound_stop,
    prefix_size,
    prefix_stop,
)


def evaluate_batch(
    ex: Executor, ctx: EvalContext, trials: list[TrialJob], probes: dict[int, float] | None = None
) -> list[TrialOutcome]:
    """The trials' outcomes, in order. Each valid trial's runs (its seeds and its probe) go to the
    executor as separate jobs, all the batch's in one ``map``: the workers share them out, instead
    of each taking a whole trial and the batch waiting for the slowest. The outcomes are those
    ``evaluate_trial`` gives (``finish_trial`` of the same runs; jobs are deterministic).
    ``probes``: capacities already measured (by trial index: the capacity rung), not run again."""
    have = probes or {}
    plans = [plan_trial(ctx, t) for t in trials]
    runs = [
        j
        for i, p in enumerate(plans)
        if isinstance(p, TrialRuns)
        for j in (p.jobs[:-1] if i in have else p.jobs)
    ]
    results = iter(ex.map(runs) if runs else [])
    out: list[TrialOutcome] = []
    for i, (t, p) in enumerate(zip(trials, plans, strict=True)):
        if isinstance(p, TrialOutcome):
            out.append(p)
        elif i in have:
            out.append(finish_trial(ctx, t, p, [next(results) for _ in p.jobs[:-1]] + [have[i]]))
        else:
            out.append(finish_trial(ctx, t, p, [next(results) for _ in p.jobs]))
    return out


def _runs(plan: TrialOutcome | TrialRuns) -> TrialRuns:
    if not isinstance(plan, TrialRuns):
        raise InternalError("invariant broken: a climbing trial without runs")
    return plan


def _shed_limit(ctx: EvalContext, plan: TrialRuns) -> float | None:
    """The share of the trace a prefix request over a cap may be shed or refused as instead."""
    d = plan.deployment
    shed = ctx.settings.max_shed_fraction if d.queue_timeout_s is not None else None
    if d.max_num_queued_reqs is not None or d.max_num_queued_tokens is not None:
        # a prefix request over a cap may get a 503 in the full run instead (within budget)
        shed = (shed or 0.0) + ctx.settings.max_rejection_rate
    return shed


def evaluate_rungs(
    ex: Executor,
    ctx: EvalContext,
    trials: list[TrialJob],
    *,
    bar: float | None,
    exempt: set[int],
    fraction: float,
    prefix: bool = True,
    told: list[TrialOutcome] | None = None,
) -> list[TrialOutcome]:
    """``evaluate_batch`` through the search rungs (``tuning.rungs``): the GPU bound against
    ``bar`` (the best feasible ``goodput_rank`` told so far); then, in one ``map``, the prefix
    runs (without ``prefix``: ``rungs.prefix_pays`` said it does not pay) and the capacity probes
    of the trials a feasible trial in ``told`` could beat on capacity; then the seeds of the
    trials nothing stopped. ``exempt`` trials (the baseline) run in full at once."""
    n_full = ctx.workload.num_requests
    n_pre = prefix_size(n_full, fraction)
    plans = [plan_trial(ctx, t) for t in trials]
    out: dict[int, TrialOutcome] = {}
    climbing: list[int] = []
    for i, (t, p) in enumerate(zip(trials, plans, strict=True)):
        if isinstance(p, TrialOutcome):
            out[i] = p
        elif t.number in exempt:
            continue
        elif (why := gpu_bound_stop(p.deployment.gpus, bar)) is not None:
            out[i] = _stopped(ctx, t, p, 0, why, 0)
        else:
            climbing.append(i)
    bars = {i: capacity_bar(told, _runs(plans[i]).deployment.gpus) if told else None for i in climbing}
    pre = [i for i in climbing if prefix]
    probed = [i for i in climbing if bars[i] is not None]
    jobs: list[Any] = [
        PrefixJob(_runs(plans[i]).deployment, trials[i].spec.target_rate, trials[i].spec.seeds[0], n_pre)
        for i in pre
    ] + [_runs(plans[i]).jobs[-1] for i in probed]
    results = ex.map(jobs) if jobs else []
    counts: dict[int, PrefixCounts] = dict(zip(pre, results[: len(pre)], strict=True))
    caps: dict[int, float] = {i: float(c) for i, c in zip(probed, results[len(pre) :], strict=True)}
    ratio = model_tolerance().objective_ratio
    for i in climbing:
        p = _runs(plans[i])
        done = (counts[i].n if i in counts else 0) + (n_full if i in caps else 0)
        if i in counts and (why := prefix_stop(counts[i], n_full, ctx.slo, _shed_limit(ctx, p))) is not None:
            out[i] = _stopped(ctx, trials[i], p, 1, why, done)
        elif i in caps and (why := capacity_stop(caps[i] / p.deployment.gpus, bars[i], ratio)) is not None:
            o = _stopped(ctx, trials[i], p, 2, why, done)
            gpus = p.deployment.gpus
            out[i] = o.model_copy(update={"capacity_rps": caps[i], "capacity_per_gpu": caps[i] / gpus})
    full = [i for i in range(len(trials)) if i not in out]
    have = {k: caps[i] for k, i in enumerate(full) if i in caps}
    fulls = evaluate_batch(ex, ctx, [trials[i] for i in full], have)
    for i, o in zip(full, fulls, strict=True):
        if i in climbing:
            extra = counts[i].n if i in counts else 0
            o = o.model_copy(update={"rung": FULL, "simulated_requests": o.simulated_requests + extra})
        out[i] = o
    return [out[i] for i in range(len(trials))]


def _stopped(
    ctx: EvalContext, job: TrialJob, plan: TrialRuns, rung: int, why: str, work: int
) -> TrialOutcome:
    """The outcome of a trial stopped at ``rung``: PRUNED, with its rung and reason."""
    return TrialOutcome(
        number=job.number,
        params=job.params,
        valid=False,
        rule=f"rung_{rung}",
        reason=f"stopped at rung {rung} ({RUNG_NAMES[rung]}): {why}",
        constraints=[1.0] * len(constraint_names(ctx.slo)),
        gpus=plan.deployment.gpus,
        rung=rung,
        simulated_requests=work,
    )


__all__ = ["evaluate_batch", "evaluate_rungs"]
