"""The frozen types a live run's snapshot is made of (``servesim.live`` re-exports them): a request
as a live view shows it (``Slot``), a replica between steps (``ReplicaState``), the whole run
(``RunSnapshot``, with a disaggregated run's ``PDState``) and one request's story
(``RequestTimeline``). Plain data: interfaces render them, nothing here reads an engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servesim.cluster.pd.state import LegFigures, PDState
from servesim.engine.replica import CpuTierState

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
    # A hybrid model's blocks in use per KV cache group kind, (kind, blocks) adding up to
    # ``kv_blocks_used`` (``ReplicaView.kv_blocks_by_group``); () for one block table.
    kv_groups: tuple[tuple[str, int], ...] = ()

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_usable if self.kv_blocks_usable else 0.0

    @property
    def label(self) -> str:
        """The name, with the pool of a disaggregated replica: ``p0 (prefill)``, ``d1 (decode)``."""
        return f"{self.name} ({self.role})" if self.role else self.name


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
    def kv_groups(self) -> tuple[tuple[str, int], ...]:
        """A hybrid model's blocks in use per KV cache group kind over the live replicas, (kind,
        blocks) in vLLM's group order; () for one block table."""
        out: dict[str, int] = {}
        for r in self.replicas:
            if r.alive:
                for kind, n in r.kv_groups:
                    out[kind] = out.get(kind, 0) + n
        return tuple(out.items())

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


__all__ = [
    "WAITING_SHOWN",
    "LegFigures",
    "PDState",
    "Phase",
    "ReplicaState",
    "RequestTimeline",
    "RunSnapshot",
    "Slot",
]
