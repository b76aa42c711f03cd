"""The typed events of an engine's steps (``servesim.events``), built only when someone observes.

The engine calls these only when it has observers (``Engine.emit`` is not None): an unobserved
run builds no event at all, so none of this is on the hot path.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import TYPE_CHECKING

from servesim.engine.kv_groups import group_kinds
from servesim.engine.request import OUTCOMES, Request
from servesim.engine.step_plan import StepPlan, admit_seq
from servesim.errors import InternalError
from servesim.events import (
    Emit,
    FirstToken,
    RequestAdmitted,
    RequestFinished,
    RequestPreempted,
    RequestResumed,
    RequestStarved,
    StepEvent,
)

if TYPE_CHECKING:
    from servesim.engine.engine import Engine


def _emit_of(engine: Engine) -> Emit:
    emit = engine.emit
    if emit is None:
        raise InternalError("invariant broken: emit is None")
    return emit


def finished_event(engine: Engine, r: Request, t_end: float) -> RequestFinished:
    return RequestFinished(t_end, r.req_id, engine.name, OUTCOMES[r.outcome], r.num_output, t_end - r.arrival)


def emit_step(
    engine: Engine, plan: StepPlan, now: float, dt: float, finished: list[Request], t_end: float, step: int
) -> None:
    """The events of step ``step`` (from ``now`` to ``t_end``): scheduling outcomes, first
    tokens, finishes, the step."""
    emit = _emit_of(engine)
    name = engine.name
    sched = engine.scheduler
    for r in plan.preempted:
        emit(RequestPreempted(now, r.req_id, name, r.lost_tokens, r.num_preemptions))
        if r.num_preemptions == sched.starvation_threshold:
            emit(RequestStarved(now, r.req_id, name, r.num_preemptions))
    hits = {id(r): h for r, h in plan.prefix_hits}
    step_hits = {r.req_id: h for r, h in plan.prefix_hits}
    if plan.loaded:  # hits at admission: GPU cache + what the KV connector brought
        for r, h in plan.loaded:
            step_hits[r.req_id] = step_hits.get(r.req_id, 0) + h
    for r in plan.new:
        emit(RequestAdmitted(now, r.req_id, name, hits.get(id(r), 0)))
    for r in plan.resumed:
        emit(RequestResumed(now, r.req_id, name))
    for r, _n in plan.scheduled:
        if r.num_output == 1 and r.first_token == t_end:
            emit(FirstToken(t_end, r.req_id, name, t_end - r.arrival))
    for r in finished:
        emit(finished_event(engine, r, t_end))
    row = engine.rec.step_row(step)
    scheduled = _scheduled_tokens(engine, plan, finished)
    event = StepEvent(
        name,
        step,
        now,
        dt,
        scheduled,
        sum(scheduled.values()),
        tuple(r.req_id for r in plan.new),
        tuple(r.req_id for r in plan.resumed),
        tuple(r.req_id for r in plan.preempted),
        tuple(r.req_id for r in finished),
        step_hits,
        int(row[5]),
        int(row[6]),
        int(row[7]),
        engine.pool.usable_blocks - int(row[7]),
        *_spec_fields(engine, plan),
    )
    groups = _group_blocks(engine)  # a hybrid model's kv_blocks_used split by group kind
    emit(event if groups is None else replace(event, kv_blocks_by_group=groups))


def _group_blocks(engine: Engine) -> dict[str, int] | None:
    """The step just recorded's blocks per KV cache group kind (the recorder's last counts,
    ``Recorder.kv_group_steps``); None for one block table."""
    held = engine.rec.kv_group_steps
    groups = engine.config.kv_cache_groups
    if held is None or not groups:
        return None
    last = held[len(held) - len(groups) :]
    return {kind: sum(last[i] for i in ids) for kind, ids in group_kinds(groups).items()}


def _scheduled_tokens(engine: Engine, plan: StepPlan, finished: list[Request]) -> dict[str, int]:
    """Tokens per request in the step, in admission order (decode-group members: one each)."""
    if engine.config.async_scheduling:  # no decode group; the running list has moved on since
        return {r.req_id: n for r, n in sorted(plan.scheduled, key=lambda e: e[0].admit_seq)}
    running = engine.scheduler.running
    explicit = {id(r): n for r, n in plan.scheduled}
    tokens: dict[str, int] = {}
    for r in running:
        n = explicit.get(id(r))
        if n is None and plan.num_group_decodes and r.sync_step >= 0:
            n = 1
        if n:
            tokens[r.req_id] = n
    for r in finished:  # finished requests left the running list already
        tokens[r.req_id] = explicit.get(id(r), 1)
    order = {r.req_id: r.admit_seq for r in list(running) + finished}
    return dict(sorted(tokens.items(), key=lambda kv: order.get(kv[0], -1)))


def _spec_fields(engine: Engine, plan: StepPlan) -> tuple[dict[str, int], dict[str, int]] | tuple[()]:
    """The step's drafts verified and accepted per request (speculative decoding only)."""
    if not engine.scheduler.spec_k:
        return ()
    return {r.req_id: d for r, d, _a in plan.spec}, {r.req_id: a for r, _d, a in plan.spec}


def emit_stretch_step(engine: Engine, step: int, finished: list[Request]) -> None:
    """The events of a decode-stretch step (every running request decodes one token)."""
    emit = _emit_of(engine)
    row = engine.rec.step_row(step)
    t_end = row[0] + row[1]
    for r in finished:
        emit(finished_event(engine, r, t_end))
    running = engine.scheduler.running  # the finished ones have left it: merge them back in order
    members = heapq.merge(running, finished, key=admit_seq) if finished else running
    emit(
        StepEvent(
            engine.name,
            step,
            row[0],
            row[1],
            {r.req_id: 1 for r in members},
            int(row[2]),
            (),
            (),
            (),
            tuple(r.req_id for r in finished),
            {},
            int(row[5]),
            int(row[6]),
            int(row[7]),
            engine.pool.usable_blocks - int(row[7]),
        )
    )


__all__ = ["emit_step", "emit_stretch_step", "finished_event"]
