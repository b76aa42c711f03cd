"""The replica engine loop: arrivals, the clock, one scheduler step after another, records.

Time: each step starts when the previous one ends; its duration comes from the step-time
model. A request arriving at or before a step's start takes part in that step. An idle engine
(nothing running or waiting) jumps to the next arrival. Requests whose prompt is at least
``max_model_len`` are rejected on arrival (vLLM answers HTTP 400); with ``queue_timeout_s``,
requests still unscheduled after that long are rejected at the next step start. Nothing is
dropped silently: every request ends with exactly one outcome.
"""

from __future__ import annotations

import gc
import math
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from servesim.engine import engine_setup, idle_span, replica_ops
from servesim.engine.admission import gate_of, rejected_on_arrival
from servesim.engine.config import EngineConfig
from servesim.engine.empty_steps import nothing_scheduled
from servesim.engine.engine_events import emit_step, emit_stretch_step
from servesim.engine.invariants import check_engine
from servesim.engine.kv_connector_base import KVConnector
from servesim.engine.pipeline_steps import BatchQueue
from servesim.engine.recorder import REQUEST_COLUMNS, Recorder
from servesim.engine.request import (
    OUTCOME_UNFINISHED,
    Request,
)
from servesim.engine.speculative import describe_draft_timing
from servesim.engine.step_plan import PendingStep, StepPlan
from servesim.engine.step_time import BatchComposition, StepTimeModel
from servesim.engine.trace_arrays import TraceArrays
from servesim.errors import EngineStallError, InputError, InternalError
from servesim.events import (
    Emit,
    Observer,
    Progress,
    RequestArrived,
    StepLogObserver,
    fan_out,
)
from servesim.traces.schema import Trace

StepLogSink = Callable[[dict[str, Any]], None]  # receives each step's log record (StepEvent.log_record)
PROGRESS_EVERY_STEPS = 1 << 13


class Engine:
    """One vLLM replica simulated over a trace. Use ``servesim.simulate`` unless you need steps."""

    def __init__(
        self,
        trace: Trace | TraceArrays,
        config: EngineConfig,
        step_time: StepTimeModel,
        *,
        fast: bool = True,
        step_log: StepLogSink | None = None,
        check_invariants: bool = False,
        record_token_times: bool = False,
        stretch: bool = True,
        observers: Sequence[Observer] = (),
        external_arrivals: bool = False,
        name: str | None = None,
        kv_connector: KVConnector | None = None,
    ) -> None:
        self.config = config
        # vLLM's KV connector (kv_connector_base.py): None is the plain engine. The fast path runs
        # with one too: it asks the connector which decodes may be lazy and when it is quiet.
        self.kv_connector = kv_connector
        fast = fast and engine_setup.fast_path_allowed(config, kv_connector)
        # multi-step decode stretches (part of the fast path); a prefill cadence counts every
        # executed step in the scheduler, so its steps all go through it
        self.stretch = fast and stretch and config.prefill_schedule_interval == 1
        self.name = name  # the replica's name in events (None stand-alone)
        observers = [*observers, *([StepLogObserver(step_log)] if step_log is not None else [])]
        # One callable delivering an event to every observer; None when there is none, so the
        # hot loop builds no event at all (``if emit is not None`` is all an unobserved run pays).
        self.emit: Emit | None = fan_out(observers)
        self.num_closed = 0
        self._next_progress = PROGRESS_EVERY_STEPS
        self._step_time = step_time.step_time
        # A model that can say a decode-only step's time as terms (StepTimeModel.decode_terms)
        # lets a decode stretch time its steps here, without a call per step.
        self._decode_terms = getattr(step_time, "decode_terms", None)
        # The last decode count's terms, kept across steps (they depend on the count alone).
        self._terms_n, self._terms = 0, (0.0, 0.0, 0.0, 0.0)
        self._empty_steps = 0
        self.step_time = step_time
        self._drafter, self._draft_fraction, self._spec_k = engine_setup.drafter(config, step_time)
        self.adapters = engine_setup.adapter_cache(config, step_time)
        self.draft_time_s = 0.0
        self.trace = trace if isinstance(trace, TraceArrays) else TraceArrays(trace)
        self.max_model_len, self.pool, self.kv, self.scheduler = engine_setup.replica(
            config, self.trace, fast, kv_connector
        )
        self.check_invariants = check_invariants
        self.rec = Recorder(self.trace.n)
        if config.speculative_config is not None:
            self.rec.spec_steps = array("q")
        if config.enable_lora:
            self.rec.lora_skips = array("q")
        # Hybrid KV cache groups: the manager's per-group blocks in use, snapshot with each step
        self._group_used: list[int] | None = getattr(self.kv, "group_used", None)
        if self._group_used is not None:
            self.rec.kv_group_steps = array("i")
            self.rec.num_kv_groups = len(self._group_used)
        if record_token_times or config.stream_interval > 1:  # chunks of a stream: streaming.py
            self.rec.token_steps = {}
        self.now = 0.0
        self.step = 0
        # Next trace row to arrive; a cluster replica gets its requests through submit() instead.
        self.external_arrivals = external_arrivals
        self._next = self.trace.n if external_arrivals else 0
        self._timeouts: deque[Request] = deque()  # never-scheduled requests, by arrival
        self.gate = gate_of(config.max_num_queued_reqs, config.max_num_queued_tokens)  # HTTP 503s
        self._async = config.async_scheduling
        self._held: PendingStep | None = None  # async: the step whose output is not applied yet
        # Pipeline parallelism: vLLM's batch queue of pipeline_parallel_size + 1 steps in flight
        # (pipeline_steps.py drives begin_step / end_step then); None without PP.
        self._pp: BatchQueue | None = BatchQueue(self) if config.pipeline_parallel_size > 1 else None
        self.live: dict[int, Request] = {}  # arrived and not yet closed
        self._span: PendingStep | None = None  # an idle span in flight (idle_span.py)
        self._span_dt = self._span_end = 0.0  # its empty step's time, and its end
        if kv_connector is not None and hasattr(kv_connector, "wake"):
            kv_connector.wake = partial(idle_span.wake, self)  # a due time set from outside cuts a span

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        """Simulate until every request has an outcome.

        The cyclic garbage collector is paused meanwhile: the engine creates no reference cycles
        (reference counting frees everything), and collections triggered by the allocation of
        millions of small objects would otherwise cost as much as the simulation itself.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self.run_until(math.inf)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.finish()
        if self.emit is not None:
            self.emit(Progress(self.num_closed, self.trace.n, self.now, self.step))

    def run_until(self, limit: float) -> None:
        """Execute every step that starts before ``limit`` (then stop; idle engines stop at once).

        Stand-alone, requests arrive from the trace; a cluster instead calls ``submit`` and drives
        ``begin_step``/``end_step`` itself, so that routing and failures happen between steps.
        """
        while True:
            pending = self.begin_step(limit)
            if pending is None:
                return
            self.end_step(pending)

    def begin_step(self, limit: float = math.inf) -> PendingStep | None:
        """Admit due arrivals and schedule the next step if it starts before ``limit``.

        Returns the step in flight (its duration known, its results not yet applied), or None if
        the engine is idle or has reached ``limit``. Decode stretches that end by ``limit`` are
        applied whole on the way.
        """
        if self._pp is not None:
            return self._pp.begin(limit)
        sched = self.scheduler
        running = sched.running  # mutated in place by the scheduler, never rebound
        waiting = sched.waiting
        arrival = self.trace.arrival
        n = self.trace.n
        timeouts = self.config.queue_timeout_s is not None
        xfer = sched.kv_xfer  # the scheduler's side of the KV connector (None: no connector)
        while True:
            if xfer is not None:
                xfer.transfers_done(self.now)  # transfers that ended while the engine idled
            # async: this step is scheduled as the held one starts, with the requests there by then
            cutoff = self.now if self._held is None else self._held.start
            if self._next < n and arrival[self._next] <= cutoff:
                self._arrive(cutoff)
            if timeouts:
                self._expire()
            if not running and not len(waiting) and (xfer is None or not xfer.keeps_stepping()):  # idle
                if self._held is not None:  # apply the step still held (async), then look again
                    self._apply(self._held, self.step - 1)
                    self._held = None
                    continue
                if self._next >= n or arrival[self._next] >= limit:
                    return None
                self.now = max(self.now, arrival[self._next])
                continue
            if self.now >= limit:
                return None
            if (
                xfer is not None
                and not running
                and not len(waiting)
                and not len(xfer.holding.ready)
                and xfer.connector.quiet(False)
            ):
                span = idle_span.begin(self, limit, xfer)
                if span is not None:
                    return span
            if (
                self.stretch
                and not sched.explicit
                and sched.group is not None
                and sched.group.n
                and (
                    not (len(waiting) or (xfer is not None and len(xfer.holding.ready)))
                    or (len(running) >= sched.max_num_active and not timeouts)
                )
                and (xfer is None or xfer.connector.quiet(True))
                and self._decode_stretch(limit)
            ):
                continue
            break
        now = self.now
        step = self.step
        plan = sched.schedule(step, now)
        if plan.num_group_decodes == 0 and not plan.scheduled and self._held is None:
            nothing_scheduled(self, plan, step)  # vLLM's empty steps, or a stall said loudly
        else:
            self._empty_steps = 0
        batch = plan.batch()
        terms_of = self._decode_terms
        if terms_of is not None and not batch.prefill_chunks and batch.num_decodes:
            # decode-only: timed as a stretch times its steps (step_time's float, no Python call;
            # in a fleet every routed arrival cuts each replica's stretch into such steps)
            nd = batch.num_decodes
            if nd != self._terms_n:
                self._terms_n, self._terms = nd, terms_of(nd)
            head, per_ctx, tail, seq = self._terms
            dt = head + batch.decode_ctx_sum * per_ctx + tail + seq
        else:
            dt = self._step_time(batch)
        if self._draft_fraction > 0.0 or self._drafter is not None:
            draft = plan.draft_time(batch, self._drafter, self._spec_k, self._draft_fraction, self._step_time)
            self.draft_time_s += draft
            dt += draft
        if self.adapters is not None:  # LoRA: the batch's adapters brought to the GPU first
            dt += self.adapters.step([r.lora for r in running])
        if self._async:  # after the drafter's passes are timed over the step as scheduled
            sched.after_schedule(plan)
        if not dt > 0:
            raise InputError(f"step-time model returned {dt!r} s for {batch!r}; it must be > 0")
        n_waiting = len(waiting)
        if xfer is not None:
            xfer.build_connector_meta(plan, now, now + dt)
            n_waiting += len(xfer.holding)
        p = PendingStep(
            plan, batch, now, dt, len(running), n_waiting, self.pool.usable_blocks - self.pool.num_free
        )
        if self._group_used is not None:
            p.kv_groups = tuple(self._group_used)
        return p

    def steps_until(
        self, pending: PendingStep | None, horizon: float, t_ext: float, until: float
    ) -> tuple[PendingStep | None, int, float]:
        """A cluster's steps of this replica up to its next external event at ``t_ext``: begin
        (with ``horizon``) and end steps while the step in flight ends by ``t_ext`` and before
        ``until``. Returns (the step left in flight or None, steps ended, the last one's end;
        -inf when none ended). Between external events replicas do not interact, so running
        one replica's steps in a row ends the same steps as taking every replica's in time
        order (what a cluster does when something observes the order)."""
        p, ended, last = pending, 0, -math.inf
        while True:
            if p is None:
                p = self.begin_step(horizon)
                if p is None:
                    return None, ended, last
            end = p.start + p.duration
            if end <= t_ext and end < until:
                self.end_step(p)
                p, ended, last = None, ended + 1, end
            else:
                return p, ended, last

    def end_step(self, p: PendingStep) -> list[Request]:
        """End a step: apply its results at its end time; returns the requests that finished.
        With async scheduling, vLLM's batch queue: a step's output is applied only once the
        next step is scheduled, so this holds ``p`` and applies the step held before it."""
        if p is self._span:
            return idle_span.end(self)
        if self._pp is not None:
            return self._pp.end(p)
        step = self.step
        self.now = p.start + p.duration
        self.step = step + 1
        if self._async:
            held, self._held = self._held, p
            if held is None:
                return []
            return self._apply(held, step - 1)
        return self._apply(p, step)

    def _apply(self, p: PendingStep, step: int) -> list[Request]:
        """Apply step ``step``'s results (``p``) at its end time; returns the requests that finished."""
        sched = self.scheduler
        rec = self.rec
        plan = p.plan
        now = p.start
        t_end = now + p.duration
        rec.step_end.append(t_end)
        if self._spec_k:
            v0 = sched.spec_verifications
            a0 = sched.spec_accepted
            finished = sched.update(plan, step, t_end)
            counts = (sched.spec_verifications - v0, sched.spec_accepted - a0, len(plan.spec))
            rec.spec_steps.extend(counts)  # type: ignore[union-attr]  # set whenever _spec_k is
        else:
            finished = sched.update(plan, step, t_end)
        if plan.lora_skipped:
            rec.lora_skips.extend((step, plan.lora_skipped))  # type: ignore[union-attr]  # set with LoRA
        if plan.preempted:
            for r in plan.preempted:
                rec.preemption_events.append((now, step, r.idx, r.lost_tokens))
                if r.num_preemptions == sched.starvation_threshold:
                    rec.starvation_events.append((now, step, r.idx, r.lost_tokens))
        if plan.new or plan.resumed:
            for r, hit in plan.prefix_hits:
                if r.num_preemptions == 0:
                    rec.prefix_hits += hit
            for r in plan.new:
                rec.prefix_queries += r.prompt_len
        batch = p.batch
        prefill = batch.num_prefill_tokens
        rec.durations.append(p.duration)
        rec.steps.extend(
            rec.pack_step(
                now,
                batch.num_decodes + prefill,
                batch.num_decodes,
                prefill,
                p.num_running,
                p.num_waiting,
                p.kv_used,
                len(plan.preempted),
                len(plan.new) + len(plan.resumed),
                len(finished),
            )
        )
        if p.kv_groups is not None:
            rec.kv_group_steps.extend(p.kv_groups)  # type: ignore[union-attr]  # set with _group_used
        if self.emit is not None:
            emit_step(self, plan, now, p.duration, finished, t_end, step)
        for r in finished:
            self._close(r)
        if self.check_invariants:
            self.assert_invariants()
        if self.emit is not None and self.step >= self._next_progress and not self.external_arrivals:
            self._next_progress = self.step + PROGRESS_EVERY_STEPS
            self.emit(Progress(self.num_closed, self.trace.n, t_end, self.step))
        return finished

    def _decode_stretch(self, limit: float) -> bool:
        """Advance, in one go, the steps in which only the decode group runs: no request
        arrives, every step's new blocks fit, and no waiting request can be admitted (there is
        none, or ``max_num_active_seqs`` is reached). A step in which members produce their last token
        is part of the stretch too: they leave exactly as ``Scheduler.update`` would have them
        leave; the stretch ends there if that makes room for a waiting request.
        Returns False when not even one such step is ahead."""
        sched = self.scheduler
        group = sched.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        t = self.now
        next_arrival = self._stretch_horizon(limit)
        n = group.n
        if next_arrival <= t or sched.budget < n:
            return False
        step = first = self.step
        end = group.next_finish_step()
        pool = self.pool
        free = pool.num_free
        usable = pool.usable_blocks
        buckets = group.buckets
        bs = group.block_size
        ctx = group.ctx_base
        step_time = self._step_time
        add_row = self.rec.steps.extend
        add_duration = self.rec.durations.append
        pack = self.rec.pack_step
        step_end = self.rec.step_end
        n_running = len(sched.running)
        n_waiting = len(sched.waiting)
        xfer = sched.kv_xfer
        # With a KV connector (quiet: begin_step checked) a step is its own only while no transfer
        # is reported at its end: every one must end before the connector's next due time.
        due = math.inf
        if xfer is not None:
            due = xfer.connector.next_due()
            n_waiting += len(xfer.holding)
        emit = self.emit
        terms_of = self._decode_terms
        terms_n = self._terms_n  # the decode count the terms below are for (0: none yet)
        head, per_ctx, tail, seq = self._terms
        while t < next_arrival:
            pops = buckets[step % bs]
            if pops > free:
                break
            if terms_of is None:
                dt = step_time(BatchComposition(n, ctx + n * (step + 1), [], 0))
            else:
                if n != terms_n:
                    head, per_ctx, tail, seq = terms_of(n)
                    terms_n = n
                    self._terms_n, self._terms = n, (head, per_ctx, tail, seq)
                dt = head + (ctx + n * (step + 1)) * per_ctx + tail + seq
            if not dt > 0:
                raise InputError(f"step-time model returned {dt!r} s in a decode step of {n}; it must be > 0")
            if t + dt > limit or t + dt >= due:
                break  # it would still be running at the limit (or a transfer ends): begin_step's
            free -= pops
            t_end = t + dt
            step_end.append(t_end)
            if step < end:
                add_duration(dt)
                add_row(pack(t, n, n, 0, n_running, n_waiting, usable - free, 0, 0, 0))
                if emit is not None:
                    emit_stretch_step(self, step, [])
                t = t_end
                step += 1
                continue
            self._stretch_finish(step, t, dt, t_end, n, free, n_running, n_waiting)
            t = t_end
            step += 1
            free = pool.num_free
            n = group.n
            ctx = group.ctx_base
            n_running = len(sched.running)
            if not n or (n_waiting and n_running < sched.max_num_active) or xfer is not None:
                break  # idle, a waiting request may be admitted, or the connector has the finished
            end = group.next_finish_step()
        if step == first:
            return False
        self._stretch_end(step, t, free)
        return True

    def _stretch_horizon(self, limit: float) -> float:
        """Where a decode stretch must stop: the next arrival, or ``limit`` (a cluster event:
        routing, a failure) if that comes first."""
        next_arrival = self.trace.arrival[self._next] if self._next < self.trace.n else math.inf
        return limit if limit < next_arrival else next_arrival

    def _stretch_finish(
        self, step: int, t: float, dt: float, t_end: float, n: int, free: int, n_running: int, n_waiting: int
    ) -> None:
        """Members produce their last token in this stretch step (``n`` decodes, ``free`` blocks
        left of the pool's): hand them the blocks popped so far (the pool's order of pops and
        frees stays the per-step one), record the step, then retire them."""
        group = self.scheduler.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        pool = self.pool
        taken = pool.num_free - free
        if taken:
            group.limbo.extend(pool.get_new_blocks(taken))
        done = group.take_finishing(step, t_end)
        xfer = self.scheduler.kv_xfer
        if xfer is not None:  # as Scheduler.update: the connector hears of them first
            for r in done:
                xfer.request_finished(r)
        rec = self.rec
        rec.durations.append(dt)
        rec.steps.extend(
            rec.pack_step(t, n, n, 0, n_running, n_waiting, pool.usable_blocks - free, 0, 0, len(done))
        )
        self.scheduler.retire(done, t_end)
        if xfer is not None:
            xfer.transfers_done(t_end)
        if self.emit is not None:
            emit_stretch_step(self, step, done)
        for r in done:
            self._close(r)

    def _stretch_end(self, step: int, t: float, free: int) -> None:
        """A stretch ends at ``t``, before ``step``: the blocks its steps popped go to the group."""
        group = self.scheduler.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        pool = self.pool
        taken = pool.num_free - free
        if taken:
            group.limbo.extend(pool.get_new_blocks(taken))
        group.compact()
        self.now = t
        self.step = step
        if self.check_invariants:
            self.assert_invariants()

    def _arrive(self, now: float) -> None:
        arrival = self.trace.arrival
        n = self.trace.n
        waiting = self.scheduler.waiting
        mml = self.max_model_len
        timeouts = self.config.queue_timeout_s is not None
        trace = self.trace
        kv = self.kv
        live = self.live
        emit = self.emit
        i = self._next
        while i < n and arrival[i] <= now:
            r = trace.make_request(i)
            i += 1
            if emit is not None:
                emit(RequestArrived(r.arrival, r.req_id, self.name))
            if (self.gate is not None or r.prompt_len >= mml) and rejected_on_arrival(self, r, r.arrival):
                continue  # HTTP 503 (admission.py) or 400 (prompt too long)
            kv.init_request(r)
            live[r.idx] = r
            if self.gate is not None:
                self.gate.admitted(r)
            waiting.add(r)
            if timeouts:
                self._timeouts.append(r)
        self._next = i

    def _expire(self) -> None:
        """Reject requests unscheduled for longer than ``queue_timeout_s`` (at a step start)."""
        q = self._timeouts
        if q and self.now - q[0].arrival > (self.config.queue_timeout_s or 0.0):
            replica_ops.expire(self)

    def draft_timing(self) -> str:
        """How the drafter's passes are timed, in one line (speculative decoding only)."""
        return describe_draft_timing(self.config.speculative_config, self._drafter, self._draft_fraction)

    # ------------------------------------------------------------------ clusters
    def submit(self, r: Request, t: float) -> None:
        """Route ``r`` here at time ``t`` (cluster mode; ``replica_ops.submit``)."""
        replica_ops.submit(self, r, t)

    def abort(self, r: Request, t: float) -> bool:
        """Finish ``r`` as aborted at ``t``: its client went away (``replica_ops.abort``). Call
        between steps; False if ``r`` is not live here (already finished, or never here)."""
        return replica_ops.abort(self, r, t)

    def computed_tokens(self, r: Request) -> int:
        """Tokens of ``r`` whose KV is on this replica now (exact for decode-group members too)."""
        if r.sync_step >= 0:
            return r.num_computed + (self.step - r.sync_step)
        return r.num_computed

    def evict_all(self) -> list[tuple[Request, int]]:
        """The replica is lost: every request comes off it (``replica_ops.evict_all``)."""
        return replica_ops.evict_all(self)

    def _close(self, r: Request) -> None:
        if self.live.pop(r.idx, None) is not None and self.gate is not None:
            self.gate.closed(r.finish_time)
        self.rec.close_request(r)
        self.num_closed += 1

    def finish(self) -> None:
        """Close the run: every request gets an outcome, then the final conservation checks."""
        sched = self.scheduler
        if self._held is not None:  # async: the last step's output
            self._apply(self._held, self.step - 1)
            self._held = None
        if self._pp is not None:  # PP: the steps still in the batch queue
            self._pp.drain()
        if sched.group is not None and sched.group.n:
            sched.materialize_all(self.step, self.now)
        for r in list(self.live.values()):  # only if the loop was cut short
            r.outcome = OUTCOME_UNFINISHED
            self._close(r)
        if sched.kv_xfer is not None:
            sched.kv_xfer.drain(self.now)  # transfers the idle engine never stepped for
        self.assert_invariants(final=True)

    # ------------------------------------------------------------------ invariants
    def assert_invariants(self, final: bool = False) -> None:
        """Conservation checks (see docs/invariants.md); cheap enough to run every step in tests."""
        check_engine(self, final)


# The compiled core cimports these types (engine.pxd), which keeps them out of its module's
# namespace: put them back for ``from servesim.engine.engine import TraceArrays`` and the like.
globals().update(PendingStep=PendingStep, Recorder=Recorder, StepPlan=StepPlan, TraceArrays=TraceArrays)

__all__ = [
    "PROGRESS_EVERY_STEPS",
    "REQUEST_COLUMNS",
    "Engine",
    "EngineStallError",
    "PendingStep",
    "Recorder",
    "StepLogSink",
    "TraceArrays",
]
