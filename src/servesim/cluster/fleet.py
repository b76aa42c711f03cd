"""What every fleet is: replicas on one simulated clock, fed requests, losing replicas, finished.

Two fleets implement it: ``ClusterSimulator`` (identical or named replicas behind a router, with
migration or recompute on a loss) and ``PDCluster`` (a prefill pool and a decode pool, KV moved
between them). ``Fleet`` is the contract (what ``servesim.live``, ``servesim.online`` and the
interfaces drive), ``FleetBase`` the code both share (request numbering, aborts waiting for a step,
rolling records, parked requests, the node events applied, the failure plan check, the read-only
``snapshot``), so that the next fleet feature is written once.

A fleet's replicas are numbered slots (a P/D fleet: the prefill pool's, then the decode pool's);
each slot runs one engine at a time (a replica that comes back after a loss starts a new one) and
every engine ever run stays in ``engines`` with its records.
"""

from __future__ import annotations

import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from pydantic import ValidationError

from servesim.cluster.config import FailureEvent, FailurePlan
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.engine.config import EngineConfig
from servesim.engine.engine import Engine, PendingStep, TraceArrays
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.replica import ReplicaView
from servesim.engine.request import Request
from servesim.engine.step_time import StepTimeModel
from servesim.errors import InputError, describe, shown
from servesim.events import Event
from servesim.traces.schema import Trace

if TYPE_CHECKING:
    from servesim.cluster.pd.records import PDRecovery, Transfer
    from servesim.cluster.pd.state import PDState
    from servesim.cluster.simulate import Move

RunT = TypeVar("RunT")
RunT_co = TypeVar("RunT_co", covariant=True)

#: A node event as applied: (time, "warn" | "fail" | "recover", replica name, requests taken off).
NodeEvent = tuple[float, str, str, int]
#: A served request's time split (``PDCluster.legs``): per leg, the replica and the seconds.
Legs = dict[str, tuple[str, float]]


@dataclass(frozen=True)
class Replica:
    """One replica: a name, its vLLM settings and how long its steps take."""

    name: str
    config: EngineConfig
    step_time: StepTimeModel
    # vLLM's CPU offload tier (``config.kv_offloading_size``): builds a fresh connector for each
    # engine of this replica (a replica that comes back after a failure has an empty tier).
    kv_connector: Callable[[], OffloadingConnector | None] | None = None


@dataclass(frozen=True)
class Interrupted:
    """A request taken off a lost replica, as a recovery policy sees it."""

    request: Request
    node: str
    time_s: float
    computed_tokens: int  # KV the request had on the lost node
    checkpointed_tokens: int  # of those, KV that survived (0: cold restart only)
    link_wait_s: tuple[float, ...] = ()  # per replica: until transfers already bound for it land


@dataclass(frozen=True, slots=True)
class FleetReplica:
    """One replica between steps, read-only: its current engine's view and its state."""

    name: str | None  # None: the one replica of a stand-alone run
    view: ReplicaView
    alive: bool = True
    accepting: bool = True
    role: str | None = None  # a disaggregated fleet's pool: "prefill" | "decode"
    # vLLM's KV-holding queue (requests with blocks, not running), in admission order: a decode
    # replica's legs whose KV is being pulled (WAITING_FOR_REMOTE_KVS) or has landed
    holding: tuple[Request, ...] = ()

    @property
    def clients(self) -> bool:
        """Its requests' tokens are the clients' (a prefill leg's one token is not)."""
        return self.role != "prefill"


@dataclass(frozen=True, slots=True)
class FleetEngine:
    """One engine incarnation (current or of a replica since lost) with the replica it ran for."""

    name: str | None
    view: ReplicaView
    role: str | None = None  # a disaggregated fleet's pool

    @property
    def clients(self) -> bool:
        return self.role != "prefill"


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """A fleet between steps (``Fleet.snapshot``): every replica, every engine ever run, the
    requests arrived and parked."""

    replicas: tuple[FleetReplica, ...]
    engines: tuple[FleetEngine, ...]
    num_arrived: int
    num_parked: int


@dataclass(frozen=True, slots=True)
class RequestStory:
    """What happened to one request so far (``Fleet.story``): its state, the replica it is on
    (or finished on), where it is live now (view, request, replica: its figures) and the events."""

    state: str
    replica: str | None
    held_by: tuple[ReplicaView, Request, str | None] | None
    events: tuple[tuple[float, str], ...]


class Fleet(Protocol[RunT_co]):
    """Replicas on one clock: what ``servesim.live``, ``servesim.online`` and the interfaces drive.

    ``advance`` processes step ends and events in time order up to ``until`` (a run advanced
    piecewise equals one advanced in one go); ``finish`` closes the run and returns its raw
    outcome (``ClusterRun`` / ``PDRun``), summed up by ``build_cluster_result`` / ``pd_result``."""

    now: float  # the latest step end or event processed

    @property
    def drained(self) -> bool: ...

    def make_request(
        self,
        req_id: str,
        arrival_s: float,
        prompt_len: int,
        max_tokens: int,
        *,
        priority: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
        group: int = -1,
        prefix_len: int = 0,
    ) -> Request: ...

    def submit(self, r: Request) -> None: ...

    def abort(self, r: Request, time_s: float) -> None: ...

    def advance(self, until: float = math.inf, max_steps: int = sys.maxsize) -> int: ...

    def advance_steps(self, n: int) -> int: ...

    def next_time(self) -> float: ...

    def inject_failure(
        self, node: str, time_s: float, recover_after_s: float | None = None
    ) -> FailureEvent: ...

    def snapshot(self) -> FleetSnapshot: ...

    def transfers(self, time_s: float) -> PDState | None: ...

    def finish(self) -> RunT_co: ...


class FleetBase(Fleet[RunT], ABC):
    """The code every fleet shares; a subclass builds its engines (``_new_engine``), routes and
    recovers. Slots: ``replicas[k]`` runs ``current[k]`` (read as ``views[k]``)."""

    #: A disaggregated fleet (requests run in two legs: ``follow``, ``legs``, ``transfer_legs``).
    disaggregated: bool = False

    def __init__(self, trace: Trace, replicas: Sequence[Replica]) -> None:
        self.trace = trace
        self.arrays = TraceArrays(trace)
        self.replicas = list(replicas)
        n = len(self.replicas)
        self.engines: list[Engine] = []  # every incarnation of every replica, in creation order
        self.engine_views: list[ReplicaView] = []  # a read-only view of each of them
        self.engine_replica: list[int] = []  # the slot each incarnation ran for
        self.current: list[Engine] = []
        self.views: list[ReplicaView] = []  # what routers, policies and watchers read, per slot
        self.alive = [True] * n
        self.accepting = [True] * n
        self.inflight: list[PendingStep | None] = [None] * n
        self.now = 0.0  # time of the latest step end or event processed
        self.node_events: list[NodeEvent] = []  # as applied, in order
        self.interrupted: list[Interrupted] = []  # every job taken off a lost node with KV on it
        self._parked: list[Request] = []  # waiting for a replica (of the right pool) to come back
        self._next_idx = self.arrays.n  # the next request index (``make_request``)
        # Aborts of requests in a step in flight, per slot: applied when that step ends (vLLM
        # applies aborts between engine steps).
        self._aborts_after_step: list[list[Request]] = [[] for _ in range(n)]
        self._rolling: tuple[int, int] | None = None  # (steps, requests) kept: roll_records

    # ------------------------------------------------------------------ engines
    @abstractmethod
    def _new_engine(self, k: int) -> Engine:
        """A fresh engine for slot ``k`` (its connector, its clock); ``_start`` registers it."""

    def _start(self, k: int) -> Engine:
        """Start a new engine on slot ``k`` (the first, or after a loss) and register it."""
        engine = self._new_engine(k)
        if self._rolling is not None:
            engine.rec.trim(*self._rolling)
        view = ReplicaView(engine)
        self.engines.append(engine)
        self.engine_views.append(view)
        self.engine_replica.append(k)
        if k < len(self.current):
            self.current[k], self.views[k] = engine, view
        else:
            self.current.append(engine)
            self.views.append(view)
        return engine

    def pool_of_slot(self, k: int) -> str | None:
        """The pool of slot ``k`` (None: an aggregated fleet's)."""
        return None

    @property
    def replica_names(self) -> list[str]:
        return [r.name for r in self.replicas]

    @property
    def pools(self) -> dict[str, str] | None:
        """Each replica's pool (a disaggregated fleet's; None otherwise)."""
        if not self.disaggregated:
            return None
        return {r.name: self.pool_of_slot(k) or "" for k, r in enumerate(self.replicas)}

    @property
    def max_model_len(self) -> int:
        """The longest context every replica takes (online each replica's config says it)."""
        return min(v.max_model_len for v in self.views)

    @property
    @abstractmethod
    def link(self) -> RecoveryContext:
        """The link KV moves over (migrations, or a disaggregated fleet's transfers)."""

    # ------------------------------------------------------------------ requests
    def make_request(
        self,
        req_id: str,
        arrival_s: float,
        prompt_len: int,
        max_tokens: int,
        *,
        priority: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
        group: int = -1,
        prefix_len: int = 0,
    ) -> Request:
        """A request that is not in the trace, for ``submit`` (the next free request index).
        ``hash_ids``: one id per ``hash_block_size`` prompt tokens naming the prefix up to there
        (prefix caching, and the prefix-aware routers)."""
        r = Request(
            self._next_idx,
            req_id,
            arrival_s,
            prompt_len,
            max_tokens,
            priority,
            group,
            prefix_len,
            hash_ids,
            hash_block_size,
        )
        self._next_idx += 1
        return r

    def _check_arrival(self, r: Request) -> None:
        if r.arrival < self.now:
            raise InputError(f"an arrival at {r.arrival} s is in the past (the cluster is at {self.now} s)")

    def _apply_aborts(self, k: int, t: float) -> None:
        """The step in flight on slot ``k`` ended at ``t``: apply the aborts that waited for it."""
        aborts, self._aborts_after_step[k] = self._aborts_after_step[k], []
        for r in aborts:
            self._abort_after_step(k, r, t)

    @abstractmethod
    def _abort_after_step(self, k: int, r: Request, t: float) -> None:
        """Apply an abort that waited for slot ``k``'s step to end."""

    @property
    def parked(self) -> list[Request]:
        """The requests waiting for a replica to come back, in the order they will be placed."""
        return list(self._parked)

    @property
    def num_parked(self) -> int:
        return len(self._parked)

    @property
    @abstractmethod
    def num_arrived(self) -> int:
        """Requests arrived at the fleet so far (trace rows and submissions)."""

    # ------------------------------------------------------------------ failures
    def _planned_failure(
        self, name: str, time_s: float, recover_after_s: float | None, listed: Sequence[FailureEvent]
    ) -> FailureEvent:
        """A failure of replica ``name`` at ``time_s``, checked: not in the past, and one plan with
        the failures ``listed`` (a replica does not fail while already down)."""
        if time_s < self.now:
            raise InputError(f"a failure at {time_s} s is in the past (the cluster is at {self.now} s)")
        event = FailureEvent(node=name, time_s=time_s, recover_after_s=recover_after_s)
        try:
            FailurePlan(events=[*listed, event])
        except ValidationError as e:
            raise InputError(f"cannot fail {shown(name)} at {time_s:g} s: {describe(e)}") from None
        return event

    # ------------------------------------------------------------------ rolling records
    def roll_records(self, keep_steps: int, keep_requests: int) -> None:
        """Keep only the latest records from now on (``trim_records``): an online run that never
        ends holds bounded memory. No result can be built afterwards."""
        if keep_steps < 1 or keep_requests < 1:
            raise InputError("roll_records keeps at least one step and one request")
        self._rolling = (keep_steps, keep_requests)
        self.trim_records()

    def trim_records(self) -> list[Request]:
        """Apply ``roll_records`` to every engine, past incarnations included (cheap until due),
        and to the fleet's own bookkeeping; returns the requests it forgot (a P/D fleet's)."""
        if self._rolling is None:
            return []
        steps, keep = self._rolling
        due = [e for e in self.engines if e.rec.trim_due(steps, keep)]
        if due:  # every step since the oldest request still in the fleet stays
            oldest = self._oldest_arrival()
            for engine in due:
                engine.rec.trim(steps, keep, oldest)
        return self._forget(keep)

    def _forget(self, keep: int) -> list[Request]:
        """Trim the fleet's bookkeeping to about ``keep`` closed requests (none by default)."""
        return []

    def _oldest_arrival(self) -> float:
        """The earliest arrival of a request still in the fleet: on a replica, waiting for one,
        or in transit between two."""
        times = [r.arrival for v in self.views for r in v.live_requests()]
        times += [r.arrival for r in self._parked]
        times += [r.arrival for r in self._in_transit()]
        return min(times, default=math.inf)

    def _in_transit(self) -> list[Request]:
        """Requests between two replicas (on their way after a loss)."""
        return []

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> FleetSnapshot:
        """Every replica (current engine, alive, accepting, pool, KV-holding queue) and every
        engine ever run, read-only."""
        reps = tuple(
            FleetReplica(
                spec.name,
                self.views[k],
                self.alive[k],
                self.accepting[k],
                self.pool_of_slot(k),
                self._holding(k) if self.alive[k] else (),
            )
            for k, spec in enumerate(self.replicas)
        )
        return FleetSnapshot(
            reps,
            self.engine_list(),
            self.num_arrived,
            len(self._parked),
        )

    def engine_list(self) -> tuple[FleetEngine, ...]:
        """Every engine ever run, in creation order, with its replica's name and pool."""
        names = self.replica_names
        return tuple(
            FleetEngine(names[k], v, self.pool_of_slot(k))
            for v, k in zip(self.engine_views, self.engine_replica, strict=True)
        )

    def _holding(self, k: int) -> tuple[Request, ...]:
        """Slot ``k``'s KV-holding queue (none but on a disaggregated fleet's decode replicas)."""
        return ()

    def transfers(self, time_s: float) -> PDState | None:
        """A disaggregated fleet's KV transfers as of ``time_s`` and the legs of the requests
        finished so far (None: the fleet moves no KV between pools)."""
        return None

    @property
    def moves(self) -> list[Move]:
        """Migrations and restarts decided after losses (an aggregated fleet's)."""
        return []

    @property
    def recoveries(self) -> list[PDRecovery]:
        """What became of each request a lost replica held (a disaggregated fleet's)."""
        return []

    @property
    def num_recoveries(self) -> int:
        """Recovery decisions so far (``recovery_events``' count)."""
        return len(self.moves) + len(self.recoveries)

    @abstractmethod
    def recovery_events(self, start: int = 0) -> list[Event]:
        """The recovery decisions from the ``start``-th on, as ``servesim.events``."""

    @abstractmethod
    def story(self, idx: int, now: float) -> RequestStory:
        """What happened to request ``idx`` (a trace position) so far, as of ``now``."""

    def follow(self, r: Request) -> tuple[Request, Request] | None:
        """``r``'s current client leg (whose tokens its client sees) and its first leg (which
        queued first); None while it has not arrived. One request is both on an aggregated fleet."""
        return r, r

    def legs(self, r: Request) -> Legs | None:
        """A served request's time split per leg (a disaggregated fleet's; None otherwise)."""
        return None

    def transfer_legs(self, start: int) -> tuple[list[Transfer], int]:
        """The KV transfers booked from the ``start``-th on (those forgotten by rolling records
        skipped), and the count so far (a disaggregated fleet's; none otherwise)."""
        return [], start

    @abstractmethod
    def replica_of(self, r: Request) -> str | None:
        """The replica holding ``r`` now (or that finished it); None while none does."""

    def check_invariants(self) -> None:
        """Block and token conservation on every live replica between steps (tests)."""
        for k, engine in enumerate(self.current):
            if self.alive[k] and self.inflight[k] is None:
                engine.assert_invariants()


__all__ = [
    "Fleet",
    "FleetBase",
    "FleetEngine",
    "FleetReplica",
    "FleetSnapshot",
    "Interrupted",
    "Legs",
    "NodeEvent",
    "Replica",
    "RequestStory",
]
