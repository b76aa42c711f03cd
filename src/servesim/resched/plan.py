"""``reschedule()``: order interrupted requests for re-admission and project what happens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.engine.simulate import describe_model
from servesim.engine.step_time import ConstantStepTime, StepTimeModel
from servesim.resched.models import (
    InterruptedRequest,
    Policy,
    ProjectedRequest,
    RescheduleInput,
    RescheduleInputError,
    ReschedulePlan,
    parse_input,
)
from servesim.resched.policies import OrderKeys, order
from servesim.resched.projection import Job, project, solo_service_s
from servesim.resched.reuse import ReuseSplit, reuse_split


def _ms(seconds: float) -> float:
    """Seconds to milliseconds, rounded to the nanosecond: sums of many step times carry float
    noise (400 x 3 ms = 1200.0000000000002 ms) that must not decide a violation."""
    return round(1000.0 * seconds, 6)


def cached_tokens_assumed(inp: RescheduleInput, r: InterruptedRequest) -> int | None:
    """Leading tokens of ``r`` whose blocks are taken to be cached (None: all of them)."""
    if r.cached_tokens is not None:
        return r.cached_tokens
    return None if inp.cache_survives else 0


def split_of(inp: RescheduleInput, r: InterruptedRequest) -> ReuseSplit:
    """Reused and recomputed tokens of ``r`` on re-admission (they sum to ``tokens_processed``)."""
    return reuse_split(r.tokens_processed, inp.block_size, cached_tokens_assumed(inp, r))


def step_time_model_of(inp: RescheduleInput, step_time: StepTimeModel | None = None) -> StepTimeModel:
    """The model that times steps: ``step_time`` if given, else the input's constant, else the
    roofline model of the input's model x GPU x TP (servesim.perf, the shipped profile)."""
    if step_time is not None:
        return step_time
    if inp.step_time_ms is not None:
        return ConstantStepTime(step_time_s=inp.step_time_ms / 1000.0)
    from servesim.perf import PerfError, build_step_time_model

    try:
        return build_step_time_model(
            inp.model,
            inp.gpu,
            inp.tp,
            max_num_seqs=inp.batch_capacity,
            max_num_batched_tokens=inp.token_budget,
            warn=False,
        )
    except PerfError as exc:
        raise RescheduleInputError(f"model/gpu/tp: {exc}") from None


def reschedule(
    data: RescheduleInput | Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    policy: Policy | str | None = None,
    step_time: StepTimeModel | None = None,
    **overrides: Any,
) -> ReschedulePlan:
    """Order the interrupted requests of ``data`` for re-admission and project each one's completion.

    ``data``: a ``RescheduleInput`` or its JSON form (the seeds' shape), or a bare list of
    requests with ``batch_capacity=`` given. ``policy`` (default: the input's, ``sla-aware``) and
    ``overrides`` (any ``RescheduleInput`` field, e.g. ``block_size=32``; None means "not given",
    so disable aging with ``"aging_wait_ms": None`` in ``data``) win over ``data``.
    ``step_time``: any ``StepTimeModel`` (default: the input's ``step_time_ms`` as a constant,
    else the roofline model of its ``model`` x ``gpu`` x ``tp``, by default Llama-3.1-8B on one
    H100). Raises ``RescheduleInputError`` (a ``ValueError``) naming the request for bad input.
    """
    if policy is not None:
        overrides["policy"] = policy
    if isinstance(data, RescheduleInput) and not any(v is not None for v in overrides.values()):
        inp = data
    else:
        inp = parse_input(data, **overrides)
    model = step_time_model_of(inp, step_time)
    budget = inp.token_budget
    reqs = inp.interrupted_requests

    splits = [split_of(inp, r) for r in reqs]
    jobs = [Job(r.num_tokens, s.reused, r.tokens_remaining) for r, s in zip(reqs, splits, strict=True)]
    keys = [
        OrderKeys(
            round(r.sla_budget_ms - _ms(solo_service_s(j, budget, model)), 6), j.num_tokens - j.computed
        )
        for r, j in zip(reqs, jobs, strict=True)
    ]
    idx, aged = order(
        reqs, keys, inp.policy, aging_wait_ms=inp.aging_wait_ms, aging_preemptions=inp.aging_preemptions
    )
    proj = project([jobs[i] for i in idx], inp.batch_capacity, budget, model)

    out: list[ProjectedRequest] = []
    for pos, i in enumerate(idx):
        r, s = reqs[i], splits[i]
        done_ms = _ms(proj.completion_s[pos])
        slack = round(r.sla_budget_ms - done_ms, 6)
        out.append(
            ProjectedRequest(
                req_id=r.req_id,
                position=pos,
                tokens_processed=r.tokens_processed,
                tokens_remaining=r.tokens_remaining,
                reused_tokens=s.reused,
                recomputed_tokens=s.recomputed,
                admitted_ms=_ms(proj.admitted_s[pos]),
                completion_ms=done_ms,
                sla_budget_ms=r.sla_budget_ms,
                slack_ms=slack,
                violates=slack < 0,
                solo_slack_ms=keys[i].solo_slack_ms,
                aged=aged[i],
            )
        )
    num_violations = sum(p.violates for p in out)
    return ReschedulePlan(
        rescheduled_queue=[p.req_id for p in out],
        prefix_cache_savings_tokens=sum(s.reused for s in splits),
        recomputed_tokens=sum(s.recomputed for s in splits),
        sla_violation_projected=num_violations > 0,
        num_violations=num_violations,
        makespan_ms=max((p.completion_ms for p in out), default=0.0),
        requests=out,
        policy=inp.policy,
        batch_capacity=inp.batch_capacity,
        block_size=inp.block_size,
        cache_survives=inp.cache_survives,
        max_num_batched_tokens=budget,
        step_time_model=describe_model(model),
        assumptions=assumptions(inp),
    )


def assumptions(inp: RescheduleInput) -> list[str]:
    """What the stand-alone projection takes for granted, in words (part of every plan)."""
    b = inp.block_size
    overridden = [r.req_id for r in inp.interrupted_requests if r.cached_tokens is not None]
    if inp.cache_survives:
        cache = (
            "KV blocks survive: no block of an interrupted request has been evicted, so each recovers "
            f"its full computed blocks ({b}·floor(tokens_processed/{b}) tokens) and recomputes the rest"
        )
    else:
        cache = "KV blocks are evicted: every processed token is recomputed"
    if overridden:
        cache += f" (except where cached_tokens is given: {', '.join(overridden)})"
    out = [
        cache,
        "all batch_capacity slots are free now and every interrupted request is waiting now; no other "
        "traffic shares the batch",
        "KV memory suffices: nothing is preempted again during the projection",
        "a request without prompt_len (or with tokens_processed >= prompt_len) is decoding: its last "
        "sampled token is not yet computed",
    ]
    return out
