"""What happens to a replica from outside its step loop: a request routed to it (``submit``), a
client goes away (``abort``), the replica is lost (``evict_all``), queued requests time out
(``expire``). Called between steps, rarely: kept out of the engine's loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine import idle_span
from servesim.engine.admission import rejected_on_arrival
from servesim.engine.request import (
    OUTCOME_ABORTED,
    OUTCOME_REJECTED_TIMEOUT,
    PREEMPTED,
    REJECTED,
    WAITING,
    Request,
)
from servesim.errors import ConfigError, InternalError
from servesim.events import RequestFinished, RequestRejected

if TYPE_CHECKING:
    from servesim.engine.engine import Engine


def submit(engine: Engine, r: Request, t: float) -> None:
    """Route ``r`` to the replica at time ``t``: a new request, or one moved from a lost
    replica (status PREEMPTED, its outputs kept, ``external_tokens`` of migrated KV); an idle
    span in flight ends at ``t``."""
    sched = engine.scheduler
    if engine._span is not None:
        idle_span.wake(engine, t)
    if not sched.running and not len(sched.waiting) and t > engine.now:
        engine.now = t
    if r.status == WAITING and rejected_on_arrival(engine, r, t):
        return
    engine.kv.init_request(r)
    engine.live[r.idx] = r
    if engine.gate is not None:
        engine.gate.admitted(r)
    sched.waiting.add(r)  # appended: to this replica it is a new arrival
    if engine.config.queue_timeout_s is not None and r.status == WAITING:
        engine._timeouts.append(r)


def expire(engine: Engine) -> None:
    """``Engine._expire``: reject the requests unscheduled for longer than ``queue_timeout_s``."""
    limit = engine.config.queue_timeout_s
    if limit is None:
        raise InternalError("invariant broken: limit is None")
    q = engine._timeouts
    xfer = engine.scheduler.kv_xfer
    now = engine.now
    while q and now - q[0].arrival > limit:
        r = q.popleft()
        if r.status != WAITING:
            continue  # already scheduled (or preempted after being scheduled)
        if xfer is not None and r in xfer.holding:
            continue  # its blocks were allocated for a KV load: scheduled, not timed out
        r.status = REJECTED
        engine.scheduler.waiting.remove(r)
        r.outcome = OUTCOME_REJECTED_TIMEOUT
        r.finish_time = now
        engine._close(r)
        if engine.emit is not None:
            engine.emit(RequestRejected(now, r.req_id, engine.name, "queue_timeout"))


def abort(engine: Engine, r: Request, t: float) -> bool:
    """Finish ``r`` as aborted at ``t``: its client went away (``Scheduler.finish_requests``,
    vLLM's ``finish_requests(..., FINISHED_ABORTED)``). It leaves the running list or its queue
    and its KV blocks go back to the pool (hashed ones stay in the prefix cache, as for a
    finished request). Call between steps, never while a step that schedules ``r`` is in
    flight. False if ``r`` is not live here (already finished, or never here)."""
    if engine.live.get(r.idx) is not r:
        return False
    engine.scheduler.finish_requests([r], OUTCOME_ABORTED, engine.step, t)
    engine._close(r)
    if engine.emit is not None:
        engine.emit(RequestFinished(t, r.req_id, engine.name, "aborted", r.num_output, t - r.arrival))
    if engine.check_invariants:
        engine.assert_invariants()
    return True


def evict_all(engine: Engine) -> list[tuple[Request, int]]:
    """The replica is lost: take every request off it (running first, then waiting), as of
    the last completed step; a step in flight is lost with the replica. Returns each request
    with the KV tokens it had here (0 if it was waiting); requests keep their outputs, and a
    running one becomes PREEMPTED with ``lost_tokens`` = that KV."""
    sched = engine.scheduler
    if sched.group is not None:
        sched.materialize_all(engine.step, engine.now)
        limbo = sched.group.limbo  # blocks popped for the step in flight
        if limbo:
            engine.pool.free(list(limbo), 0, 0)
            limbo.clear()
    out: list[tuple[Request, int]] = []
    engine._held = None  # async scheduling: the step held for its output is lost too
    if engine._pp is not None:
        raise ConfigError(
            "pipeline_parallel_size with a replica failure (--failures, --mtbf-s) is not modelled yet: "
            "the steps in flight in the pipeline's stages are not moved; drop one of them"
        )
    for r in list(sched.running):
        r.placeholders = r.in_flight = 0
        computed = r.num_computed
        engine.kv.free(r)
        r.lost_tokens = computed
        r.num_computed = 0
        r.status = PREEMPTED
        out.append((r, computed))
    sched.running.clear()
    sched.explicit = []
    while len(sched.waiting):
        out.append((sched.waiting.pop(), 0))
    for r, _ in out:
        engine.rec.flush_tokens(r)
        r.segments = []
        if r.last_token >= 0:
            r.moved_token_time = r.last_token
        engine.live.pop(r.idx, None)
    engine._timeouts.clear()
    return out


__all__ = ["abort", "evict_all", "submit"]
