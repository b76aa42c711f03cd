"""Typed events of a run, and the observers that receive them.

Why: every interface needs to *watch* a simulation — the step log compares each step with vLLM's
own scheduler, progress bars count requests, the terminal dashboard shows the batch live, the web
server streams progress. They all attach an ``Observer`` to the one engine (or cluster) loop
instead of each reaching into its state. Events are frozen, slotted dataclasses (cheap to build,
safe to keep); the engine builds none when no observer is attached, so an unobserved run pays
nothing (see ``benchmarks/engine_speed.py``).

Order within a step: the step's scheduling outcomes (preempted, starved, admitted, resumed) at its
start time, then its first tokens and finishes at its end time, then the ``StepEvent`` itself.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

RejectReason = Literal["prompt_too_long", "queue_timeout", "max_num_queued_reqs", "max_num_queued_tokens"]
Strategy = Literal["MIGRATE_STATE", "COLD_RESTART"]


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One engine step: exactly the fields of a ``--step-log`` line (plus the replica's name)."""

    replica: str | None
    step: int
    start_s: float
    duration_s: float
    scheduled_tokens: dict[str, int]  # in running order
    num_tokens: int
    new: tuple[str, ...]
    resumed: tuple[str, ...]
    preempted: tuple[str, ...]
    finished: tuple[str, ...]
    prefix_hit_tokens: dict[str, int]
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_free: int
    # Speculative decoding only: drafts verified and accepted per request (None: off).
    spec_scheduled: dict[str, int] | None = None
    spec_accepted: dict[str, int] | None = None
    # KV cache groups only (a hybrid model): ``kv_blocks_used`` split by group kind, in vLLM's
    # group order (None: one block table).
    kv_blocks_by_group: dict[str, int] | None = None

    def log_record(self) -> dict[str, Any]:
        """The step-log line as a dict (key order and values as vLLM's oracle compares them)."""
        d: dict[str, Any] = {
            "step": self.step,
            "start_s": self.start_s,
            "duration_s": self.duration_s,
            "scheduled_tokens": self.scheduled_tokens,
            "num_tokens": self.num_tokens,
            "new": list(self.new),
            "resumed": list(self.resumed),
            "preempted": list(self.preempted),
            "finished": list(self.finished),
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
            "kv_blocks_used": self.kv_blocks_used,
            "kv_blocks_free": self.kv_blocks_free,
        }
        if self.kv_blocks_by_group is not None:
            d["kv_blocks_by_group"] = self.kv_blocks_by_group
        if self.spec_scheduled is not None:
            d["spec_scheduled"] = self.spec_scheduled
            d["spec_accepted"] = self.spec_accepted
        if self.replica is not None:
            d["replica"] = self.replica
        return d


@dataclass(frozen=True, slots=True)
class RequestArrived:
    time_s: float
    req_id: str
    replica: str | None


@dataclass(frozen=True, slots=True)
class RequestAdmitted:
    """First admission into the running batch (with its prefix-cache hit)."""

    time_s: float
    req_id: str
    replica: str | None
    prefix_hit_tokens: int


@dataclass(frozen=True, slots=True)
class RequestResumed:
    """Re-admission after a preemption (or after a move from a lost replica)."""

    time_s: float
    req_id: str
    replica: str | None


@dataclass(frozen=True, slots=True)
class RequestPreempted:
    time_s: float
    req_id: str
    replica: str | None
    lost_tokens: int
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class RequestStarved:
    """Preempted ``starvation_threshold`` times: flagged STARVED."""

    time_s: float
    req_id: str
    replica: str | None
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class FirstToken:
    time_s: float
    req_id: str
    replica: str | None
    ttft_s: float


@dataclass(frozen=True, slots=True)
class RequestFinished:
    time_s: float
    req_id: str
    replica: str | None
    outcome: str
    num_output: int
    e2e_s: float


@dataclass(frozen=True, slots=True)
class RequestRejected:
    time_s: float
    req_id: str
    replica: str | None
    reason: RejectReason


@dataclass(frozen=True, slots=True)
class ReplicaWarning:
    """A failure is announced (spot notice): the replica stops taking new requests."""

    time_s: float
    replica: str


@dataclass(frozen=True, slots=True)
class ReplicaDown:
    time_s: float
    replica: str
    num_interrupted: int


@dataclass(frozen=True, slots=True)
class ReplicaUp:
    time_s: float
    replica: str


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    """How one interrupted request with KV on the lost replica is recovered, and what it costs."""

    time_s: float
    req_id: str
    from_replica: str
    to_replica: str
    strategy: Strategy
    tokens_moved: int
    recompute_tokens: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class LegRecovered:
    """Prefill/decode disaggregation: what became of a request when a replica it depended on was
    lost (``action``: one of ``servesim.cluster.pd.RECOVERY_ACTIONS``; ``target`` None: parked)."""

    time_s: float
    req_id: str
    lost_replica: str
    action: str
    target: str | None


@dataclass(frozen=True, slots=True)
class Redispatched:
    """A request taken off a lost replica (or parked) routed again; ``from_replica`` None: parked."""

    time_s: float
    req_id: str
    from_replica: str | None
    to_replica: str


@dataclass(frozen=True, slots=True)
class Progress:
    """Requests with an outcome so far, of the trace's; emitted every few thousand steps and at the end."""

    done: int
    total: int
    time_s: float
    step: int


Event = (
    StepEvent
    | RequestArrived
    | RequestAdmitted
    | RequestResumed
    | RequestPreempted
    | RequestStarved
    | FirstToken
    | RequestFinished
    | RequestRejected
    | ReplicaWarning
    | ReplicaDown
    | ReplicaUp
    | RecoveryDecision
    | Redispatched
    | LegRecovered
    | Progress
)


class Observer(Protocol):
    """Anything with ``on_event``: the engine and the cluster call it for every event, in order."""

    def on_event(self, event: Event) -> None: ...


Emit = Callable[[Event], None]


def fan_out(observers: Sequence[Observer]) -> Emit | None:
    """One callable that delivers an event to every observer (None when there is none)."""
    calls = [o.on_event for o in observers]
    if not calls:
        return None
    if len(calls) == 1:
        return calls[0]

    def emit(event: Event) -> None:
        for call in calls:
            call(event)

    return emit


class StepLogObserver:
    """Passes each step's log record (``StepEvent.log_record``) to a callable sink."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        self.sink = sink

    def on_event(self, event: Event) -> None:
        if type(event) is StepEvent:
            self.sink(event.log_record())


class StepLogWriter:
    """The ``--step-log`` file: one JSON line per engine step (the records the oracle compares).

    Streamed to a temporary name beside ``path`` (``servesim.io.atomic_file``): ``close()``
    puts the whole file in place, ``abort()`` (or leaving the ``with`` block on an error) leaves
    nothing. Use as a context manager, or call ``close()``/``abort()``."""

    def __init__(self, path: str) -> None:
        from contextlib import AbstractContextManager
        from typing import BinaryIO

        from servesim.io import atomic_file

        self._cm: AbstractContextManager[BinaryIO] | None = atomic_file(path)
        self._f = self._cm.__enter__()

    def on_event(self, event: Event) -> None:
        if type(event) is StepEvent:
            self._f.write(json.dumps(event.log_record(), separators=(",", ":")).encode() + b"\n")

    def close(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the file: nothing is left at the path (or at the temporary name)."""
        if self._cm is not None:
            cm, self._cm = self._cm, None
            error = OSError("step log abandoned")
            with contextlib.suppress(OSError):
                cm.__exit__(type(error), error, None)

    def __enter__(self) -> StepLogWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class ProgressCallback:
    """Calls ``fn(done, total)`` on every ``Progress`` event (drives a progress bar)."""

    def __init__(self, fn: Callable[[int, int], None]) -> None:
        self.fn = fn

    def on_event(self, event: Event) -> None:
        if type(event) is Progress:
            self.fn(event.done, event.total)


class EventRecorder:
    """Keeps every event (or those of the given types) in a list: for tests and small runs."""

    def __init__(self, *types: type) -> None:
        self.types = types
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        if not self.types or isinstance(event, self.types):
            self.events.append(event)


__all__ = [
    "Emit",
    "Event",
    "EventRecorder",
    "FirstToken",
    "LegRecovered",
    "Observer",
    "Progress",
    "ProgressCallback",
    "RecoveryDecision",
    "Redispatched",
    "RejectReason",
    "ReplicaDown",
    "ReplicaUp",
    "ReplicaWarning",
    "RequestAdmitted",
    "RequestArrived",
    "RequestFinished",
    "RequestPreempted",
    "RequestRejected",
    "RequestResumed",
    "RequestStarved",
    "StepEvent",
    "StepLogObserver",
    "StepLogWriter",
    "fan_out",
]
