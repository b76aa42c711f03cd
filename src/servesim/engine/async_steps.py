"""vLLM's async scheduling (``AsyncScheduler`` driven by ``EngineCore.step_with_batch_queue``).

With ``async_scheduling`` vLLM keeps two steps in its batch queue: step k is scheduled while
step k-1 runs, and step k-1's output is applied only after that (vLLM 0.33,
``vllm/v1/engine/core.py``). The scheduler therefore decides step k without step k-1's tokens:

* ``after_schedule`` (vLLM's ``_update_after_schedule``): ``num_computed`` advances when a
  step is scheduled, and a request that samples in it gets an output placeholder
  (``AsyncScheduler``: ``num_output_placeholders += 1``), which counts as a known token when
  the next step sizes its share (``step_plan.running_tokens``).
* A request whose step in flight samples its last token (``max_tokens``) is skipped by the
  next step (``Scheduler._running_pass``), but it stays in the running list, holding its seat
  and its blocks, until the output is applied: a finish frees its blocks one step later than
  with the sync scheduler, and the finishing request can still be chosen as a preemption victim.
* ``update`` (vLLM's ``update_from_output``): each sampled token resolves a placeholder; the
  output of a request preempted since it was scheduled is stale (vLLM keeps its token and may
  finish the request from the waiting queue, but changes no counter); full blocks up to what
  was computed before the steps still in flight are cached.

With speculative decoding (eagle, eagle3, mtp: vLLM runs its ``AsyncScheduler`` with them) the
drafts never reach the scheduler: they stay on the worker, and ``AsyncScheduler`` gives every
request that samples in a step k draft placeholders for the next one
(``_spec_token_placeholders``) and ``1 + d`` output placeholders, d the drafts verified in the
step. The next step is therefore sized as if all d were accepted; when the output comes back the
``d - a`` rejected ones roll back ``num_computed`` and the placeholders (unless the output is
stale), and the ``1 + a`` tokens are appended (trimmed at a stop).

Pure Python on both cores: it runs on the compiled core's objects through their public
attributes (async scheduling runs the naive path only; the decode group assumes sync steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import (
    FINISHED,
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    PREEMPTED,
    REJECTED,
    RUNNING,
    Request,
)
from servesim.engine.step_plan import tokens_kept

if TYPE_CHECKING:
    from servesim.engine.scheduler import Scheduler
    from servesim.engine.step_plan import StepPlan


def after_schedule(plan: StepPlan, k: int = 0) -> None:
    """A step was scheduled (and its batch taken for timing): advance each request's computed
    tokens now and give every request that samples in the step a placeholder, and with
    speculation (``k`` drafts) one more per draft verified in it and ``k`` draft placeholders
    for the next step (the scheduler sizes the next step with them)."""
    samples: list[bool] = []
    drafts: list[int] = []
    for r, n in plan.scheduled:
        c = r.num_computed + n
        r.num_computed = c
        r.in_flight += n
        s = c >= r.prompt_len + r.num_output + r.placeholders
        r.prefill_chunk = not s  # vLLM's is_prefill_chunk
        d = r.spec_sched
        if s:
            r.placeholders += 1 + d
            if k:
                r.spec_tokens = k
        samples.append(s)
        drafts.append(-d if r.spec_padded else d)
        r.spec_sched = 0
        r.spec_padded = False
    plan.samples = samples
    if k:
        plan.drafts = drafts


def update(sched: Scheduler, plan: StepPlan, step: int, t_end: float) -> list[Request]:
    """Apply step ``step``'s output (ending at ``t_end``), the next step being scheduled already.
    Returns the requests that finished, in scheduling order (running and stale ones alike)."""
    mml = sched.max_model_len
    kv = sched.kv
    spec = sched.spec_k > 0
    finished: list[Request] = []
    gone: list[Request] = []  # finished by a stale token while preempted (in the waiting queue)
    accepted = _draws(sched, plan) if spec else None
    for j, ((r, n), s) in enumerate(zip(plan.scheduled, plan.samples or (), strict=True)):
        r.in_flight -= n
        status = r.status
        d = plan.drafts[j] if accepted is not None else 0  # type: ignore[index]  # set when speculating
        if status in (FINISHED, REJECTED) or not s:
            if s and d:  # finished meanwhile: its drafts were scheduled all the same
                plan.spec.append((r, d if d > 0 else -d, accepted[j]))  # type: ignore[index]
            continue  # aborted meanwhile, or a partial prefill chunk: nothing sampled
        stale = status == PREEMPTED
        a = _verified(sched, r, plan, d, accepted[j], stale) if d else 0  # type: ignore[index]
        had_placeholder = r.placeholders > 0
        kept = tokens_kept(r, a, mml)
        o = r.num_output + kept
        stop = o >= r.max_tokens or r.prompt_len + o >= mml
        if not stale:  # num_computed covers every token but the last kept one
            r.num_computed -= a + 1 - kept
        r.num_output = o
        _emitted(r, step, t_end)
        if not stale and had_placeholder:  # every returned token, the trimmed ones too
            r.placeholders -= a + 1
        if not stale and status == RUNNING and (had_placeholder or spec) and kv.caching:
            kv.cache_blocks(r, r.num_computed - r.in_flight)
        if stop:
            finished.append(r)
            if stale:
                gone.append(r)
    for r in gone:  # vLLM's stopped_preempted_reqs: out of the waiting queue, blocks already freed
        r.status = REJECTED  # (the priority queue drops a REJECTED entry lazily)
        sched.waiting.remove(r)
        r.outcome = OUTCOME_FINISHED if r.num_output >= r.max_tokens else OUTCOME_LENGTH_CAPPED
        r.finish_time = t_end
    if finished:
        sched.retire([r for r in finished if r.status == RUNNING], t_end)
    return finished


def _draws(sched: Scheduler, plan: StepPlan) -> list[int]:
    """The acceptance model's answers for the step's verifications (drafts that are not
    padding, of requests that sampled, finished meanwhile or not: the target verified them), by
    scheduled entry (0 elsewhere), asked at once as the sync path does (``Scheduler._draws``)."""
    reqs: list[Request] = []
    ns: list[int] = []
    where: list[int] = []
    drafts = plan.drafts or ()
    for j, ((r, _n), s, d) in enumerate(zip(plan.scheduled, plan.samples or (), drafts, strict=True)):
        if s and d > 0:
            reqs.append(r)
            ns.append(d)
            where.append(j)
    out = [0] * len(plan.scheduled)
    if reqs:
        got: list[int] = sched.acceptance.accepted_many(reqs, ns)  # type: ignore[attr-defined]
        for j, a in zip(where, got, strict=True):
            out[j] = a
    return out


def _verified(sched: Scheduler, r: Request, plan: StepPlan, d: int, a: int, stale: bool) -> int:
    """Count a verification of ``d`` drafts (negative: padding, none accepted) of which the
    target accepted ``a``, and roll the rejected ones back out of ``num_computed`` and the
    placeholders (vLLM's ``update_from_output``; not for a stale output, whose count predates
    the preemption's rollback). Returns the accepted count."""
    if d < 0:
        a = 0
        d = -d
    else:
        r.spec_drafted += d
        r.spec_accepted += a
        sched.spec_drafted += d
        sched.spec_accepted += a
        sched.spec_verifications += 1
    r.spec_verifications += 1
    plan.spec.append((r, d, a))
    if not stale:
        if r.num_computed > 0:
            r.num_computed -= d - a
        if r.placeholders > 0:
            r.placeholders -= d - a
    return a


def _emitted(r: Request, step: int, t_end: float) -> None:
    """``Scheduler._emitted`` (inline in the compiled core): first-token time, token runs."""
    if r.first_token < 0:
        r.first_token = t_end
    seg = r.segments
    if seg and seg[-2] + seg[-1] == step:
        seg[-1] += 1
    else:
        seg.append(step)
        seg.append(1)
    r.last_token = t_end


__all__ = ["after_schedule", "update"]
