"""How long a replica left alone keeps its queue lengths: its decode stretch timed ahead of it.

A cluster's least-outstanding router reads each replica's queue lengths (running plus waiting)
as of an arrival. Running a replica to every arrival would cut its decode stretch (the engine's
cheap multi-step path) into single scheduler steps at each one, and a fleet's arrivals grow
with its replicas. A ``StretchCursor`` tells instead until when a replica's queue lengths stay
as they are if no request is routed to it, without running it:

* only a step that ends can change how many requests run or wait (a request finishes);
  scheduling moves requests between the two (admission, preemption) without changing their sum;
* a replica whose step in flight is one of a decode stretch's own (the decode group alone, no
  member finishing) and which ``Engine.begin_step`` would go on stretching, runs stretch steps
  until one in which a member finishes, or one whose new blocks do not fit (a regular step);
  ``quiet_through`` times them one by one as ``Engine._decode_stretch`` does (the same float
  sums, from the same start), so the end of the step in which a member finishes is exact.

``settle`` runs a replica just far enough for its cursor to know its queue lengths at an
arrival, ending a decode stretch only where a member finishes (never at the arrival: a stretch
ended there costs a full scheduler step). The cluster's side is ``servesim.cluster.stepping``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesim.errors import InternalError

if TYPE_CHECKING:
    from servesim.engine.decode_group import DecodeGroup
    from servesim.engine.engine import Engine
    from servesim.engine.step_plan import PendingStep


class StretchCursor:
    """One replica's queue lengths (``outstanding``) and until when they hold (``bound``: for
    arrivals before it), found by timing its decode stretch ahead (``open``: it can time on)."""

    __slots__ = (
        "block_size",
        "bound",
        "buckets",
        "ctx",
        "end",
        "free",
        "head",
        "n",
        "open",
        "outstanding",
        "per_ctx",
        "seq",
        "step",
        "tail",
    )

    def __init__(self) -> None:
        self.bound = 0.0
        self.open = False
        self.step = self.end = self.free = self.n = self.ctx = self.outstanding = 0
        self.block_size = 1
        self.buckets: list[int] = [0]
        self.head = self.per_ctx = self.tail = self.seq = 0.0

    def close(self, bound: float) -> None:
        """The queue lengths are known for arrivals before ``bound`` only."""
        self.bound = bound
        self.open = False

    def start(self, group: DecodeGroup, t: float, step: int, free: int, engine: Engine) -> None:
        """The replica's step ``step`` starts at ``t`` as a decode stretch step of ``group``, with
        ``free`` blocks in the pool; no member finishes before ``step``."""
        n = group.n
        if engine._terms_n != n:  # the engine's cache: the terms depend on the count alone
            terms_of = engine._decode_terms
            if terms_of is None:
                raise InternalError("a stretch cursor needs the step-time model's decode terms")
            engine._terms_n, engine._terms = n, terms_of(n)
        self.head, self.per_ctx, self.tail, self.seq = engine._terms
        self.bound = t
        self.open = True
        self.step = step
        self.free = free
        self.end = group.next_finish_step()
        self.n = n
        self.ctx = group.ctx_base
        self.block_size = group.block_size
        self.buckets = group.buckets

    def quiet_through(self, t: float) -> bool:
        """True when an arrival at ``t`` sees the queue lengths of now: no step that may change
        them ends at or before ``t``."""
        while t >= self.bound:
            if not self.open:
                return False
            step = self.step
            pops = self.buckets[step % self.block_size]
            dt = self.head + (self.ctx + self.n * (step + 1)) * self.per_ctx + self.tail + self.seq
            if pops > self.free or not dt > 0:
                self.open = False  # a regular step starts at ``bound``: it may finish requests
                return False
            self.bound += dt
            if step >= self.end:
                self.open = False  # members finish in this step, at its end
            else:
                self.free -= pops
                self.step = step + 1
        return True

    def watch(self, engine: Engine, p: PendingStep | None) -> None:
        """Start on the replica as it stands between a cluster's events, ``p`` its step in
        flight (None: between steps). An idle replica keeps empty queues until a request is
        routed to it; a busy one keeps its queues until its step in flight ends, and on through
        the decode stretch after it when that step is one of the stretch's own; between steps,
        through the stretch from now."""
        sched = engine.scheduler
        group = sched.group
        self.outstanding = len(sched.running) + len(sched.waiting)
        if p is None:
            if not self.outstanding:
                quiet = sched.kv_xfer is None and engine._held is None
                self.close(math.inf if quiet else engine.now)
            elif group is not None and _stretch_follows(engine):
                self.start(group, engine.now, engine.step, engine.pool.num_free, engine)
            else:
                self.close(engine.now)
            return
        end = p.start + p.duration
        plan = p.plan
        if (
            group is None
            or not _stretch_follows(engine)
            or plan.num_group_decodes != group.n
            or plan.scheduled
            or plan.preempted
            or plan.new
            or plan.resumed
            or group.next_finish_step() <= engine.step
        ):
            self.close(end)
            return
        self.start(group, end, engine.step + 1, engine.pool.num_free, engine)

    def settle(self, engine: Engine, p: PendingStep | None, t: float) -> tuple[PendingStep | None, int]:
        """Run the replica (``p`` its step in flight) until this cursor knows its queue lengths
        at ``t``, or it has run to ``t``: a step in flight that ends by ``t`` ends; between steps
        a stretch runs to the end of the step in which a member finishes (the bound), else the
        next step begins as at ``t``. Returns the step then in flight and the steps ended."""
        ended = 0
        while not self.quiet_through(t):
            if p is not None:  # it ends by t: a bound is never before the step in flight's end
                engine.end_step(p)
                p = None
                ended += 1
            elif self.bound > engine.now:
                p = engine.begin_step(self.bound)
            else:
                p = engine.begin_step(t)
                if p is None:  # idle, or nothing more starts before t: run to t
                    self.outstanding = len(engine.scheduler.running) + len(engine.scheduler.waiting)
                    return None, ended
            self.watch(engine, p)
        return p, ended


def settle_all(
    cursors: list[StretchCursor],
    engines: list[Engine],
    inflight: list[PendingStep | None],
    alive: list[bool],
    watched: list[bool],
    queues: list[int],
    t: float,
) -> int:
    """A cluster's replicas (slot ``k``: ``engines[k]``, its step in flight ``inflight[k]``)
    before an arrival at ``t``: each live one watched (if ``watched`` says its cursor no longer
    is) and settled (if its cursor cannot say), its queue length as of ``t`` in ``queues``.
    Returns the steps ended. One compiled pass: an arrival costs little per replica."""
    steps = 0
    for k in range(len(engines)):
        if not alive[k]:
            continue
        cursor = cursors[k]
        if not watched[k]:
            cursor.watch(engines[k], inflight[k])
            watched[k] = True
            queues[k] = cursor.outstanding
        if not cursor.quiet_through(t):
            p, ended = cursor.settle(engines[k], inflight[k], t)
            inflight[k] = p
            steps += ended
            queues[k] = cursor.outstanding
    return steps


def _stretch_follows(engine: Engine) -> bool:
    """``Engine.begin_step`` takes a decode stretch next, as far as the replica's settings and
    queues say (with no KV connector, no speculation, no async scheduling and the model's decode
    terms; the group's finishes and the pool's blocks are ``StretchCursor.quiet_through``'s)."""
    sched = engine.scheduler
    group = sched.group
    if (
        not engine.stretch
        or engine._async
        or sched.kv_xfer is not None
        or engine._spec_k
        or engine._draft_fraction > 0.0
        or engine._drafter is not None
        or engine._decode_terms is None
        or group is None
        or not group.n
        or sched.explicit
        or sched.budget < group.n
    ):
        return False
    if not len(sched.waiting):
        return True
    return len(sched.running) >= sched.max_num_active and engine.config.queue_timeout_s is None


__all__ = ["StretchCursor", "settle_all"]
