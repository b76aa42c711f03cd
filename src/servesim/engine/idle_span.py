"""Idle spans: the empty steps vLLM takes while only KV transfers are in flight, as one span.

With nothing running, waiting or ready, and the connector quiet, a step schedules nothing and
changes nothing but the clock; vLLM's engine steps on like that until its worker reports a
transfer. Both of servesim's paths (fast and plain) take those steps as one ``PendingStep`` on the
same clock (each empty step's end is the last one's plus the empty step's time, exactly as step
by step), up to the first step end at or after the next transfer's due time, the step start at
or after the next arrival, or the step in flight at the engine's ``limit``. They are not recorded
(no step rows, events or step numbers), as an engine idle before an arrival records nothing. A
``submit`` or a due time set from outside (``PDConnector.send_done``: a cluster's link) cuts a
span in flight short at its first step end at or after that time. Called once per span, off the
hot path: plain Python beside the compiled engine.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesim.engine.step_plan import PendingStep, StepPlan
from servesim.errors import InputError, InternalError

if TYPE_CHECKING:
    from servesim.engine.engine import Engine
    from servesim.engine.kv_transfers import KVTransferState
    from servesim.engine.request import Request


def begin(engine: Engine, limit: float, xfer: KVTransferState) -> PendingStep | None:
    """The span from ``engine.now``; None when nothing would end it (the plain empty steps run
    then, so that a cluster sees it is stuck)."""
    plan = StepPlan()
    batch = plan.batch()
    dt = engine._step_time(batch)
    if not dt > 0:
        raise InputError(f"step-time model returned {dt!r} s for {batch!r}; it must be > 0")
    target = xfer.connector.next_due()
    trace = engine.trace
    if engine._next < trace.n and trace.arrival[engine._next] < target:
        target = trace.arrival[engine._next]
    if target == math.inf and limit == math.inf:
        return None
    now = engine.now
    t = now
    while True:
        t += dt
        if t >= target or t >= limit:
            break
    pool = engine.pool
    span = PendingStep(plan, batch, now, t - now, 0, len(xfer.holding), pool.usable_blocks - pool.num_free)
    engine._span_dt = dt
    engine._span_end = t
    engine._span = span
    return span


def wake(engine: Engine, t: float) -> None:
    """Something may happen at ``t``: the span in flight ends at its first step end at or after it."""
    span = engine._span
    if span is None or t >= engine._span_end:
        return
    dt = engine._span_dt
    g = span.start + dt
    while g < t:
        g += dt
    if g < engine._span_end:
        engine._span_end = g
        span.duration = g - span.start


def end(engine: Engine) -> list[Request]:
    """The span ends: the transfers due by its end are reported, as at any step end."""
    engine._span = None
    t_end = engine._span_end
    engine.now = t_end
    xfer = engine.scheduler.kv_xfer
    if xfer is None:
        raise InternalError("invariant broken: an idle span without a KV connector")
    xfer.transfers_done(t_end)
    if engine.check_invariants:
        engine.assert_invariants()
    return []
