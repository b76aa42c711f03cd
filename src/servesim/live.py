"""A run you can drive: advance a simulation step by step or by simulated time, look at it, finish it.

Interfaces (the terminal dashboard, the web workbench) need the batch *while* it runs, not a
recording. ``LiveRun`` wraps one replica's ``Engine`` and ``LiveClusterRun`` a ``ClusterSimulator``;
both advance with the very loops ``simulate()`` and ``simulate_cluster()`` run, so pausing and
resuming anywhere changes nothing: ``finish()`` returns exactly the result of the batch call on the
same inputs (tests/live check the summary JSON and the per-request frame).

``snapshot()`` reads the state between steps, exact for requests in the fast path's decode group
(their counters are brought up to date on the fly, never by changing engine state): the running
batch with each request's phase and progress, the waiting queue in scheduling order, KV usage,
prefix-cache hit rate, rolling TTFT/TPOT percentiles over the last ``window_s`` simulated seconds
and token throughput. ``events()`` returns the ``servesim.events`` since the previous call
(preemptions, STARVED flags, rejections, node losses and recoveries, each recovery decision),
read from the engines' own records at no cost to the engine; ``observers`` get the full stream.
"""

from __future__ import annotations

import gc
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from servesim.cluster import (
    ClusterResult,
    ClusterSimulator,
    FailureEvent,
    KVCheckpointing,
    RecoveryContext,
    RecoveryPolicy,
    Replica,
    RouterSpec,
    build_cluster_result,
    cluster_simulator,
)
from servesim.cluster.pd import REJECTED, SERVED, PDCluster
from servesim.cluster.pd_results import LEGS, PDResult, pd_result
from servesim.engine import SLO, EngineConfig, LinearStepTime, SimulationResult, StepTimeModel
from servesim.engine.engine import Engine
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS, OffloadingConnector
from servesim.engine.kv_pd import PDConnector
from servesim.engine.replica import CpuTierState, ReplicaView
from servesim.engine.request import (
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOMES,
    Request,
)
from servesim.engine.simulate import build_result, describe_model
from servesim.errors import InputError, shown
from servesim.events import (
    Event,
    LegRecovered,
    Observer,
    Progress,
    RecoveryDecision,
    RejectReason,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
    RequestPreempted,
    RequestRejected,
    RequestStarved,
)
from servesim.resched import InterruptedRequest, RescheduleInput, ReschedulePlan, reschedule
from servesim.traces.schema import Trace

Phase = Literal["prefill", "decode"]
WAITING_SHOWN = 256  # waiting requests listed in a snapshot (the count is always exact)


@dataclass(frozen=True, slots=True)
class Slot:
    """One request as a live view shows it (running, or waiting in the queue).

    ``phase`` is prefill while more than one token is left to compute (a first prefill or the
    recompute after a preemption), decode otherwise. ``chunk``/``chunks`` number the prefill
    chunks at the per-step cap (``max_num_batched_tokens``, or ``long_prefill_token_threshold``
    when set): chunk ``chunk`` of ``chunks`` is the one the next step computes."""

    req_id: str
    replica: str | None
    phase: Phase
    computed_tokens: int
    prompt_len: int
    num_output: int
    max_tokens: int
    context_len: int
    priority: int
    tenant: str | None
    num_preemptions: int
    starved: bool
    arrival_s: float
    first_token_s: float | None
    chunk: int
    chunks: int
    moved: bool = False  # taken off a lost replica at least once
    waiting_for_kv: bool = False  # P/D: its blocks allocated, its KV being pulled (WAITING_FOR_REMOTE_KVS)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica between steps."""

    name: str
    alive: bool
    accepting: bool
    step: int
    time_s: float
    max_num_seqs: int
    running: tuple[Slot, ...]
    waiting: tuple[Slot, ...]  # the first WAITING_SHOWN, in scheduling order
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_usable: int
    prefix_hit_rate: float | None
    num_preemptions: int
    cpu_tier: CpuTierState | None = None  # vLLM's CPU offload tier (None: the replica has none)
    role: str | None = None  # prefill/decode disaggregation: its pool, "prefill" or "decode"
    kv_wait: int = 0  # decode legs holding blocks here, waiting for their KV (WAITING_FOR_REMOTE_KVS)
    # vLLM's KV-holding queue (requests with blocks, not running; admitted before ``waiting``):
    # the first WAITING_SHOWN, in order, and how many
    holding: tuple[Slot, ...] = ()
    num_holding: int = 0

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_usable if self.kv_blocks_usable else 0.0

    @property
    def label(self) -> str:
        """The name, with the pool of a disaggregated replica: ``p0 (prefill)``, ``d1 (decode)``."""
        return f"{self.name} ({self.role})" if self.role else self.name


@dataclass(frozen=True, slots=True)
class LegFigures:
    """One leg of a disaggregated run over its requests finished so far: mean and p99 (ms)."""

    leg: str  # one of ``servesim.cluster.pd_results.LEGS``
    mean_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class PDState:
    """What a prefill/decode-disaggregated run adds to a snapshot: the KV transfers so far and
    each leg's share of the time of the requests finished so far (``pd_result``'s figures, which
    they equal once the run is done)."""

    link: str | None  # the link preset's name (None: a link given as a cost model)
    short_prompt_tokens: int
    waiting_for_kv: int  # decode legs with their blocks allocated, waiting for the KV to land
    transfers_queued: int  # pulls issued, queued behind other transfers on a link
    transfers_in_flight: int  # on the wire now
    transfers_landed: int
    transfers_cut: int  # cut off by a lost replica
    kv_moved_gb: float  # KV landed so far, all TP ranks together
    link_wait_mean_ms: float | None  # queueing for the links, over the transfers started so far
    link_wait_p99_ms: float | None
    num_disaggregated: int  # finished requests the legs are over
    num_local: int  # finished short prompts (prefilled on their decode replica)
    legs: tuple[LegFigures, ...]  # empty before the first disaggregated request finished


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run between steps: every replica, and the figures so far.

    ``ttft_*``/``tpot_*`` are percentiles (ms) over requests whose first token (TTFT) or finish
    (TPOT) fell in the last ``window_s`` simulated seconds; None before there is one. Throughputs
    are over the same window."""

    time_s: float
    step: int
    num_requests: int
    num_arrived: int
    num_closed: int
    num_finished: int
    done: bool
    replicas: tuple[ReplicaState, ...]
    window_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    output_tokens_per_s: float
    total_tokens_per_s: float
    num_parked: int = 0
    pd: PDState | None = None  # a prefill/decode-disaggregated run's transfers and legs

    @property
    def running(self) -> tuple[Slot, ...]:
        return tuple(s for r in self.replicas for s in r.running)

    @property
    def waiting(self) -> tuple[Slot, ...]:
        return tuple(s for r in self.replicas for s in r.waiting)

    @property
    def num_running(self) -> int:
        return sum(len(r.running) for r in self.replicas)

    @property
    def num_waiting(self) -> int:
        return sum(r.num_waiting for r in self.replicas)

    @property
    def kv_blocks_used(self) -> int:
        return sum(r.kv_blocks_used for r in self.replicas if r.alive)

    @property
    def kv_blocks_usable(self) -> int:
        return sum(r.kv_blocks_usable for r in self.replicas if r.alive)

    @property
    def prefix_hit_rate(self) -> float | None:
        rates = [r.prefix_hit_rate for r in self.replicas if r.prefix_hit_rate is not None]
        return sum(rates) / len(rates) if rates else None


@dataclass(frozen=True, slots=True)
class RequestTimeline:
    """One request's story so far: where it is now and what happened to it, in time order."""

    req_id: str
    state: str  # not arrived | waiting | running | finished | rejected ... (its outcome once closed)
    replica: str | None
    prompt_len: int
    max_tokens: int
    priority: int
    tenant: str | None
    slot: Slot | None  # its live figures while running or waiting
    events: tuple[tuple[float, str], ...]


@dataclass
class _Cursor:
    """How much of each engine's records ``notices()`` already reported."""

    preemptions: int = 0
    starvations: int = 0


@dataclass
class _Watch:
    cursors: dict[int, _Cursor] = field(default_factory=dict)  # id(replica view) -> cursor
    rejected: np.ndarray | None = None  # requests whose rejection was reported
    moves: int = 0
    nodes: int = 0
    preemptions: dict[int, int] = field(default_factory=dict)  # trace position -> preemptions so far


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic collector paused while the engine runs, as ``Engine.run`` does (the engine makes
    no cycles; collections triggered by its many small objects would cost as much as the run)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_ORDER = {ReplicaWarning: 0, ReplicaDown: 1, RecoveryDecision: 2, RequestPreempted: 3, RequestStarved: 4}


def _event_order(e: Event) -> tuple[float, int]:
    return (e.time_s, _ORDER.get(type(e), 5))  # type: ignore[union-attr]


class _Base:
    """What a single-replica and a cluster run share: advancing, snapshots and events."""

    def speculation_totals(self) -> tuple[int, int] | None:
        """Speculative decoding so far: (drafts accepted, verifications) over every engine, as
        vLLM's spec-decode counters; None when the run does not speculate."""
        counters = [e.speculation for e in self._engines()]
        if not any(k for k, _, _ in counters):
            return None
        return sum(a for _, a, _ in counters), sum(v for _, _, v in counters)

    def advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (fewer only when the run ends); returns how many ran."""
        with _gc_paused():
            return self._advance_steps(n)

    def advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Advance to ``t_s`` (or by about ``max_steps`` steps); returns the steps run."""
        with _gc_paused():
            return self._advance_until(t_s, max_steps)

    def _advance_steps(self, n: int) -> int:
        raise NotImplementedError

    def _advance_until(self, t_s: float, max_steps: int) -> int:
        raise NotImplementedError

    trace: Trace
    window_s: float
    _tenant: list[str | None]
    _arrival: np.ndarray
    _watch: _Watch

    def _setup(self, trace: Trace, window_s: float) -> None:
        if not window_s > 0:
            raise InputError(f"window_s must be > 0, got {window_s!r}")
        self.trace = trace
        self.window_s = window_s
        self._tenant = [None if t is None or t != t else str(t) for t in trace.df["tenant"].tolist()]
        self._arrival = np.asarray(trace.df["arrival_time_s"], dtype=np.float64)
        self._watch = _Watch()
        self._held: set[int] = set()  # trace positions of requests ever preempted or moved
        self._moved: set[int] = set()  # of those, the moved ones
        self._held_seen: dict[int, int] = {}  # id(replica view) -> preemption events already read

    # ------------------------------------------------------------------ to override
    def _engines(self) -> list[ReplicaView]:
        """A read-only view of every engine incarnation, in creation order (one object each)."""
        raise NotImplementedError

    def _replicas(self) -> list[tuple[str | None, ReplicaView, bool, bool]]:
        """(name, current engine's view, alive, accepting) per replica."""
        raise NotImplementedError

    @property
    def now(self) -> float:
        raise NotImplementedError

    def _output_engines(self) -> set[int] | None:
        """ids of the engines whose requests are the clients' (latencies, outputs, outcomes);
        None: every engine's."""
        return None

    def _closed_elsewhere(self) -> int:
        """Requests closed without an outcome on an output engine (none but in P/D)."""
        return 0

    # ------------------------------------------------------------------ views
    def _slot(self, engine: ReplicaView, r: Request, name: str | None) -> Slot:
        computed = engine.computed_tokens(r)
        outputs = engine.outputs(r)
        left = r.prompt_len + outputs - computed
        cfg = engine.config
        cap = cfg.max_num_batched_tokens
        if cfg.long_prefill_token_threshold:
            cap = min(cap, cfg.long_prefill_token_threshold)
        if not cfg.enable_chunked_prefill:
            cap = max(cap, r.prompt_len + outputs)
        prefill = left > 1
        total = computed + left if prefill else 0
        chunks = -(-total // cap) if prefill else 0
        chunk = min(computed // cap + 1, chunks) if prefill else 0
        return Slot(
            r.req_id,
            name,
            "prefill" if prefill else "decode",
            computed,
            r.prompt_len,
            outputs,
            r.max_tokens,
            r.prompt_len + outputs,
            r.priority,
            self._tenant[r.idx],
            r.num_preemptions,
            r.starved,
            r.arrival,
            r.first_token if r.first_token >= 0 else None,
            chunk,
            chunks,
            r.idx in self._moved,
        )

    def _replica_state(
        self, name: str | None, engine: ReplicaView, alive: bool, accepting: bool, waiting_shown: int
    ) -> ReplicaState:
        if alive:
            running = tuple(self._slot(engine, r, name) for r in engine.running())
            waiting = tuple(self._slot(engine, r, name) for r in engine.waiting(waiting_shown))
            num_waiting = engine.num_waiting
            used = engine.kv_blocks_used
        else:
            running, waiting, num_waiting, used = (), (), 0, 0
        return ReplicaState(
            name or "replica",
            alive,
            accepting,
            engine.step,
            engine.now,
            engine.max_num_seqs,
            running,
            waiting,
            num_waiting,
            used,
            engine.kv_blocks_usable,
            engine.prefix_hit_rate,
            engine.num_preemptions,
            engine.cpu_tier if alive else None,
        )

    def _figures(self, now: float) -> tuple[list[float | None], float, float, int, int]:
        """Rolling TTFT/TPOT percentiles, output and total tokens/s over the window, closed and
        finished counts."""
        lo = now - self.window_s
        arrival = self._arrival
        ttft_parts, tpot_parts = [], []
        out_tokens = closed = finished_n = 0
        step_tokens = 0.0
        live_ttft: list[float] = []
        outs = self._output_engines()
        for engine in self._engines():
            rec = engine.records
            # Tokens of the steps that ended in the window (the step table: exact, cheap).
            ends = np.frombuffer(rec.step_end, dtype=np.float64)
            k0 = int(np.searchsorted(ends, lo, side="right"))
            if k0 < len(ends):
                step_tokens += float(rec.step_table()["num_tokens"][k0:].sum(dtype=np.int64))
            if outs is not None and id(engine) not in outs:
                continue  # a prefill leg: its one token is not the client's
            self._note_held(engine)
            first = np.frombuffer(rec.first_token, dtype=np.float64)
            fin = np.frombuffer(rec.finish, dtype=np.float64)
            nout = np.frombuffer(rec.num_output, dtype=np.int64)
            code = np.frombuffer(rec.outcome, dtype=np.int64)
            sel = first >= lo  # NaN compares False
            ttft_parts.append((first[sel] - arrival[sel]) * 1e3)
            ok = (code == OUTCOME_FINISHED) | (code == OUTCOME_LENGTH_CAPPED)
            done = ok & (fin >= lo) & (nout > 1)
            tpot_parts.append((fin[done] - first[done]) / (nout[done] - 1) * 1e3)
            finished_n += int(np.count_nonzero(ok))
            closed += engine.num_closed
            out_tokens += int(nout.sum())
        closed += self._closed_elsewhere()
        for engine, r in self._open_requests():
            if r.first_token >= lo:
                live_ttft.append((r.first_token - r.arrival) * 1e3)
            out_tokens += engine.outputs(r)
        ttft_parts.append(np.asarray(live_ttft, dtype=np.float64))
        ttft = np.concatenate(ttft_parts)
        tpot = np.concatenate(tpot_parts) if tpot_parts else np.empty(0)

        def pct(a: np.ndarray, q: float) -> float | None:
            return float(np.percentile(a, q)) if len(a) else None

        span = min(self.window_s, now) if now > 0 else 0.0
        return (
            [pct(ttft, 50), pct(ttft, 99), pct(tpot, 50), pct(tpot, 99)],
            self._output_rate(now, out_tokens),
            step_tokens / span if span > 0 else 0.0,
            closed,
            finished_n,
        )

    def _note_held(self, engine: ReplicaView) -> None:
        """Remember requests that hold outputs while not running (preempted ones)."""
        n = self._held_seen.get(id(engine), 0)
        events = engine.records.preemption_events
        for e in events[n:]:
            self._held.add(e[2])
        self._held_seen[id(engine)] = len(events)

    def _open_requests(self) -> list[tuple[ReplicaView, Request]]:
        """Requests not closed that may hold outputs: the running ones, and preempted or moved
        ones waiting (each once, with the engine it is on)."""
        out: list[tuple[ReplicaView, Request]] = []
        seen: set[int] = set()
        outs = self._output_engines()
        for _name, engine, alive, _acc in self._replicas():
            if not alive or (outs is not None and id(engine) not in outs):
                continue
            for r in engine.running():
                out.append((engine, r))
                seen.add(r.idx)
            for i in self._held:
                r2 = engine.request(i)
                if r2 is not None and i not in seen:
                    out.append((engine, r2))
                    seen.add(i)
        closed = [
            i for i in self._held if i not in seen and any(e.records.outcome[i] for e in self._engines())
        ]
        self._held.difference_update(closed)  # closed for good: its outputs are in the records now
        return out

    _samples: list[tuple[float, int]]

    def _output_rate(self, now: float, outputs: int) -> float:
        """Output tokens/s over the window, from the totals seen at earlier snapshots."""
        samples = self._samples
        if not samples or now > samples[-1][0]:
            samples.append((now, outputs))
        lo = now - self.window_s
        while len(samples) > 2 and samples[1][0] <= lo:
            samples.pop(0)
        t0, o0 = samples[0]
        return (outputs - o0) / (now - t0) if now > t0 else 0.0

    def _snapshot(
        self, step: int, num_arrived: int, done: bool, parked: int, waiting_shown: int
    ) -> RunSnapshot:
        now = self.now
        lat, out_rate, total_rate, closed, finished = self._figures(now)  # notes moved requests first
        reps = tuple(
            self._replica_state(name, e, alive, acc, waiting_shown)
            for name, e, alive, acc in self._replicas()
        )
        return RunSnapshot(
            now,
            step,
            len(self.trace),
            num_arrived,
            closed,
            finished,
            done,
            reps,
            self.window_s,
            lat[0],
            lat[1],
            lat[2],
            lat[3],
            out_rate,
            total_rate,
            parked,
        )

    def _engine_events(self) -> list[Event]:
        """Preemptions, STARVED flags and rejections since the last call, from the records."""
        out: list[Event] = []
        if self._watch.rejected is None:
            self._ids = self.trace.df["req_id"].astype(str).tolist()
            self._watch.rejected = np.zeros(len(self.trace), dtype=bool)
        rejected = self._watch.rejected
        names = {id(e): name for name, e, _a, _c in self._replicas()}
        preempted: list[tuple[float, int, str | None, int]] = []
        for engine in self._engines():
            cur = self._watch.cursors.setdefault(id(engine), _Cursor())
            rec = engine.records
            name = names.get(id(engine)) or self._engine_name(engine)
            for t, _step, i, lost in rec.preemption_events[cur.preemptions :]:
                preempted.append((t, i, name, lost))
            cur.preemptions = len(rec.preemption_events)
            for t, _step, i, _lost in rec.starvation_events[cur.starvations :]:
                out.append(RequestStarved(t, self._ids[i], name, engine.starvation_threshold))
            cur.starvations = len(rec.starvation_events)
            code = np.frombuffer(rec.outcome, dtype=np.int64)
            new = np.flatnonzero((code >= OUTCOME_REJECTED_TOO_LONG) & ~rejected)
            if len(new):
                rejected[new] = True
                fin = np.frombuffer(rec.finish, dtype=np.float64)
                for i in new.tolist():
                    why: RejectReason = (
                        "queue_timeout" if code[i] == OUTCOME_REJECTED_TIMEOUT else "prompt_too_long"
                    )
                    out.append(RequestRejected(float(fin[i]), self._ids[i], name, why))
        counts = self._watch.preemptions
        for t, i, name, lost in sorted(preempted, key=lambda e: e[0]):
            counts[i] = counts.get(i, 0) + 1
            out.append(RequestPreempted(t, self._ids[i], name, lost, counts[i]))
        return out

    _ids: list[str]

    def _moves(self) -> list[tuple[float, str, str]]:
        """(time, req_id, text) of every recovery move so far (none on one replica)."""
        return []

    def timeline(self, req_id: str) -> RequestTimeline:
        """What happened to ``req_id`` so far (for a request-detail view)."""
        ids = self.trace.df["req_id"].astype(str).tolist()
        try:
            i = ids.index(req_id)
        except ValueError:
            raise InputError(f"no request {shown(req_id)} in the trace") from None
        row = self.trace.df.iloc[i]
        ev: list[tuple[float, str]] = [(float(row["arrival_time_s"]), "arrived")]
        state, where, slot = "not arrived", None, None
        names = {id(e): name for name, e, _a, _c in self._replicas()}
        for engine in self._engines():
            rec = engine.records
            name = names.get(id(engine)) or self._engine_name(engine)
            for t, _step, j, lost in rec.preemption_events:
                if j == i:
                    ev.append((t, f"preempted on {name or 'the replica'} ({lost:,} tokens of KV lost)"))
            for t, _step, j, _lost in rec.starvation_events:
                if j == i:
                    ev.append((t, "flagged STARVED"))
            if rec.outcome[i]:
                state, where = OUTCOMES[rec.outcome[i]], name
                if rec.first_scheduled[i] == rec.first_scheduled[i]:
                    ev.append((rec.first_scheduled[i], "first scheduled"))
                if rec.first_token[i] == rec.first_token[i]:
                    ev.append((rec.first_token[i], "first token"))
                if rec.finish[i] == rec.finish[i]:
                    ev.append((rec.finish[i], f"{state} with {rec.num_output[i]:,} tokens"))
            r = engine.request(i)
            if r is not None and id(engine) in names:  # on a current engine (evicted ones keep none)
                state = "running" if engine.is_running(r) else "waiting"
                where, slot = name, self._slot(engine, r, name)
                if r.first_scheduled >= 0:
                    ev.append((r.first_scheduled, "first scheduled"))
                if r.first_token >= 0:
                    ev.append((r.first_token, "first token"))
        if state == "not arrived" and i < self._num_arrived():
            state = "in transit"
        for t, rid, text in self._moves():
            if rid == req_id:
                ev.append((t, text))
        return RequestTimeline(
            req_id,
            state,
            where,
            int(row["prompt_len"]),
            int(row["output_len"]),
            int(row["priority"]),
            self._tenant[i],
            slot,
            tuple(sorted(set(ev))),
        )

    def _engine_name(self, engine: ReplicaView) -> str | None:
        return None

    def _num_arrived(self) -> int:
        raise NotImplementedError


class LiveRun(_Base):
    """One replica you advance yourself; ``finish()`` equals ``simulate()`` on the same inputs."""

    def __init__(
        self,
        trace: Trace,
        config: EngineConfig | None = None,
        step_time: StepTimeModel | None = None,
        *,
        slo: SLO | None = None,
        observers: Sequence[Observer] = (),
        window_s: float = 30.0,
        kv_connector: OffloadingConnector | None = None,
    ) -> None:
        self._setup(trace, window_s)
        self.config = config or EngineConfig()
        self.step_time = step_time or LinearStepTime()
        self.slo = slo
        self.engine = Engine(
            trace, self.config, self.step_time, observers=observers, kv_connector=kv_connector
        )
        self._view = ReplicaView(self.engine)
        self._samples = []
        self._result: SimulationResult | None = None

    @property
    def now(self) -> float:
        """Simulated time: the end of the latest step (or the arrival an idle engine jumped to)."""
        return self.engine.now

    @property
    def step(self) -> int:
        return self.engine.step

    @property
    def done(self) -> bool:
        """Every request has an outcome (nothing is left to run)."""
        return self.engine.num_closed == self.engine.trace.n

    def _engines(self) -> list[ReplicaView]:
        return [self._view]

    def _replicas(self) -> list[tuple[str | None, ReplicaView, bool, bool]]:
        return [(None, self._view, True, True)]

    def _advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (fewer only when the run ends); returns how many ran.

        Multi-step decode stretches are switched off meanwhile, so that each one is one step;
        results are the same either way (the fast-path tests prove it)."""
        self._check_open()
        engine = self.engine
        stretch, engine.stretch = engine.stretch, False
        try:
            done = 0
            while done < n:
                pending = engine.begin_step()
                if pending is None:
                    break
                engine.end_step(pending)
                done += 1
        finally:
            engine.stretch = stretch
        return done

    def _advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Run every step that starts before ``t_s`` (or about ``max_steps`` of them: a decode
        stretch counts whole); returns the steps run."""
        self._check_open()
        engine = self.engine
        first = engine.step
        while engine.step - first < max_steps:
            pending = engine.begin_step(t_s)
            if pending is None:
                break
            engine.end_step(pending)
        return engine.step - first

    def snapshot(self, waiting_shown: int = WAITING_SHOWN) -> RunSnapshot:
        return self._snapshot(self.engine.step, self._num_arrived(), self.done, 0, waiting_shown)

    def _num_arrived(self) -> int:
        return self._view.num_arrived

    def events(self) -> list[Event]:
        """What happened since the previous call, in time order: the ``servesim.events`` a
        watcher needs (preemptions, STARVED flags, rejections), read from the engine's own
        records, so that watching costs the engine nothing (an observer of every event slows
        it about threefold; pass ``observers`` for the full stream)."""
        return sorted(self._engine_events(), key=_event_order)

    def finish(self) -> SimulationResult:
        """Run to the end and return the result ``simulate()`` gives for the same inputs."""
        if self._result is None:
            with _gc_paused():
                self._advance_until(math.inf)
            self.engine.finish()
            if self.engine.emit is not None:  # as Engine.run ends: the last progress
                self.engine.emit(Progress(self.engine.num_closed, self.engine.trace.n, self.now, self.step))
            self._result = build_result(self.engine, self.trace, self.slo, describe_model(self.step_time))
        return self._result

    def _check_open(self) -> None:
        if self._result is not None:
            raise InputError("this run is finished; start a new LiveRun to run again")


class LiveClusterRun(_Base):
    """A cluster you advance yourself (and fail nodes of); ``finish()`` equals ``simulate_cluster()``
    on the same inputs, with every injected failure among its failure events."""

    def __init__(
        self,
        trace: Trace,
        replicas: Sequence[Replica],
        router: RouterSpec | None = None,
        failures: Sequence[FailureEvent] = (),
        recovery: str | RecoveryPolicy = "planner",
        context: RecoveryContext | None = None,
        *,
        kv_checkpointing: KVCheckpointing = "continuous",
        slo: SLO | None = None,
        observers: Sequence[Observer] = (),
        window_s: float = 30.0,
    ) -> None:
        self._setup(trace, window_s)
        self.slo = slo
        # the policies' names the result records for its views (servesim.views.fleet)
        self._policies = (
            recovery if isinstance(recovery, str) else getattr(recovery, "__name__", None),
            router.policy if router is not None else RouterSpec().policy,
        )
        self.sim: ClusterSimulator = cluster_simulator(
            trace,
            replicas,
            router,
            failures,
            recovery,
            context,
            kv_checkpointing=kv_checkpointing,
            observers=observers,
        )
        self._samples = []
        self._clock = 0.0
        self._steps = 0
        self._moves_seen = 0
        self._index: dict[str, int] | None = None
        self._result: ClusterResult | None = None

    @property
    def now(self) -> float:
        """Simulated time: as far as the run was advanced."""
        return max(self._clock, self.sim.now)

    @property
    def step(self) -> int:
        """Engine steps ended so far, over all replicas."""
        return self._steps

    @property
    def replica_names(self) -> list[str]:
        return [r.name for r in self.sim.replicas]

    @property
    def done(self) -> bool:
        return self.sim.drained

    def _engines(self) -> list[ReplicaView]:
        return self.sim.engine_views

    def _replicas(self) -> list[tuple[str | None, ReplicaView, bool, bool]]:
        sim = self.sim
        return [
            (spec.name, sim.views[k], sim.alive[k], sim.accepting[k]) for k, spec in enumerate(sim.replicas)
        ]

    def _advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (on whichever replicas end one next); returns how many."""
        self._check_open()
        engines = self.sim.current
        saved = [e.stretch for e in engines]
        for e in engines:
            e.stretch = False
        try:
            done = self.sim.advance(math.inf, n) if n > 0 else 0
        finally:
            for e, s in zip(engines, saved, strict=True):
                e.stretch = s
            for e in self.sim.current[len(engines) :]:
                e.stretch = True
        self._steps += done
        self._clock = max(self._clock, self.sim.now)
        return done

    def _advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Process every step end and event before ``t_s`` (or ``max_steps`` step ends)."""
        self._check_open()
        done = self.sim.advance(t_s, max_steps)
        self._steps += done
        if done < max_steps and t_s != math.inf:
            self._clock = max(self._clock, t_s)
        self._clock = max(self._clock, self.sim.now)
        return done

    def _num_arrived(self) -> int:
        return self.sim.num_routed

    def _engine_name(self, engine: ReplicaView) -> str | None:
        k = self.sim.engine_replica[self.sim.engine_views.index(engine)]
        return self.sim.replicas[k].name

    def _moves(self) -> list[tuple[float, str, str]]:
        return [
            (
                m.time_s,
                m.req_id,
                f"{m.strategy} {m.from_node}->{m.to_node} ({m.recompute_tokens:,} to recompute)",
            )
            for m in self.sim.moves
        ]

    def _note_held(self, engine: ReplicaView) -> None:
        super()._note_held(engine)
        moves = self.sim.moves
        if len(moves) > self._moves_seen:
            if self._index is None:
                self._index = {rid: i for i, rid in enumerate(self.sim.arrays.req_id)}
            for m in moves[self._moves_seen :]:
                self._held.add(self._index[m.req_id])
                self._moved.add(self._index[m.req_id])
            self._moves_seen = len(moves)

    def recovery_queue(self, slo: SLO | None = None) -> ReschedulePlan | None:
        """The requests the latest node loss interrupted, in the rescheduler's SLA-aware
        re-admission order with each one's projected completion and SLA verdict (None before
        any loss). Budgets: the request's own ``sla_e2e_ms``, else the SLO's ``e2e_ms``, less
        the time since it arrived; without either the verdicts are not meaningful (``slo`` unset
        and no trace SLAs: budgets are effectively unbounded)."""
        jobs = self.sim.interrupted
        if not jobs:
            return None
        t = jobs[-1].time_s
        node = jobs[-1].node
        batch = [j for j in jobs if j.time_s == t and j.node == node]
        goal = slo or self.slo
        sla = self.trace.df["sla_e2e_ms"].to_numpy(dtype=np.float64)
        reqs = []
        for j in batch:
            r = j.request
            budget = (
                sla[r.idx] if sla[r.idx] == sla[r.idx] else (goal.e2e_ms if goal and goal.e2e_ms else 1e12)
            )
            budget = max(0.0, budget - (t - r.arrival) * 1e3)
            reqs.append(
                InterruptedRequest(
                    req_id=r.req_id,
                    tokens_processed=j.computed_tokens,
                    tokens_remaining=max(1, r.max_tokens - r.num_output),
                    sla_budget_ms=budget,
                    priority=r.priority,
                    prompt_len=r.prompt_len,
                    preemptions=r.num_preemptions,
                    waited_ms=0.0,
                )
            )
        names = self.replica_names
        survivors = [k for k in range(len(names)) if self.sim.alive[k] and names[k] != node] or [0]
        spec = self.sim.replicas[survivors[0]]
        cfg = spec.config
        inp = RescheduleInput(
            batch_capacity=cfg.max_num_seqs,
            interrupted_requests=reqs,
            block_size=cfg.block_size,
            cache_survives=False,
            max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs),
        )
        return reschedule(inp, step_time=spec.step_time)

    def inject_failure(self, replica: str, recover_after_s: float | None = None) -> FailureEvent:
        """Fail ``replica`` now (its jobs go to the recovery policy), back after ``recover_after_s``."""
        self._check_open()
        return self.sim.inject_failure(replica, self.now, recover_after_s)

    def snapshot(self, waiting_shown: int = WAITING_SHOWN) -> RunSnapshot:
        return self._snapshot(self._steps, self.sim.num_routed, self.done, self.sim.num_parked, waiting_shown)

    def events(self) -> list[Event]:
        """What happened since the previous call, in time order (as ``LiveRun.events``), plus the
        cluster's: warnings, node losses and recoveries, each recovery decision."""
        out = self._engine_events()
        sim = self.sim
        watch = self._watch
        for t, kind, node, taken in sim.node_events[watch.nodes :]:
            if kind == "fail":
                out.append(ReplicaDown(t, node, taken))
            elif kind == "recover":
                out.append(ReplicaUp(t, node))
            else:
                out.append(ReplicaWarning(t, node))
        watch.nodes = len(sim.node_events)
        for m in sim.moves[watch.moves :]:
            out.append(
                RecoveryDecision(
                    m.time_s,
                    m.req_id,
                    m.from_node,
                    m.to_node,
                    m.strategy,
                    m.tokens_moved,
                    m.recompute_tokens,
                    m.delay_s,
                )
            )
        watch.moves = len(sim.moves)
        return sorted(out, key=_event_order)

    def finish(self) -> ClusterResult:
        """Run to the end and return the result ``simulate_cluster()`` gives for the same inputs."""
        if self._result is None:
            with _gc_paused():
                self._advance_until(math.inf)
            self._result = build_cluster_result(
                self.sim.close(), self.slo, recovery=self._policies[0], router=self._policies[1]
            )
        return self._result

    def _check_open(self) -> None:
        if self._result is not None:
            raise InputError("this run is finished; start a new LiveClusterRun to run again")


class LivePDRun(_Base):
    """A prefill/decode-disaggregated cluster (``servesim.cluster.pd.PDCluster``) you advance
    yourself; ``finish()`` returns the ``PDResult`` its one-go ``run()`` gives (``pd_result``) on
    the same inputs. Replicas are named as the pools name them (p0.., d0..), each snapshot's
    ``ReplicaState.role`` says which, and ``RunSnapshot.pd`` has the transfers and the legs.
    TTFT/TPOT and outputs are the decode legs' (a prefill leg's one token is not the client's)."""

    def __init__(
        self,
        trace: Trace,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        link: RecoveryContext,
        *,
        short_prompt_tokens: int = 0,
        failures: Sequence[FailureEvent] = (),
        link_name: str | None = None,
        slo: SLO | None = None,
        window_s: float = 30.0,
    ) -> None:
        self._setup(trace, window_s)
        self.slo = slo
        self.link_name = link_name
        self.sim = PDCluster(
            trace, prefill, decode, link, short_prompt_tokens=short_prompt_tokens, failures=failures
        )
        self._bytes_per_token = link.bytes_total(1)
        self._samples = []
        self._clock = 0.0
        self._steps = 0
        self._done = False
        # Every engine incarnation (a lost replica's engine stays, its records count), in order.
        self._views: list[ReplicaView] = []
        self._engine_ids: dict[int, tuple[ReplicaView, str, str]] = {}  # id(engine) -> view, name, pool
        self._decode_ids: set[int] = set()  # ids of the decode engines' views
        self._register()
        # Legs of the finished requests, read once each (a finished leg never changes).
        self._counted = np.zeros(len(trace), dtype=bool)
        self._leg_values: dict[str, list[float]] = {leg: [] for leg in LEGS}
        self._num_local = 0
        self._events_seen = 0
        self._recoveries_seen = 0
        self._result: PDResult | None = None

    # ------------------------------------------------------------------ the engines
    def _register(self) -> None:
        sim = self.sim
        for pool, engines, views, specs in (
            ("prefill", sim.p_eng, sim.p_views, sim.p_specs),
            ("decode", sim.d_eng, sim.d_views, sim.d_specs),
        ):
            for e, v, spec in zip(engines, views, specs, strict=True):
                if id(e) not in self._engine_ids:
                    self._engine_ids[id(e)] = (v, spec.name, pool)
                    self._views.append(v)
                    if pool == "decode":
                        self._decode_ids.add(id(v))

    def _engines(self) -> list[ReplicaView]:
        self._register()
        return self._views

    def _output_engines(self) -> set[int] | None:
        self._register()
        return self._decode_ids

    def _closed_elsewhere(self) -> int:
        """Prefill legs the prefill replica refused (no decode leg ran: the client got the error)."""
        n = 0
        for v in self._views:
            if id(v) not in self._decode_ids:
                code = np.frombuffer(v.records.outcome, dtype=np.int64)
                n += int(
                    np.count_nonzero((code == OUTCOME_REJECTED_TOO_LONG) | (code == OUTCOME_REJECTED_TIMEOUT))
                )
        return n

    def _replicas(self) -> list[tuple[str | None, ReplicaView, bool, bool]]:
        sim = self.sim
        out: list[tuple[str | None, ReplicaView, bool, bool]] = []
        for k, spec in enumerate(sim.p_specs):
            out.append((spec.name, sim.p_views[k], sim.p_alive[k], sim.p_alive[k]))
        for k, spec in enumerate(sim.d_specs):
            out.append((spec.name, sim.d_views[k], sim.d_alive[k], sim.d_alive[k]))
        return out

    def _engine_name(self, engine: ReplicaView) -> str | None:
        for v, name, _pool in self._engine_ids.values():
            if v is engine:
                return name
        return None

    @property
    def replica_names(self) -> list[str]:
        return [s.name for s in self.sim.p_specs] + [s.name for s in self.sim.d_specs]

    @property
    def alive(self) -> list[bool]:
        return [*self.sim.p_alive, *self.sim.d_alive]

    @property
    def now(self) -> float:
        """Simulated time: as far as the run was advanced."""
        return max(self._clock, self.sim.now)

    @property
    def step(self) -> int:
        """Engine steps ended so far, over both pools."""
        return self._steps

    @property
    def done(self) -> bool:
        """Nothing is left to run (every request has an outcome, or is parked for good): known
        once an advance stops short of its step count (a step just ended has no next one begun)."""
        return self._done

    def _num_arrived(self) -> int:
        return len(self.sim.run_.decode_req)

    # ------------------------------------------------------------------ advancing
    def _advance(self, until: float, max_steps: int) -> int:
        self._check_open()
        if self._done:
            return 0
        done = self.sim.advance(until, max_steps)
        self._steps += done
        if done < max_steps:
            t = self.sim.next_time()
            # nothing is due, or only empty steps waiting on KV nobody reads (it stopped short)
            self._done = t == math.inf or t < until
        return done

    def _advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (on whichever replicas end one next); returns how many."""
        done = self._advance(math.inf, n) if n > 0 else 0
        self._clock = max(self._clock, self.sim.now)
        return done

    def _advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Process every step end, arrival and failure before ``t_s`` (or ``max_steps`` step ends)."""
        done = self._advance(t_s, max_steps)
        if done < max_steps and t_s != math.inf and not self._done:
            self._clock = max(self._clock, t_s)
        self._clock = max(self._clock, self.sim.now)
        return done

    # ------------------------------------------------------------------ views
    def snapshot(self, waiting_shown: int = WAITING_SHOWN) -> RunSnapshot:
        parked = len(self.sim.parked_requests)  # decode legs waiting for a decode replica to come back
        snap = self._snapshot(self._steps, self._num_arrived(), self.done, parked, waiting_shown)
        sim = self.sim
        pools = ["prefill"] * len(sim.p_specs) + ["decode"] * len(sim.d_specs)
        views = sim.p_views + sim.d_views
        reps = []
        for r, pool, view, e in zip(snap.replicas, pools, views, sim.p_eng + sim.d_eng, strict=True):
            conn = e.kv_connector
            queue = list(conn.holding) if r.alive and isinstance(conn, PDConnector) else []
            held = tuple(
                replace(self._slot(view, q, r.name), waiting_for_kv=q.status == WAITING_FOR_REMOTE_KVS)
                for q in queue[:waiting_shown]
            )
            kv_wait = sum(1 for q in queue if q.status == WAITING_FOR_REMOTE_KVS)
            reps.append(replace(r, role=pool, kv_wait=kv_wait, holding=held, num_holding=len(queue)))
        return replace(snap, replicas=tuple(reps), pd=self._pd_state(sum(r.kv_wait for r in reps)))

    def _pd_state(self, waiting_for_kv: int) -> PDState:
        now = self.now
        run = self.sim.run_
        queued = flying = landed = cut = tokens = 0
        waits: list[float] = []
        for x in run.legs:
            if not x.landed:
                cut += 1
            elif x.end_s <= now:
                landed += 1
                tokens += x.tokens
            elif x.start_s <= now:
                flying += 1
            else:
                queued += 1
            if x.start_s <= now:
                waits.append(x.start_s - x.ready_s)
        self._count_finished()
        legs = tuple(
            LegFigures(leg, float(np.mean(xs) * 1000.0), float(np.percentile(np.asarray(xs), 99) * 1000.0))
            for leg, xs in self._leg_values.items()
            if xs
        )
        return PDState(
            self.link_name,
            self.sim.short,
            waiting_for_kv,
            queued,
            flying,
            landed,
            cut,
            tokens * self._bytes_per_token / 1e9,
            float(np.mean(waits) * 1000.0) if waits else None,
            float(np.percentile(np.asarray(waits), 99) * 1000.0) if waits else None,
            len(self._leg_values[LEGS[0]]),
            self._num_local,
            legs,
        )

    def _count_finished(self) -> None:
        """Split the requests whose decode leg finished since the last call by leg (``pd_result``'s
        split, of those requests alone)."""
        fresh = np.zeros(len(self.trace), dtype=bool)
        for v in self._views:
            if id(v) in self._decode_ids:
                code = np.frombuffer(v.records.outcome, dtype=np.int64)
                fresh |= (code == OUTCOME_FINISHED) | (code == OUTCOME_LENGTH_CAPPED)
        new = np.flatnonzero(fresh & ~self._counted)
        if not len(new):
            return
        self._counted[new] = True
        run = self.sim.run_
        part = replace(run, decode_req={int(i): run.decode_req[int(i)] for i in new}, parked=[])
        for row in pd_result(part, self._bytes_per_token).requests:
            if row.prefill_replica is None:
                self._num_local += 1
                continue
            for leg in LEGS:
                self._leg_values[leg].append(getattr(row, f"{leg}_s"))

    def events(self) -> list[Event]:
        """What happened since the previous call, in time order: the engines' (as
        ``LiveRun.events``), replicas lost and back, and what became of each request a loss
        touched (``LegRecovered``)."""
        out = self._engine_events()
        sim = self.sim
        applied = sim.applied_events()  # the failures and comebacks applied so far, in order
        for t, kind, pool, k in applied[self._events_seen :]:
            name = (sim.p_specs if pool == "prefill" else sim.d_specs)[k].name
            if kind == "fail":
                taken = next((f.requests for f in sim.run_.failures if f.node == name and f.time_s == t), 0)
                out.append(ReplicaDown(t, name, taken))
            elif kind == "recover":
                out.append(ReplicaUp(t, name))
        self._events_seen = len(applied)
        recs = sim.run_.recoveries
        for r in recs[self._recoveries_seen :]:
            out.append(LegRecovered(r.time_s, r.req_id, r.node, r.action, r.target))
        self._recoveries_seen = len(recs)
        return sorted(out, key=_event_order)

    def timeline(self, req_id: str) -> RequestTimeline:
        """What happened to ``req_id`` so far, leg by leg: its prefill, its KV transfer(s), its decode."""
        ids = self.trace.df["req_id"].astype(str).tolist()
        try:
            i = ids.index(req_id)
        except ValueError:
            raise InputError(f"no request {shown(req_id)} in the trace") from None
        row = self.trace.df.iloc[i]
        now = self.now
        sim, run = self.sim, self.sim.run_
        ev: list[tuple[float, str]] = [(float(row["arrival_time_s"]), "arrived")]
        state, where, slot = "not arrived", None, None
        p = run.prefill_req.get(i)
        pk = run.prefill_of.get(i)
        if p is not None and pk is not None:
            pname = sim.p_specs[pk].name
            state, where = "prefilling", pname
            if p.first_scheduled >= 0:
                ev.append((p.first_scheduled, f"prefill scheduled on {pname}"))
            if p.finish_time >= 0 and p.outcome in SERVED:
                ev.append((p.finish_time, f"prefilled on {pname}: handed to a decode replica"))
                state = "decode queue"
            elif p.outcome in REJECTED:
                state = OUTCOMES[p.outcome]
                ev.append((p.finish_time, f"{state} on {pname}"))
            live = sim.p_views[pk].request(i) if sim.p_alive[pk] else None
            if live is not None:
                slot = self._slot(sim.p_views[pk], live, pname)
        for x in run.legs:
            if x.req_id != req_id:
                continue
            ev.append((x.ready_s, f"KV pull {x.prefill}->{x.decode} issued ({x.tokens:,} tokens)"))
            if x.start_s > x.ready_s and x.start_s <= now:
                ev.append((x.start_s, "on the link (after queueing for it)"))
            if not x.landed:
                ev.append((x.end_s, "transfer cut off: a replica was lost"))
            elif x.end_s <= now:
                ev.append((x.end_s, "KV landed"))
        for rec in run.recoveries:
            if rec.req_id == req_id:
                ev.append((rec.time_s, f"{rec.action} after {rec.node} was lost -> {rec.target or 'parked'}"))
        d = run.decode_req.get(i)
        dk = run.decode_of.get(i)
        if d is not None and dk is not None:  # handed to its decode replica (or prefilling there)
            dname = sim.d_specs[dk].name
            where = dname
            if d.first_scheduled >= 0:
                ev.append((d.first_scheduled, f"decode scheduled on {dname}"))
            if d.first_token >= 0:
                ev.append((d.first_token, "first token"))
            view = sim.d_views[dk]
            live = view.request(i) if sim.d_alive[dk] else None
            if d.outcome:
                state = OUTCOMES[d.outcome]
                ev.append((d.finish_time, f"{state} with {d.num_output:,} tokens"))
            elif live is not None and view.is_running(live):
                state = "decoding" if d.first_token >= 0 else "prefilling"  # a short prompt: here
            elif d.status == WAITING_FOR_REMOTE_KVS:
                state = "waiting for KV"
            else:
                state = "decode queue"
            if live is not None:
                slot = self._slot(view, live, dname)
        return RequestTimeline(
            req_id,
            state,
            where,
            int(row["prompt_len"]),
            int(row["output_len"]),
            int(row["priority"]),
            self._tenant[i],
            slot,
            tuple(sorted(set(ev))),
        )

    # ------------------------------------------------------------------ the end
    def finish(self) -> PDResult:
        """Run to the end and return the ``PDResult`` of ``PDCluster(...).run()`` on the same inputs."""
        if self._result is None:
            with _gc_paused():
                self.sim.advance()
            self._clock = max(self._clock, self.sim.now)
            self._result = pd_result(self.sim.finish(), self._bytes_per_token, self.slo)
            self._done = True
        return self._result

    def _check_open(self) -> None:
        if self._result is not None:
            raise InputError("this run is finished; start a new LivePDRun to run again")


__all__ = [
    "LegFigures",
    "LiveClusterRun",
    "LivePDRun",
    "LiveRun",
    "PDState",
    "ReplicaState",
    "RequestTimeline",
    "RunSnapshot",
    "Slot",
]
