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
import heapq
import math
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from struct import Struct
from typing import Any

import numpy as np

from servesim.engine.block_pool import BlockPool
from servesim.engine.config import EngineConfig
from servesim.engine.kv_cache_manager import KVCacheManager, shared_id_prefixes
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.kv_pd import PDConnector
from servesim.engine.request import (
    OUTCOME_ABORTED,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOME_UNFINISHED,
    OUTCOMES,
    PREEMPTED,
    REJECTED,
    RUNNING,
    WAITING,
    Request,
)
from servesim.engine.scheduler import Scheduler, StepPlan
from servesim.engine.speculative import AcceptanceModel
from servesim.engine.step_time import BatchComposition, StepTimeModel, resolve_drafter
from servesim.engine.waiting_queue import FCFSQueue, PriorityQueue
from servesim.errors import ConfigError, EngineStallError, InputError, InternalError
from servesim.events import (
    Emit,
    FirstToken,
    Observer,
    Progress,
    RequestAdmitted,
    RequestArrived,
    RequestFinished,
    RequestPreempted,
    RequestRejected,
    RequestResumed,
    RequestStarved,
    StepEvent,
    StepLogObserver,
    fan_out,
)
from servesim.traces.schema import Trace

StepLogSink = Callable[[dict[str, Any]], None]  # receives each step's log record (StepEvent.log_record)
PROGRESS_EVERY_STEPS = 1 << 13


class TraceArrays:
    """The columns of a trace the engine reads, as plain arrays (one conversion, up front).

    ``hash_ids`` are cut to the prefix that some other request shares (``shared_id_prefixes``):
    the rest describes content no other request can hit. ``trim_hash_ids=False`` keeps them whole
    (the same results, slower: the tests check that the cut changes nothing)."""

    def __init__(self, trace: Trace, trim_hash_ids: bool = True) -> None:
        df = trace.df
        self.n = len(df)
        self.req_id: list[str] = [str(x) for x in df["req_id"].tolist()]
        self.arrival: list[float] = df["arrival_time_s"].astype(np.float64).tolist()
        self.prompt_len: list[int] = df["prompt_len"].astype(np.int64).tolist()
        self.output_len: list[int] = df["output_len"].astype(np.int64).tolist()
        self.priority: list[int] = df["priority"].astype(np.int64).tolist()
        self.prefix_len: list[int] = df["prefix_len"].astype(np.int64).tolist()
        groups: dict[str, int] = {}
        self.group: list[int] = []
        for g, plen in zip(df["prefix_group"].tolist(), self.prefix_len, strict=True):
            if g is None or plen <= 0 or (isinstance(g, float) and np.isnan(g)):
                self.group.append(-1)
            else:
                self.group.append(groups.setdefault(str(g), len(groups)))
        self.hash_ids: list[Any] = df["hash_ids"].tolist()
        self.hash_block_size = trace.hash_block_size
        self.num_shared_ids: list[int] | None = None
        # Per-request draft acceptance rates (NaN: the method's model); None when no row has one.
        self.spec_accept_rate: list[float] | None = None
        rate = df["spec_accept_rate"]
        if bool(rate.notna().any()):
            self.spec_accept_rate = rate.astype(np.float64).tolist()
        if trim_hash_ids and self.hash_block_size:
            self.num_shared_ids = shared_id_prefixes(self.hash_ids, self.prompt_len, self.hash_block_size)

    def make_request(self, i: int) -> Request:
        ids = self.hash_ids[i]
        if ids is not None and self.num_shared_ids is not None:
            k = self.num_shared_ids[i]
            ids = ids[:k] if k else None
        return Request(
            i,
            self.req_id[i],
            self.arrival[i],
            self.prompt_len[i],
            self.output_len[i],
            self.priority[i],
            self.group[i],
            self.prefix_len[i],
            None if ids is None else list(ids),
            self.hash_block_size or 0,
        )


# The recorder's per-request columns (floats first, then counts, the outcome last).
REQUEST_COLUMNS = (
    "first_scheduled",
    "first_token",
    "finish",
    "num_output",
    "preemptions",
    "recomputed",
    "reused",
    "prefix_hit",
    "outcome",
)


class Recorder:
    """Per-step time series and per-request records in compact arrays (numpy reads them in place)."""

    STEP_FIELDS = (
        "start_s",
        "duration_s",
        "num_tokens",
        "num_decodes",
        "num_prefill_tokens",
        "num_running",
        "num_waiting",
        "kv_blocks_used",
        "num_preempted",
        "num_admitted",
        "num_finished",
    )

    # One step row: two times (float64) then nine counts (int32), 52 bytes; the results read the
    # rows in place as a numpy structured array (``STEP_DTYPE``), so 9 million steps take 470 MB
    # once instead of 800 MB twice. bytearray.extend(pack(...)) is twice as fast as array.extend(tuple).
    STEP_FORMAT = "<2d9i"
    STEP_DTYPE = np.dtype(
        [(name, "<f8") for name in STEP_FIELDS[:2]] + [(name, "<i4") for name in STEP_FIELDS[2:]]
    )
    _step_struct = Struct(STEP_FORMAT)
    pack_step = _step_struct.pack
    unpack_step = _step_struct.unpack_from
    step_size = _step_struct.size

    def __init__(self, n_requests: int) -> None:
        # One packed row of STEP_FIELDS per step (``STEP_FORMAT``), read back by numpy without a copy.
        self.steps = bytearray()
        self.step_end = array("d")
        # Pooled inter-token latencies: a run of c consecutive outputs starting at step s
        # contributes the durations of steps s+1 .. s+c-1; every other gap (after a preemption
        # or a step without a token) is kept as an explicit value.
        self.itl_run_first = array("q")
        self.itl_run_last = array("q")
        self.itl_gaps = array("d")
        # Per request (index = trace position), one column per REQUEST_FIELDS entry.
        self.first_scheduled = array("d", [math.nan]) * n_requests
        self.first_token = array("d", [math.nan]) * n_requests
        self.finish = array("d", [math.nan]) * n_requests
        self.num_output = array("q", [0]) * n_requests
        self.preemptions = array("q", [0]) * n_requests
        self.recomputed = array("q", [0]) * n_requests
        self.reused = array("q", [0]) * n_requests
        self.prefix_hit = array("q", [0]) * n_requests
        self.outcome = array("q", [OUTCOME_UNFINISHED]) * n_requests
        self.token_steps: dict[int, list[int]] | None = None
        # Speculative decoding only (None when off): per step, the request-verifications, the
        # drafts they accepted and the requests that had drafts scheduled (padding rows too: each
        # samples a token), three int64 entries a step (vLLM's per-iteration spec-decode counts).
        self.spec_steps: array[int] | None = None
        # Preemption events: (time, step, request index, tokens computed when preempted).
        self.preemption_events: list[tuple[float, int, int, int]] = []
        self.starvation_events: list[tuple[float, int, int, int]] = []  # same shape
        self.prefix_queries = 0
        self.prefix_hits = 0
        # A rolling recorder (an online fleet that runs for days: ``ClusterSimulator.roll_records``)
        # keeps the latest steps and requests only: step k is row k - step_base, request i is
        # column i - request_base; it pools no inter-token gaps (the online layer measures its own).
        self.rolling = False
        self.step_base = 0
        self.request_base = 0
        self.request_top = 0  # 1 + the highest request index closed here
        self.events_dropped = 0  # preemption events no longer kept (rolling)

    def step_row(self, k: int) -> tuple[float, ...]:
        return self.unpack_step(self.steps, (k - self.step_base) * self.step_size)

    def num_preemption_events(self) -> int:
        """Preemptions recorded here, including those a rolling recorder no longer keeps."""
        return self.events_dropped + len(self.preemption_events)

    def trim_due(self, keep_steps: int, keep_requests: int) -> bool:
        return (
            len(self.step_end) > 2 * keep_steps
            or self.request_top - self.request_base > 2 * keep_requests
            or len(self.preemption_events) > 2 * keep_requests
            or len(self.starvation_events) > 2 * keep_requests
        )

    def trim(self, keep_steps: int, keep_requests: int, oldest_arrival: float = math.inf) -> None:
        """Rolling: forget all but the latest ``keep_steps`` steps and ``keep_requests`` request
        columns (and preemption/starvation events) once twice as many are held: amortised O(1)
        per step and per request, memory bounded whatever the run's length. The step in flight
        at ``oldest_arrival`` (of the requests still here) and every later one are kept."""
        self.rolling = True
        n = len(self.step_end)
        if n > 2 * keep_steps:
            drop = min(n - keep_steps, bisect_right(self.step_end, oldest_arrival))
            del self.step_end[:drop]
            del self.steps[: drop * self.step_size]
            if self.spec_steps is not None:
                del self.spec_steps[: 3 * drop]
            self.step_base += drop
        used = self.request_top - self.request_base
        if used > 2 * keep_requests:
            drop = used - keep_requests
            for col in REQUEST_COLUMNS:
                del getattr(self, col)[:drop]
            self.request_base += drop
        if len(self.preemption_events) > 2 * keep_requests:
            drop = len(self.preemption_events) - keep_requests
            del self.preemption_events[:drop]
            self.events_dropped += drop
        if len(self.starvation_events) > 2 * keep_requests:
            del self.starvation_events[: len(self.starvation_events) - keep_requests]

    def step_table(self) -> np.ndarray:
        """The steps as a structured array over the recorded bytes (no copy; fields as STEP_FIELDS)."""
        return np.frombuffer(self.steps, dtype=self.STEP_DTYPE)

    def close_request(self, r: Request) -> None:
        if r.idx >= self.request_top:
            self.request_top = r.idx + 1
        i = r.idx - self.request_base
        if i < 0:  # rolling, and older than the requests kept: the online layer has its outcome
            return
        if i >= len(self.outcome):
            self.grow(i + 1)
        if r.first_scheduled >= 0:
            self.first_scheduled[i] = r.first_scheduled
        if r.first_token >= 0:
            self.first_token[i] = r.first_token
        if r.finish_time >= 0:
            self.finish[i] = r.finish_time
        self.num_output[i] = r.num_output
        self.outcome[i] = r.outcome
        if r.num_preemptions:  # these columns start at 0: most requests leave them there
            self.preemptions[i] = r.num_preemptions
        if r.recomputed_tokens:  # (a request moved off a lost replica has no preemption)
            self.recomputed[i] = r.recomputed_tokens
        if r.reused_tokens:
            self.reused[i] = r.reused_tokens
        if r.prefix_hit_tokens:
            self.prefix_hit[i] = r.prefix_hit_tokens
        if r.segments:
            self.flush_tokens(r)

    def grow(self, n: int) -> None:
        """Make room for request index ``n - 1``: online runs (``ClusterSimulator.submit``) add
        requests beyond the trace the recorder was sized for. Doubles, so appends stay cheap."""
        extra = max(n, 2 * len(self.outcome), 64) - len(self.outcome)
        for col in REQUEST_COLUMNS[:3]:
            getattr(self, col).extend(array("d", [math.nan]) * extra)
        for col in REQUEST_COLUMNS[3:8]:
            getattr(self, col).extend(array("q", [0]) * extra)
        self.outcome.extend(array("q", [OUTCOME_UNFINISHED]) * extra)

    def flush_tokens(self, r: Request) -> None:
        """Add a request's inter-token gaps on this replica to the pooled ITL figures."""
        seg = r.segments
        if not seg or self.rolling:
            return
        if r.moved_token_time >= 0:  # the gap across a move from a lost replica
            self.itl_gaps.append(self.step_end[seg[0]] - r.moved_token_time)
            r.moved_token_time = -1.0
        if len(seg) == 2:  # the usual case: one run of outputs
            c = seg[1]
            if c > 1:
                self.itl_run_first.append(seg[0] + 1)
                self.itl_run_last.append(seg[0] + c - 1)
        else:
            end = self.step_end
            prev = -1
            for j in range(0, len(seg), 2):
                s, c = seg[j], seg[j + 1]
                if prev >= 0:
                    self.itl_gaps.append(end[s] - end[prev])
                if c > 1:
                    self.itl_run_first.append(s + 1)
                    self.itl_run_last.append(s + c - 1)
                prev = s + c - 1
        if self.token_steps is not None:
            self.token_steps[r.idx] = list(seg)


class PendingStep:
    """A step in flight: scheduled (blocks allocated) with its duration known, not yet applied."""

    __slots__ = ("batch", "duration", "kv_used", "num_running", "num_waiting", "plan", "start")

    def __init__(
        self,
        plan: StepPlan,
        batch: BatchComposition,
        start: float,
        duration: float,
        num_running: int,
        num_waiting: int,
        kv_used: int,
    ) -> None:
        self.plan = plan
        self.batch = batch
        self.start = start
        self.duration = duration
        self.num_running = num_running
        self.num_waiting = num_waiting
        self.kv_used = kv_used

    @property
    def end(self) -> float:
        return self.start + self.duration


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
        kv_connector: OffloadingConnector | PDConnector | None = None,
    ) -> None:
        self.config = config
        # vLLM's KV connector (kv_connector.py): None is the plain engine. With one, every step
        # runs the plain (naive) path: the fast path's proofs assume no connector.
        self.kv_connector = kv_connector
        if config.kv_offloading_size is not None and kv_connector is None:
            raise ConfigError(
                f"kv_offloading_size {config.kv_offloading_size} GiB needs the model's KV bytes per block "
                "and the GPU's host link to size and time the CPU tier: build the connector with "
                "servesim.perf.offload.offloading_connector(config, model, gpu, tp) and pass it as "
                "kv_connector"
            )
        if kv_connector is not None:
            fast = False
        if config.speculative_config is not None:
            if kv_connector is not None:
                raise ConfigError("speculative decoding with KV offloading is not modelled yet")
            fast = False  # the decode group assumes one token per step
        self.stretch = fast and stretch  # multi-step decode stretches (part of the fast path)
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
        self._empty_steps = 0
        self.step_time = step_time
        spec = config.speculative_config
        # The drafter's passes: timed by the step-time model's own drafter (perf's roofline) when
        # it has one, else as ``draft_fraction`` of the target's decode step per pass.
        self._drafter = resolve_drafter(step_time, spec) if spec is not None else None
        self._draft_fraction = spec.draft_fraction() if spec is not None and self._drafter is None else 0.0
        self._spec_k = spec.num_speculative_tokens if spec is not None else 0
        self.draft_time_s = 0.0
        self.trace = trace if isinstance(trace, TraceArrays) else TraceArrays(trace)
        t = self.trace
        if config.max_model_len is not None:
            mml = config.max_model_len
        else:
            mml = max((p + o for p, o in zip(t.prompt_len, t.output_len, strict=True)), default=1) + 1
            config.check_max_model_len(mml)
        self.max_model_len = mml
        self.pool = BlockPool(config.num_gpu_blocks, config.enable_prefix_caching)
        self.kv = KVCacheManager(
            self.pool, config.block_size, mml, config.watermark, config.scheduler_reserve_full_isl
        )
        if kv_connector is not None:
            holding: FCFSQueue | PriorityQueue = (
                PriorityQueue() if config.policy == "priority" else FCFSQueue()
            )
            kv_connector.attach(holding, self.kv.block_key)
            if isinstance(kv_connector, PDConnector):
                kv_connector.kv = self.kv  # a prefill leg's blocks are freed when its send is done
        self.scheduler = Scheduler(config, self.kv, mml, fast, kv_connector)
        if spec is not None and t.spec_accept_rate is not None:  # the trace's own acceptance
            self.scheduler.acceptance = AcceptanceModel(
                spec.rates(), spec.acceptance_seed, t.spec_accept_rate
            )
        self.check_invariants = check_invariants
        self.rec = Recorder(t.n)
        if spec is not None:
            self.rec.spec_steps = array("q")
        if record_token_times:
            self.rec.token_steps = {}
        self.now = 0.0
        self.step = 0
        # Next trace row to arrive; a cluster replica gets its requests through submit() instead.
        self.external_arrivals = external_arrivals
        self._next = self.trace.n if external_arrivals else 0
        self._timeouts: deque[Request] = deque()  # never-scheduled requests, by arrival
        self.live: dict[int, Request] = {}  # arrived and not yet closed

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
        sched = self.scheduler
        running = sched.running  # mutated in place by the scheduler, never rebound
        waiting = sched.waiting
        arrival = self.trace.arrival
        n = self.trace.n
        timeouts = self.config.queue_timeout_s is not None
        conn = self.kv_connector
        while True:
            if conn is not None:
                conn.complete_due(self.now)  # transfers that ended while the engine idled
            if self._next < n and arrival[self._next] <= self.now:
                self._arrive()
            if timeouts:
                self._expire()
            if not running and not len(waiting) and (conn is None or not conn.keeps_stepping()):  # idle
                if self._next >= n or arrival[self._next] >= limit:
                    return None
                self.now = max(self.now, arrival[self._next])
                continue
            if self.now >= limit:
                return None
            if (
                self.stretch
                and not sched.explicit
                and sched.group is not None
                and sched.group.n
                and (not len(waiting) or (len(running) >= sched.max_num_seqs and not timeouts))
                and self._decode_stretch(limit)
            ):
                continue
            break
        now = self.now
        step = self.step
        plan = sched.schedule(step, now)
        if plan.num_group_decodes == 0 and not plan.scheduled:
            if conn is not None and conn.keeps_stepping():
                self._empty_steps = 0  # only KV transfers in flight: vLLM steps on until they are done
            else:
                if not plan.preempted:
                    # Impossible for a config vLLM accepts (checked up front); say so loudly.
                    raise EngineStallError(
                        f"step {step}: nothing could be scheduled ({len(running)} running, "
                        f"{len(waiting)} waiting, {self.pool.num_free} free blocks)"
                    )
                self._empty_steps += 1
                if self._empty_steps > 1000:
                    raise EngineStallError(f"step {step}: 1000 steps in a row scheduled nothing")
        else:
            self._empty_steps = 0
        batch = plan.batch()
        dt = self._step_time(batch)
        if self._draft_fraction > 0.0 or self._drafter is not None:
            draft = self._draft_time(plan, batch)
            self.draft_time_s += draft
            dt += draft
        if not dt > 0:
            raise InputError(f"step-time model returned {dt!r} s for {batch!r}; it must be > 0")
        n_waiting = len(waiting)
        if conn is not None:
            conn.build_connector_meta(plan, now, now + dt)
            n_waiting += len(conn.holding)
        return PendingStep(
            plan, batch, now, dt, len(running), n_waiting, self.pool.usable_blocks - self.pool.num_free
        )

    def steps_until(
        self, pending: PendingStep | None, horizon: float, t_ext: float, until: float
    ) -> tuple[PendingStep | None, int, float]:
        """A cluster's steps of this replica up to its next external event at ``t_ext``: begin
        (with ``horizon``) and end steps while the step in flight ends by ``t_ext`` and before
        ``until``. Returns (the step left in flight or None, steps ended, the last one's end;
        -inf when none ended). Between external events replicas do not interact, so running
        one replica's steps in a row ends the same steps as taking every replica's in time
        order (what a cluster does when something observes the order)."""
        p = pending
        ended = 0
        last = -math.inf
        while True:
            if p is None:
                p = self.begin_step(horizon)
                if p is None:
                    return None, ended, last
            end = p.start + p.duration
            if end <= t_ext and end < until:
                self.end_step(p)
                p = None
                ended += 1
                last = end
            else:
                return p, ended, last

    def end_step(self, p: PendingStep) -> list[Request]:
        """Apply a step's results at its end time; returns the requests that finished."""
        sched = self.scheduler
        rec = self.rec
        plan = p.plan
        now = p.start
        step = self.step
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
        rec.steps.extend(
            rec.pack_step(
                now,
                p.duration,
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
        if self.emit is not None:
            self._emit_step(plan, p.duration, finished, t_end)
        if self.kv_connector is not None:
            self.kv_connector.step_loaded = []
        for r in finished:
            self._close(r)
        self.now = t_end
        self.step = step + 1
        if self.check_invariants:
            self.assert_invariants()
        if self.emit is not None and self.step >= self._next_progress and not self.external_arrivals:
            self._next_progress = self.step + PROGRESS_EVERY_STEPS
            self.emit(Progress(self.num_closed, self.trace.n, t_end, self.step))
        return finished

    def _decode_stretch(self, limit: float) -> bool:
        """Advance, in one go, the steps in which only the decode group runs: no request
        arrives, every step's new blocks fit, and no waiting request can be admitted (there is
        none, or ``max_num_seqs`` is reached). A step in which members produce their last token
        is part of the stretch too: they leave exactly as ``Scheduler.update`` would have them
        leave; the stretch ends there if that makes room for a waiting request.
        Returns False when not even one such step is ahead."""
        sched = self.scheduler
        group = sched.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        step = self.step
        t = self.now
        next_arrival = self.trace.arrival[self._next] if self._next < self.trace.n else math.inf
        if limit < next_arrival:
            next_arrival = limit  # a cluster event (routing, failure) the stretch must not pass
        if next_arrival <= t:
            return False
        n = group.n
        if sched.budget < n:
            return False
        end = group.next_finish_step()
        pool = self.pool
        free = pool.num_free
        usable = pool.usable_blocks
        buckets = group.buckets
        bs = group.block_size
        ctx = group.ctx_base
        step_time = self._step_time
        add_row = self.rec.steps.extend
        pack = self.rec.pack_step
        step_end = self.rec.step_end
        running = sched.running
        n_running = len(running)
        n_waiting = len(sched.waiting)
        emit = self.emit
        first = step
        terms_of = self._decode_terms
        terms_n = 0  # the decode count the terms below are for (0: none yet)
        head = per_ctx = tail = seq = 0.0
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
                dt = head + (ctx + n * (step + 1)) * per_ctx + tail + seq
            if not dt > 0:
                raise InputError(f"step-time model returned {dt!r} s in a decode step of {n}; it must be > 0")
            if t + dt > limit:
                break  # it would still be running at the limit: leave it to begin_step
            free -= pops
            t_end = t + dt
            step_end.append(t_end)
            if step < end:
                add_row(pack(t, dt, n, n, 0, n_running, n_waiting, usable - free, 0, 0, 0))
                if emit is not None:
                    self._emit_stretch_step(step, [])
                t = t_end
                step += 1
                continue
            # Members produce their last token in this step: hand them the blocks popped so far
            # (the pool's order of pops and frees stays the per-step one), then retire them.
            taken = pool.num_free - free
            if taken:
                group.limbo.extend(pool.get_new_blocks(taken))
            done = group.take_finishing(step, t_end)
            add_row(pack(t, dt, n, n, 0, n_running, n_waiting, usable - free, 0, 0, len(done)))
            sched.retire(done, t_end)
            if emit is not None:
                self._emit_stretch_step(step, done)
            for r in done:
                self._close(r)
            t = t_end
            step += 1
            free = pool.num_free
            n = group.n
            ctx = group.ctx_base
            n_running = len(running)
            if not n or (n_waiting and n_running < sched.max_num_seqs):
                break  # idle, or a waiting request may be admitted: the next step is a full one
            end = group.next_finish_step()
        if step == first:
            return False
        taken = pool.num_free - free
        if taken:
            group.limbo.extend(pool.get_new_blocks(taken))
        group.compact()
        self.now = t
        self.step = step
        if self.check_invariants:
            self.assert_invariants()
        return True

    def _emit_stretch_step(self, step: int, finished: list[Request]) -> None:
        """The events of a stretch step (every running request decodes one token)."""
        emit = self.emit
        if emit is None:
            raise InternalError("invariant broken: emit is None")
        row = self.rec.step_row(step)
        t_end = row[0] + row[1]
        for r in finished:
            emit(self._finished_event(r, t_end))
        running = self.scheduler.running  # the finished ones have left it: merge them back in order
        members = heapq.merge(running, finished, key=_admit_seq) if finished else running
        emit(
            StepEvent(
                self.name,
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
                self.pool.usable_blocks - int(row[7]),
            )
        )

    def _arrive(self) -> None:
        arrival = self.trace.arrival
        n = self.trace.n
        now = self.now
        waiting = self.scheduler.waiting
        mml = self.max_model_len
        timeouts = self.config.queue_timeout_s is not None
        make = self.trace.make_request
        init = self.kv.init_request
        live = self.live
        emit = self.emit
        i = self._next
        while i < n and arrival[i] <= now:
            r = make(i)
            i += 1
            if emit is not None:
                emit(RequestArrived(r.arrival, r.req_id, self.name))
            if r.prompt_len >= mml:
                r.status = REJECTED
                r.outcome = OUTCOME_REJECTED_TOO_LONG
                r.finish_time = r.arrival
                self.rec.close_request(r)
                self.num_closed += 1
                if emit is not None:
                    emit(RequestRejected(r.arrival, r.req_id, self.name, "prompt_too_long"))
                continue
            init(r)
            live[r.idx] = r
            waiting.add(r)
            if timeouts:
                self._timeouts.append(r)
        self._next = i

    def _expire(self) -> None:
        """Reject requests unscheduled for longer than ``queue_timeout_s`` (at a step start)."""
        limit = self.config.queue_timeout_s
        if limit is None:
            raise InternalError("invariant broken: limit is None")
        q = self._timeouts
        while q and self.now - q[0].arrival > limit:
            r = q.popleft()
            if r.status != WAITING:
                continue  # already scheduled (or preempted after being scheduled)
            r.status = REJECTED
            self.scheduler.waiting.remove(r)
            r.outcome = OUTCOME_REJECTED_TIMEOUT
            r.finish_time = self.now
            self._close(r)
            if self.emit is not None:
                self.emit(RequestRejected(self.now, r.req_id, self.name, "queue_timeout"))

    def _emit_step(self, plan: StepPlan, dt: float, finished: list[Request], t_end: float) -> None:
        """The events of one full step: scheduling outcomes, first tokens, finishes, the step."""
        emit = self.emit
        if emit is None:
            raise InternalError("invariant broken: emit is None")
        now = self.now
        name = self.name
        for r in plan.preempted:
            emit(RequestPreempted(now, r.req_id, name, r.lost_tokens, r.num_preemptions))
            if r.num_preemptions == self.scheduler.starvation_threshold:
                emit(RequestStarved(now, r.req_id, name, r.num_preemptions))
        hits = {id(r): h for r, h in plan.prefix_hits}
        step_hits = {r.req_id: h for r, h in plan.prefix_hits}
        conn = self.kv_connector
        if conn is not None and conn.step_loaded:  # hits at admission: GPU cache + CPU tier
            for r, h in conn.step_loaded:
                step_hits[r.req_id] = step_hits.get(r.req_id, 0) + h
        for r in plan.new:
            emit(RequestAdmitted(now, r.req_id, name, hits.get(id(r), 0)))
        for r in plan.resumed:
            emit(RequestResumed(now, r.req_id, name))
        for r, _n in plan.scheduled:
            if r.num_output == 1 and r.first_token == t_end:
                emit(FirstToken(t_end, r.req_id, name, t_end - r.arrival))
        for r in finished:
            emit(self._finished_event(r, t_end))
        row = self.rec.step_row(self.step)
        explicit = {id(r): n for r, n in plan.scheduled}
        tokens: dict[str, int] = {}
        for r in self.scheduler.running:
            n = explicit.get(id(r))
            if n is None and plan.num_group_decodes and r.sync_step >= 0:
                n = 1
            if n:
                tokens[r.req_id] = n
        for r in finished:  # finished requests left the running list already
            n = explicit.get(id(r), 1)
            tokens[r.req_id] = n
        order = {r.req_id: r.admit_seq for r in list(self.scheduler.running) + finished}
        scheduled = dict(sorted(tokens.items(), key=lambda kv: order.get(kv[0], -1)))
        emit(
            StepEvent(
                name,
                self.step,
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
                self.pool.usable_blocks - int(row[7]),
                *self._spec_fields(plan),
            )
        )

    def _draft_time(self, plan: StepPlan, batch: BatchComposition) -> float:
        """The drafter's k passes after the step. With a drafter of the step-time model's own
        (``DraftTimeModel``): its first pass over what the target computed (``batch``), then
        k - 1 passes of one token per request of the step, as vLLM's proposers run (every
        request in the batch, partial prefills too: their drafts are discarded). Otherwise over
        every request that samples in the step, each pass ``draft_fraction`` of the target's
        decode step over the same sequences (their context lengths as the step leaves them)."""
        n = 0
        ctx = 0
        drafter = self._drafter
        if drafter is not None:
            for r, m in plan.scheduled:
                n += 1
                ctx += r.num_computed + m
            return drafter.draft_time(batch, n, ctx) if n else 0.0
        for r, m in plan.scheduled:
            c = r.num_computed + m
            if c >= r.prompt_len + r.num_output:
                n += 1
                ctx += c
        if n == 0:
            return 0.0
        return self._spec_k * self._draft_fraction * self._step_time(BatchComposition(n, ctx, [], 0))

    def draft_timing(self) -> str:
        """How the drafter's passes are timed, in one line (speculative decoding only)."""
        spec = self.config.speculative_config
        if spec is None:
            return ""
        if self._drafter is not None:
            return str(self._drafter.describe())
        f = self._draft_fraction
        if spec.draft_step_fraction is not None:
            return f"each pass {f:g} of the target's decode step (draft_step_fraction, as given)"
        if f == 0.0:
            return f"{spec.method}: no GPU time charged (a CPU lookup)"
        return (
            f"each pass {f:g} of the target's decode step (DRAFT_STEP_FRACTION[{spec.method!r}]: "
            "the step-time model has no drafter roofline)"
        )

    def _spec_fields(self, plan: StepPlan) -> tuple[dict[str, int], dict[str, int]] | tuple[()]:
        """The step's drafts verified and accepted per request (speculative decoding only)."""
        if not self.scheduler.spec_k:
            return ()
        return {r.req_id: d for r, d, _a in plan.spec}, {r.req_id: a for r, _d, a in plan.spec}

    def _finished_event(self, r: Request, t_end: float) -> RequestFinished:
        return RequestFinished(
            t_end, r.req_id, self.name, OUTCOMES[r.outcome], r.num_output, t_end - r.arrival
        )

    # ------------------------------------------------------------------ clusters
    def submit(self, r: Request, t: float) -> None:
        """Route ``r`` here at time ``t`` (cluster mode): a new request, or one moved from a lost
        replica (status PREEMPTED, its outputs kept, ``external_tokens`` of migrated KV)."""
        sched = self.scheduler
        if not sched.running and not len(sched.waiting) and t > self.now:
            self.now = t
        self.kv.init_request(r)
        if r.status == WAITING and r.prompt_len >= self.max_model_len:
            r.status = REJECTED
            r.outcome = OUTCOME_REJECTED_TOO_LONG
            r.finish_time = t
            self._close(r)
            if self.emit is not None:
                self.emit(RequestRejected(t, r.req_id, self.name, "prompt_too_long"))
            return
        self.live[r.idx] = r
        sched.waiting.add(r)  # appended: to this replica it is a new arrival
        if self.config.queue_timeout_s is not None and r.status == WAITING:
            self._timeouts.append(r)

    def abort(self, r: Request, t: float) -> bool:
        """Finish ``r`` as aborted at ``t``: its client went away (``Scheduler.finish_requests``,
        vLLM's ``finish_requests(..., FINISHED_ABORTED)``). It leaves the running list or its queue
        and its KV blocks go back to the pool (hashed ones stay in the prefix cache, as for a
        finished request). Call between steps, never while a step that schedules ``r`` is in
        flight. False if ``r`` is not live here (already finished, or never here)."""
        if self.live.get(r.idx) is not r:
            return False
        self.scheduler.finish_requests([r], OUTCOME_ABORTED, self.step, t)
        self._close(r)
        if self.emit is not None:
            self.emit(RequestFinished(t, r.req_id, self.name, "aborted", r.num_output, t - r.arrival))
        if self.check_invariants:
            self.assert_invariants()
        return True

    def computed_tokens(self, r: Request) -> int:
        """Tokens of ``r`` whose KV is on this replica now (exact for decode-group members too)."""
        if r.sync_step >= 0:
            return r.num_computed + (self.step - r.sync_step)
        return r.num_computed

    def evict_all(self) -> list[tuple[Request, int]]:
        """The replica is lost: take every request off it (running first, then waiting), as of
        the last completed step; a step in flight is lost with the replica. Returns each request
        with the KV tokens it had here (0 if it was waiting); requests keep their outputs, and a
        running one becomes PREEMPTED with ``lost_tokens`` = that KV."""
        sched = self.scheduler
        if sched.group is not None:
            sched.materialize_all(self.step, self.now)
            limbo = sched.group.limbo  # blocks popped for the step in flight
            if limbo:
                self.pool.free(list(limbo), 0, 0)
                limbo.clear()
        out: list[tuple[Request, int]] = []
        for r in list(sched.running):
            computed = r.num_computed
            self.kv.free(r)
            r.lost_tokens = computed
            r.num_computed = 0
            r.status = PREEMPTED
            out.append((r, computed))
        sched.running.clear()
        sched.explicit = []
        while len(sched.waiting):
            out.append((sched.waiting.pop(), 0))
        for r, _ in out:
            self.rec.flush_tokens(r)
            r.segments = []
            if r.last_token >= 0:
                r.moved_token_time = r.last_token
            self.live.pop(r.idx, None)
        self._timeouts.clear()
        return out

    def _close(self, r: Request) -> None:
        self.live.pop(r.idx, None)
        self.rec.close_request(r)
        self.num_closed += 1

    def finish(self) -> None:
        """Close the run: every request gets an outcome, then the final conservation checks."""
        sched = self.scheduler
        if sched.group is not None and sched.group.n:
            sched.materialize_all(self.step, self.now)
        for r in list(self.live.values()):  # only if the loop was cut short
            r.outcome = OUTCOME_UNFINISHED
            self._close(r)
        if isinstance(self.kv_connector, PDConnector):
            self.kv_connector.drain(self.now)  # sends the idle engine never stepped for
        self.assert_invariants(final=True)

    # ------------------------------------------------------------------ invariants
    def assert_invariants(self, final: bool = False) -> None:
        """Conservation checks (see docs/invariants.md); cheap enough to run every step in tests."""
        sched = self.scheduler
        group = sched.group
        held: dict[int, int] = {}
        bs = self.kv.block_size
        seqs = [r.admit_seq for r in sched.running]
        if not (seqs == sorted(set(seqs))):
            raise InternalError("running list out of admission order")
        for r in sched.running:
            if not (r.status == RUNNING):
                raise InternalError(f"{r.req_id} in running with status {r.status}")
            if not (r.num_output >= 0 and r.num_computed >= 0):
                raise InternalError(f"{r.req_id} has a negative count")
            if not (r.num_live_blocks <= r.num_cached_blocks <= len(r.blocks)):
                raise InternalError(
                    "invariant broken: r.num_live_blocks <= r.num_cached_blocks <= len(r.blocks)"
                )
            for b in r.blocks:
                held[b] = held.get(b, 0) + 1
            if r.sync_step < 0:
                if not (r.num_computed <= r.prompt_len + r.num_output):
                    raise InternalError(f"{r.req_id} computed past its tokens")
                if not (len(r.blocks) * bs >= r.num_computed):
                    raise InternalError(f"{r.req_id} lacks blocks")
                if not (
                    r.num_cached_blocks == min(r.num_computed, r.prompt_len + r.num_output) // bs
                    or (not self.kv.caching and r.num_cached_blocks == 0)
                ):
                    raise InternalError(f"{r.req_id}: hashed blocks out of step with computed tokens")
        for b in group.limbo if group is not None else ():
            held[b] = held.get(b, 0) + 1
        for r in sched.waiting:
            if r.blocks:
                raise InternalError(f"waiting request {r.req_id} holds blocks")
        if self.kv_connector is not None:
            for r in self.kv_connector.holding:
                if not r.blocks:
                    raise InternalError(f"KV-holding request {r.req_id} holds no blocks")
                for b in r.blocks:
                    held[b] = held.get(b, 0) + 1
            if isinstance(self.kv_connector, PDConnector):
                for blocks in self.kv_connector.kept_blocks():  # prefill legs awaiting their send
                    for b in blocks:
                        held[b] = held.get(b, 0) + 1
        self.pool.check(held)
        if final:
            if not (not sched.running and not len(sched.waiting)):
                raise InternalError("requests left in the engine")
            if held:
                raise InternalError("blocks still held at the end")
            if not (self.pool.num_free == self.pool.usable_blocks):
                raise InternalError("KV blocks not returned to the pool")
            if self.external_arrivals:
                return  # a cluster replica sees only some requests; the cluster checks them all
            outcomes = self.rec.outcome
            for i in range(self.trace.n):
                if not (outcomes[i] != OUTCOME_UNFINISHED):
                    raise InternalError(f"request {self.trace.req_id[i]} has no outcome")


def _admit_seq(r: Request) -> int:
    return r.admit_seq


__all__ = ["Engine", "EngineStallError", "StepLogSink"]
