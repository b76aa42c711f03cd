"""Several replicas on one shared clock: routing, node failures, and moving interrupted requests.

Events are processed in time order: a replica's step ends (its results apply), then requests
arriving at that time are routed (so they take part in any step starting then), then failures.
A replica runs its steps exactly as a stand-alone engine does; the router sees each replica as of
the arrival time, with a step in flight not yet applied.

On a failure every request on the node — running, preempted or never scheduled — is taken off
it with its outputs so far and re-dispatched: none is lost. The step in flight dies with the
node. Each interrupted request either restarts cold on a survivor (it recomputes its prompt and
generated tokens, minus what that survivor's prefix cache holds) or, when its KV survived
(``RecoveryContext.kv_checkpointing``), has it migrated: it reaches the target after the transfer
time with that KV in place and recomputes only what the checkpoint lacks. Which one is decided
per request by a ``RecoveryPolicy``. Transfers bound for one replica share its inbound link: each
starts when the previous one to that replica has landed (``Interrupted.link_wait_s`` tells the
policy how long that is).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from servesim.cluster import stepping
from servesim.cluster.config import FailureEvent, KVCheckpointing, RouterSpec
from servesim.cluster.fleet import FleetBase, Interrupted, Replica, RequestStory
from servesim.cluster.policies import (
    Decision,
    RecoveryPolicy,
    Strategy,
    default_context,
    migrate_policy,
    restart_policy,
)
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.router import Router
from servesim.cluster.story import engine_story
from servesim.engine.engine import PROGRESS_EVERY_STEPS, Engine
from servesim.engine.replica import close_unheld
from servesim.engine.request import OUTCOME_UNFINISHED, Request
from servesim.engine.request import RUNNING as RUNNING_STATUS
from servesim.engine.stretch_cursor import StretchCursor
from servesim.errors import InputError, InternalError, shown
from servesim.events import (
    Event,
    Observer,
    Progress,
    RecoveryDecision,
    Redispatched,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
    RequestArrived,
    RequestFinished,
    fan_out,
)
from servesim.heap import gc_paused
from servesim.traces.schema import Trace


@dataclass(frozen=True)
class _Transit:
    target: int
    request: Request


@dataclass(frozen=True)
class _Arrival:
    request: Request


@dataclass(frozen=True)
class _Abort:
    request: Request


Payload = _Transit | _Arrival | _Abort | tuple[str, FailureEvent]


@dataclass
class Move:
    req_id: str
    time_s: float
    from_node: str
    to_node: str
    strategy: Strategy
    tokens_moved: int
    recompute_tokens: int
    delay_s: float


@dataclass
class ClusterRun:
    """The raw outcome: every engine incarnation (a recovered node starts a new one), the moves."""

    trace: Trace
    replicas: list[Replica]
    engines: list[Engine]  # all incarnations, in creation order
    engine_replica: list[int]  # which replica each incarnation belongs to
    moves: list[Move] = field(default_factory=list)
    failures: list[FailureEvent] = field(default_factory=list)
    parked_at_end: int = 0


class ClusterSimulator(FleetBase[ClusterRun]):
    """Drives replica engines on one clock; see the module docstring for the rules."""

    def __init__(
        self,
        trace: Trace,
        replicas: Sequence[Replica],
        router: RouterSpec | None = None,
        failures: Sequence[FailureEvent] = (),
        recovery: RecoveryPolicy = migrate_policy,
        context: RecoveryContext | None = None,
        *,
        kv_checkpointing: KVCheckpointing = "continuous",
        fast: bool = True,
        observers: Sequence[Observer] = (),
    ) -> None:
        if not replicas:
            raise InputError("a cluster needs at least one replica")
        names = [r.name for r in replicas]
        if len(set(names)) != len(names):
            raise InputError(f"replica names must be unique: {names}")
        unknown = {f.node for f in failures} - set(names)
        if unknown:
            raise InputError(f"failure events name unknown nodes {sorted(unknown)}; replicas: {names}")
        super().__init__(trace, replicas)
        self._all_up = True  # every node alive and accepting (eligible's shortcut)
        self.router = Router(router or RouterSpec())
        self.recovery = recovery
        self.context = context or default_context()
        self.kv_checkpointing = kv_checkpointing
        self.fast = fast
        # Observers see every replica's engine events (tagged with its name) and the cluster's.
        self.observers = list(observers)
        self.emit = fan_out(self.observers)
        self._steps_done = 0
        for k in range(len(replicas)):
            self._start(k)
        self._moves: list[Move] = []
        self.failures = sorted(failures, key=lambda f: (f.time_s, f.node))
        # External events: (time, kind, seq, payload); at equal times transfers land first, then
        # warnings, failures, recoveries.
        self._events: list[tuple[float, int, int, Payload]] = []
        self._seq = 0
        for f in self.failures:
            if f.warning_s > 0:
                self._push(max(0.0, f.time_s - f.warning_s), 1, ("warn", f))
            self._push(f.time_s, 2, ("fail", f))
            if f.recover_after_s is not None:
                self._push(f.time_s + f.recover_after_s, 3, ("recover", f))
        self._snapshots: dict[int, int] = {}  # request idx -> KV tokens snapshotted at a warning
        self._link_free = [0.0] * len(replicas)  # when each replica's inbound link is free again
        self._next_arrival = 0  # next trace row to route
        # Online runs (``abort``): aborts whose request is in transit wait for it to land.
        self._abort_on_landing: set[int] = set()
        # Routed arrivals run only the replicas the router may read differently (stepping.py):
        # those left behind (lagging) and what each one's cursor knows (watched) so far.
        self.router_reads = self.router.reads
        self._lazy = self.router_reads != "state"
        self._behind = self._watching = False
        self._last_arrival = 0.0
        self._lagging = [False] * len(replicas)
        self._watched = [False] * len(replicas)
        self._cursors = [StretchCursor() for _ in replicas]
        self.queues = [0] * len(replicas)  # each replica's outstanding, as of a routed arrival

    def _new_engine(self, k: int) -> Engine:
        spec = self.replicas[k]
        return Engine(
            self.arrays,
            spec.config,
            spec.step_time,
            fast=self.fast,
            external_arrivals=True,
            observers=self.observers,
            name=spec.name,
            kv_connector=spec.kv_connector() if spec.kv_connector is not None else None,
        )

    @property
    def link(self) -> RecoveryContext:
        """The migration link (the recovery cost model's)."""
        return self.context

    @property
    def moves(self) -> list[Move]:
        """Every recovery decision so far (request, from, to, strategy, tokens moved, delay)."""
        return self._moves

    def _in_transit(self) -> list[Request]:
        return [p.request for *_, p in self._events if isinstance(p, _Transit)]

    def _push(self, t: float, kind: int, payload: Payload) -> None:
        heapq.heappush(self._events, (t, kind, self._seq, payload))
        self._seq += 1

    @property
    def num_routed(self) -> int:
        """Trace rows routed so far (arrived at the cluster)."""
        return self._next_arrival

    @property
    def num_arrived(self) -> int:
        return self._next_arrival

    @property
    def drained(self) -> bool:
        """Nothing left to do: every trace row routed, no event or step pending, and no live
        replica holds a request."""
        if self._next_arrival < self.arrays.n or self._events or any(p is not None for p in self.inflight):
            return False
        return not any(self.alive[k] and not v.idle for k, v in enumerate(self.views))

    def eligible(self) -> list[int]:
        if self._all_up:  # no node down or warned (kept by _node_state): every arrival asks
            return list(range(len(self.replicas)))
        return [k for k in range(len(self.replicas)) if self.alive[k] and self.accepting[k]]

    def _node_state(self, k: int, alive: bool, accepting: bool) -> None:
        """Set whether node ``k`` is up and takes requests (the only writer of both)."""
        self.alive[k] = alive
        self.accepting[k] = accepting
        self._all_up = all(self.alive) and all(self.accepting)

    def run(self) -> ClusterRun:
        with gc_paused():
            self.advance()
        return self.close()

    def close(self) -> ClusterRun:
        """Finish every current engine and gather the raw outcome (after ``advance()`` ran out)."""
        if self._rolling is not None:
            raise RuntimeError("roll_records kept the latest records only: this run has no result")
        for engine in self.current:
            engine.finish()
        if self.emit is not None:
            self._progress()
        # Requests still parked (no replica ever came back) stay "unfinished": reported, not lost.
        return ClusterRun(
            self.trace,
            self.replicas,
            self.engines,
            self.engine_replica,
            self._moves,
            self.failures,
            len(self._parked),
        )

    def finish(self) -> ClusterRun:
        """``close``: the fleet protocol's end."""
        return self.close()

    def advance(self, until: float = math.inf, max_steps: int = sys.maxsize) -> int:
        """Process steps and external events in time order; returns the engine steps ended.

        Stops before the first step end or event at or after ``until`` (a step that starts
        before it stays in flight), after ``max_steps`` step ends, or when nothing is left.
        Stopping and resuming changes nothing: the same comparisons order the same events, so
        a run advanced piecewise (``servesim.live``) equals one advanced in one go.
        """
        arrival = self.arrays.arrival
        n = self.arrays.n
        steps = 0
        while True:
            nxt = self._next_arrival
            t_arr = arrival[nxt] if nxt < n else math.inf
            t_ev = self._events[0][0] if self._events else math.inf
            t_ext = min(t_arr, t_ev)
            horizon = t_ext if t_ext < until else until
            if self.emit is None and max_steps == sys.maxsize and not any(self._aborts_after_step):
                if self._lazy and t_arr <= t_ev and t_arr < until:  # a routed arrival is next
                    steps += stepping.run_to_arrival(self, t_arr)
                    k_step, t_step = -1, math.inf
                else:
                    ended, k_step, t_step = stepping.run_to_event(self, horizon, t_ext, until)
                    steps += ended
            else:
                for k, engine in enumerate(self.current):
                    if self.alive[k] and self.inflight[k] is None:
                        self.inflight[k] = engine.begin_step(horizon)
                k_step, t_step = -1, math.inf
                for k, p in enumerate(self.inflight):
                    if p is not None and p.end < t_step:
                        k_step, t_step = k, p.end
            if k_step >= 0 and t_step <= t_ext and t_step < until:
                p = self.inflight[k_step]
                if p is None:
                    raise InternalError("invariant broken: p is None")
                self.current[k_step].end_step(p)
                self.inflight[k_step] = None
                if self._aborts_after_step[k_step]:
                    self._apply_aborts(k_step, t_step)
                if self.emit is not None:
                    self._steps_done += 1
                    if self._steps_done % PROGRESS_EVERY_STEPS == 0:
                        self._progress()
                self.now = t_step
                steps += 1
                if steps >= max_steps:
                    return steps
                continue
            if t_ext == math.inf or t_ext >= until:
                return steps
            self.now = t_ext
            if t_arr <= t_ev:
                r = self.arrays.make_request(nxt)
                self._next_arrival = nxt + 1
                if self.emit is not None:
                    self.emit(RequestArrived(t_arr, r.req_id, None))
                self._dispatch(r, t_arr)
            else:
                t, _kind, _seq, payload = heapq.heappop(self._events)
                self._handle(t, payload)

    def advance_steps(self, n: int) -> int:
        """Exactly ``n`` step ends (fewer only when nothing is left), each one engine step:
        multi-step decode stretches are off meanwhile (results are the same either way)."""
        engines = self.current
        saved = [e.stretch for e in engines]
        for e in engines:
            e.stretch = False
        try:
            return self.advance(math.inf, n)
        finally:
            for e, was in zip(engines, saved, strict=True):
                e.stretch = was

    def inject_failure(self, node: str, time_s: float, recover_after_s: float | None = None) -> FailureEvent:
        """Add a failure of ``node`` at ``time_s`` (not before any event already processed)."""
        names = [r.name for r in self.replicas]
        if node not in names:
            raise InputError(f"no replica {shown(node)}; replicas: {', '.join(names)}")
        event = self._planned_failure(node, time_s, recover_after_s, self.failures)
        self.failures = sorted([*self.failures, event], key=lambda f: (f.time_s, f.node))
        self._push(time_s, 2, ("fail", event))
        if recover_after_s is not None:
            self._push(time_s + recover_after_s, 3, ("recover", event))
        return event

    # ------------------------------------------------------------------ online runs
    def submit(self, r: Request) -> None:
        """An online arrival at ``r.arrival`` (not before the cluster's time): routed as a trace
        row arriving then would be (same tie order: before transfers and node events)."""
        self._check_arrival(r)
        self._push(r.arrival, -1, _Arrival(r))

    def abort(self, r: Request, time_s: float) -> None:
        """The client of ``r`` went away at ``time_s``: finish it as aborted and free its KV
        (``Engine.abort``). vLLM applies aborts between engine steps: one whose request is in a
        step in flight takes effect when that step ends; one in transit, when it lands."""
        self._push(max(time_s, self.now), 4, _Abort(r))

    def next_time(self) -> float:
        """When the next step ends or the next event is due (inf when nothing is pending)."""
        t = self._events[0][0] if self._events else math.inf
        for p in self.inflight:
            if p is not None and p.end < t:
                t = p.end
        nxt = self._next_arrival
        if nxt < self.arrays.n:
            t = min(t, self.arrays.arrival[nxt])
        return t

    def _abort(self, r: Request, t: float) -> None:
        if r.outcome != OUTCOME_UNFINISHED:
            return  # finished (or rejected) before the abort took effect
        for k, view in enumerate(self.views):
            if view.holds(r):
                if self.inflight[k] is not None and r.status == RUNNING_STATUS:
                    self._aborts_after_step[k].append(r)
                else:
                    self.current[k].abort(r, t)
                return
        if r in self._parked:
            self._parked.remove(r)
            self._close_aborted(r, t)
        else:  # on its way to a survivor
            self._abort_on_landing.add(r.idx)

    def _abort_after_step(self, k: int, r: Request, t: float) -> None:
        self.current[k].abort(r, t)  # False when it finished in that very step

    def _close_aborted(self, r: Request, t: float) -> None:
        """Abort a request held by no engine (parked, in transit, or on a node just lost)."""
        close_unheld(r, t)
        if self.emit is not None:
            self.emit(RequestFinished(t, r.req_id, None, "aborted", r.num_output, t - r.arrival))

    def _progress(self) -> None:
        if self.emit is None:
            raise InternalError("invariant broken: self.emit is None")
        done = sum(e.num_closed for e in self.engines)
        now = max((e.now for e in self.current), default=0.0)
        self.emit(Progress(done, self.arrays.n, now, self._steps_done))

    def _dispatch(self, r: Request, t: float, moved_from: str | None = None, parked: bool = False) -> None:
        """Route ``r`` to an eligible replica (park it when none is); ``moved_from``/``parked``
        say it is a re-dispatch (an event for observers)."""
        eligible = self.eligible()
        if not eligible:
            self._parked.append(r)
            return
        queues = self.queues if self._behind and self.router_reads == "queues" else None
        k = self.router.pick(r, self.views, eligible, queues)
        if self.emit is not None and (moved_from is not None or parked):
            self.emit(Redispatched(t, r.req_id, moved_from, self.replicas[k].name))
        stepping.catch_up(self, k, t)
        self.current[k].submit(r, t)

    def _handle(self, t: float, payload: Payload) -> None:
        if isinstance(payload, _Arrival):
            if self.emit is not None:
                self.emit(RequestArrived(t, payload.request.req_id, None))
            self._dispatch(payload.request, t)
            return
        if isinstance(payload, _Abort):
            self._abort(payload.request, t)
            return
        if isinstance(payload, _Transit):  # a migrated request reaching its target
            k, r = payload.target, payload.request
            if r.idx in self._abort_on_landing:
                self._abort_on_landing.discard(r.idx)
                self._close_aborted(r, t)
                return
            if self.alive[k]:
                self.current[k].submit(r, t)
            else:  # the target died meanwhile, and the KV on its way with it
                r.external_tokens = 0
                self._dispatch(r, t, moved_from=self.replicas[k].name)
            return
        kind, f = payload
        k = [x.name for x in self.replicas].index(f.node)
        if kind != "fail":
            self.node_events.append((t, kind, f.node, 0))
        if self.emit is not None:
            if kind == "warn":
                self.emit(ReplicaWarning(t, f.node))
            elif kind == "recover":
                self.emit(ReplicaUp(t, f.node))
        if kind == "warn":
            self._node_state(k, self.alive[k], False)
            if self.kv_checkpointing == "on_warning":
                view = self.views[k]
                for r in view.running():
                    self._snapshots[r.idx] = view.computed_tokens(r)
        elif kind == "fail":
            self._fail(k, t)
        else:  # recover: the node comes back empty (cold prefix cache)
            self.current[k].finish()
            self._start(k).now = t
            self._node_state(k, True, True)
            parked, self._parked = self._parked, []
            for r in parked:
                self._dispatch(r, t, parked=True)

    def _fail(self, k: int, t: float) -> None:
        engine = self.current[k]
        self.inflight[k] = None  # the step in flight is lost with the node
        aborting = {r.idx for r in self._aborts_after_step[k]}
        self._aborts_after_step[k] = []
        victims = engine.evict_all()
        for r, _ in victims:
            if r.idx in aborting:
                self._close_aborted(r, t)
        victims = [(r, c) for r, c in victims if r.idx not in aborting]
        self.node_events.append((t, "fail", self.replicas[k].name, len(victims)))
        self._node_state(k, False, False)
        node = self.replicas[k].name
        eligible = self.eligible()
        if self.emit is not None:
            self.emit(ReplicaDown(t, node, len(victims)))
        for r, computed in victims:
            ckpt = self._checkpointed(r, computed)
            if not eligible:
                self._parked.append(r)
                continue
            if computed == 0:
                self._dispatch(r, t, moved_from=node)  # it held no KV here: just route it again
                continue
            waits = tuple(max(0.0, f - t) for f in self._link_free)
            job = Interrupted(r, node, t, computed, ckpt, waits)
            self.interrupted.append(job)
            d = self.recovery(job, self.views, eligible, self.context, self.router)
            moved = d.tokens_moved if d.strategy == "MIGRATE_STATE" else 0
            delay = d.delay_s
            if moved > 0:  # the transfer queues behind those already bound for the target
                delay += waits[d.target]
                self._link_free[d.target] = t + delay
            self._moves.append(
                Move(
                    r.req_id,
                    t,
                    node,
                    self.replicas[d.target].name,
                    d.strategy,
                    moved,
                    r.prompt_len + r.num_output - moved,
                    delay,
                )
            )
            r.external_tokens = moved
            if self.emit is not None:
                m = self._moves[-1]
                self.emit(
                    RecoveryDecision(
                        t, r.req_id, node, m.to_node, d.strategy, moved, m.recompute_tokens, delay
                    )
                )
            if delay > 0:
                self._push(t + delay, 0, _Transit(d.target, r))
            else:
                self.current[d.target].submit(r, t)
        gone = {r.idx for r, _ in victims}
        self._snapshots = {i: v for i, v in self._snapshots.items() if i not in gone}

    def _checkpointed(self, r: Request, computed: int) -> int:
        mode = self.kv_checkpointing
        if mode == "continuous":
            return computed
        if mode == "on_warning":
            return min(computed, self._snapshots.get(r.idx, 0))
        return 0

    # ------------------------------------------------------------------ reading
    def recovery_events(self, start: int = 0) -> list[Event]:
        return [
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
            for m in self._moves[start:]
        ]

    def story(self, idx: int, now: float) -> RequestStory:
        """Request ``idx`` across every incarnation (``engine_story``), with its recovery moves."""
        rid = self.arrays.req_id[idx]
        notes = [
            (m.time_s, f"{m.strategy} {m.from_node}->{m.to_node} ({m.recompute_tokens:,} to recompute)")
            for m in self._moves
            if m.req_id == rid
        ]
        engines = self.engine_list()
        return engine_story(idx, self.arrays.arrival[idx], engines, self.views, self._next_arrival, notes)

    def replica_of(self, r: Request) -> str | None:
        """The replica holding ``r`` now, or the one that finished it; None while none does
        (waiting for a replica to come back, or in transit between two)."""
        names = self.replica_names
        for k, view in enumerate(self.views):
            if view.holds(r):
                return names[k]
        if r.finish_time >= 0:  # latest incarnation first: a moved request finished there
            for view, k in zip(reversed(self.engine_views), reversed(self.engine_replica), strict=True):
                rec = view.records
                i = r.idx - rec.request_base
                if 0 <= i < len(rec.finish) and rec.finish[i] == r.finish_time:
                    return names[k]
        return None


__all__ = [
    "ClusterRun",
    "ClusterSimulator",
    "Decision",
    "Interrupted",
    "Move",
    "RecoveryPolicy",
    "Replica",
    "default_context",
    "migrate_policy",
    "restart_policy",
]
