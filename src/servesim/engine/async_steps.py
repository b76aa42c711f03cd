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

if TYPE_CHECKING:
    from servesim.engine.scheduler import Scheduler
    from servesim.engine.step_plan import StepPlan


def after_schedule(plan: StepPlan) -> None:
    """A step was scheduled (and its batch taken for timing): advance each request's computed
    tokens now and give every request that samples in the step a placeholder."""
    samples: list[bool] = []
    for r, n in plan.scheduled:
        c = r.num_computed + n
        r.num_computed = c
        r.in_flight += n
        s = c >= r.prompt_len + r.num_output + r.placeholders
        r.prefill_chunk = not s  # vLLM's is_prefill_chunk
        if s:
            r.placeholders += 1
        samples.append(s)
    plan.samples = samples


def update(sched: Scheduler, plan: StepPlan, step: int, t_end: float) -> list[Request]:
    """Apply step ``step``'s output (ending at ``t_end``), the next step being scheduled already.
    Returns the requests that finished, in scheduling order (running and stale ones alike)."""
    mml = sched.max_model_len
    kv = sched.kv
    finished: list[Request] = []
    gone: list[Request] = []  # finished by a stale token while preempted (in the waiting queue)
    for (r, n), s in zip(plan.scheduled, plan.samples or (), strict=True):
        r.in_flight -= n
        status = r.status
        if status in (FINISHED, REJECTED) or not s:
            continue  # aborted meanwhile, or a partial prefill chunk: nothing sampled
        stale = status == PREEMPTED
        had_placeholder = r.placeholders > 0
        o = r.num_output + 1
        r.num_output = o
        _emitted(r, step, t_end)
        if not stale and had_placeholder:
            r.placeholders -= 1
        stop = o >= r.max_tokens or r.prompt_len + o >= mml
        if not stale and status == RUNNING and had_placeholder and kv.caching:
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
