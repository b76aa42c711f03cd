"""A read-only view of one replica between steps, for code outside the engine.

Routers, the recovery planner, the cluster's bookkeeping and ``servesim.live`` read a replica
through a ``ReplicaView`` (queue lengths, KV usage, the running batch, the prefix cache's hold on
a request, the records so far), the way vLLM's ``KVCacheBlocks`` hides the KV-cache manager's
internals from the scheduler: nothing outside ``servesim.engine`` touches the scheduler's lists,
the block pool or the KV-cache manager. Changing a replica is an engine operation
(``Engine.submit``, ``Engine.abort``, ``Engine.evict_all``, ``begin_step``/``end_step``);
``close_unheld`` aborts a request no engine holds.

A view reads the engine live (it copies nothing until asked): keep one per engine and read it
between steps. The sequences it returns are fresh tuples, never the engine's own lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engine.config import EngineConfig
from servesim.engine.engine import Engine
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.kv_groups import group_kinds
from servesim.engine.recorder import Recorder
from servesim.engine.request import FINISHED, OUTCOME_ABORTED, Request
from servesim.engine.step_time import StepTimeModel


@dataclass(frozen=True, slots=True)
class CpuTierState:
    """A replica's CPU offload tier so far (vLLM's OffloadingConnector metrics): chunks held of
    the tier's ``num_chunks``, the hit rate of tokens asked of it beyond the GPU hit (first
    admissions, None before any), tokens loaded from it and stored to it."""

    num_chunks: int
    chunks_stored: int
    hit_rate: float | None
    loaded_tokens: int
    stored_tokens: int

    @property
    def usage(self) -> float:
        return self.chunks_stored / self.num_chunks if self.num_chunks else 0.0


class ReplicaView:
    """One replica's engine as routers, planners and watchers may see it (read-only)."""

    __slots__ = ("_engine",)
    _engine: Engine

    def __init__(self, engine: Engine) -> None:
        object.__setattr__(self, "_engine", engine)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a ReplicaView is read-only (tried to set {name})")

    # ------------------------------------------------------------------ settings
    @property
    def config(self) -> EngineConfig:
        return self._engine.config

    @property
    def step_time(self) -> StepTimeModel:
        return self._engine.step_time

    @property
    def block_size(self) -> int:
        return int(self._engine.kv.block_size)

    @property
    def max_model_len(self) -> int:
        return int(self._engine.max_model_len)

    @property
    def max_num_seqs(self) -> int:
        return int(self._engine.scheduler.max_num_seqs)

    @property
    def starvation_threshold(self) -> int:
        return int(self._engine.scheduler.starvation_threshold)

    # ------------------------------------------------------------------ clock
    @property
    def step(self) -> int:
        """Steps ended so far."""
        return int(self._engine.step)

    @property
    def now(self) -> float:
        return float(self._engine.now)

    @property
    def num_arrived(self) -> int:
        """Trace rows that have arrived (single-replica runs; a cluster routes them itself)."""
        return int(self._engine._next)

    @property
    def num_closed(self) -> int:
        """Requests with an outcome here."""
        return int(self._engine.num_closed)

    @property
    def speculation(self) -> tuple[int, int, int]:
        """Speculative decoding's counters: (draft tokens per step k, drafts accepted,
        verifications) as vLLM's spec-decode metrics count them; k 0 when it does not speculate."""
        s = self._engine.scheduler
        return int(s.spec_k), int(s.spec_accepted), int(s.spec_verifications)

    # ------------------------------------------------------------------ queues
    @property
    def num_running(self) -> int:
        return len(self._engine.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self._engine.scheduler.waiting)

    @property
    def max_loras(self) -> int:
        """Distinct LoRA adapters one step may run (vLLM's ``max_loras``; 0: LoRA off)."""
        return int(self._engine.scheduler.max_loras)

    def running_loras(self) -> set[int]:
        """The LoRA adapters of the running requests: what vLLM's scheduler counts against
        ``max_loras`` before it admits a request of another adapter."""
        return {r.lora for r in self._engine.scheduler.running if r.lora > 0}

    @property
    def outstanding(self) -> int:
        """Running plus waiting requests (what a least-outstanding router compares)."""
        sched = self._engine.scheduler
        return len(sched.running) + len(sched.waiting)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        sched = self._engine.scheduler
        return not sched.running and not len(sched.waiting)

    def running(self) -> tuple[Request, ...]:
        """The running batch, in the scheduler's order."""
        return tuple(self._engine.scheduler.running)

    def waiting(self, limit: int | None = None) -> tuple[Request, ...]:
        """The waiting queue in scheduling order (the first ``limit`` when given)."""
        q = self._engine.scheduler.waiting
        return tuple(q) if limit is None else tuple(q.head(limit))

    def live_requests(self) -> tuple[Request, ...]:
        """Every request live here (running or waiting), in no particular order."""
        return tuple(self._engine.live.values())

    def request(self, idx: int) -> Request | None:
        """The live (running or waiting) request with trace index ``idx`` here, if any."""
        return self._engine.live.get(idx)

    def holds(self, r: Request) -> bool:
        """``r`` is live (running or waiting) on this replica."""
        return self._engine.live.get(r.idx) is r

    def is_running(self, r: Request) -> bool:
        """``r`` is in the running batch here."""
        return r in self._engine.scheduler.running

    def computed_tokens(self, r: Request) -> int:
        """Tokens of ``r`` whose KV is here now (exact for decode-group members too)."""
        return int(self._engine.computed_tokens(r))

    def outputs(self, r: Request) -> int:
        """Output tokens ``r`` has now (exact for decode-group members too)."""
        return int(r.num_output + (self._engine.step - r.sync_step if r.sync_step >= 0 else 0))

    # ------------------------------------------------------------------ KV cache
    @property
    def kv_usage(self) -> float:
        """Share of the usable KV blocks in use (vLLM's ``kv_cache_usage_perc``)."""
        return float(self._engine.pool.usage())

    @property
    def kv_blocks_free(self) -> int:
        return int(self._engine.pool.num_free)

    @property
    def kv_blocks_usable(self) -> int:
        return int(self._engine.pool.usable_blocks)

    @property
    def kv_blocks_used(self) -> int:
        pool = self._engine.pool
        return int(pool.usable_blocks - pool.num_free)

    @property
    def kv_blocks_by_group(self) -> tuple[tuple[str, int], ...]:
        """A hybrid model's blocks in use split by KV cache group kind: (kind, blocks) in vLLM's
        group order (``full``, ``sliding_window(128)``, ...), adding up to ``kv_blocks_used``;
        () for a model with one block table."""
        used = getattr(self._engine.kv, "group_used", None)
        groups = self._engine.config.kv_cache_groups
        if used is None or not groups:
            return ()
        return tuple((kind, sum(used[i] for i in ids)) for kind, ids in group_kinds(groups).items())

    @property
    def prefix_caching(self) -> bool:
        return bool(self._engine.kv.caching)

    def cached_prefix_blocks(self, r: Request) -> int:
        """Leading blocks of ``r`` whose content this replica's prefix cache holds right now
        (what llm-d's precise prefix scorer learns from vLLM's KV events)."""
        kv = self._engine.kv
        if not kv.caching:
            return 0
        kv.init_request(r)  # idempotent: the block keys of r's prompt
        n = 0
        for i in range(r.num_shared_blocks):
            if not kv.is_cached(r, i):
                break
            n += 1
        return n

    def cpu_prefix_blocks(self, r: Request, start: int) -> int:
        """Blocks of ``r`` past its first ``start`` (the GPU hit) that this replica's CPU offload
        tier holds, in whole chunks from the one holding block ``start`` on, as the connector's
        admission lookup would find them (0 without a tier); llm-d's tiered prefix index sees the
        same from vLLM's KV events of the CPU medium."""
        conn = self._cpu_tier()
        if conn is None:
            return 0
        kv = self._engine.kv
        kv.init_request(r)
        ref = conn.manager.ref
        bpc = conn.bpc
        c = start // bpc
        while (c + 1) * bpc <= r.num_shared_blocks and kv.block_key(r, (c + 1) * bpc - 1) in ref:
            c += 1
        return max(0, c * bpc - start)

    @property
    def cpu_tier(self) -> CpuTierState | None:
        """The CPU offload tier's figures so far (None: no ``kv_offloading_size``)."""
        conn = self._cpu_tier()
        if conn is None:
            return None  # no tier, or a P/D connector (no CPU tier)
        st = conn.stats
        return CpuTierState(
            conn.manager.num_chunks,
            conn.manager.num_stored(),
            st.hit_tokens / st.queried_tokens if st.queried_tokens else None,
            st.loaded_tokens,
            st.stored_tokens,
        )

    def _cpu_tier(self) -> OffloadingConnector | None:
        conn = self._engine.kv_connector
        return conn.cpu_tier() if conn is not None else None

    # ------------------------------------------------------------------ records
    @property
    def records(self) -> Recorder:
        """The per-step and per-request records so far (read them, never write them)."""
        return self._engine.rec

    @property
    def prefix_hit_rate(self) -> float | None:
        """Prefix-cache hits over queries so far (None without prefix caching or queries)."""
        rec = self._engine.rec
        if not self._engine.config.enable_prefix_caching or not rec.prefix_queries:
            return None
        return float(rec.prefix_hits / rec.prefix_queries)

    @property
    def num_preemptions(self) -> int:
        return len(self._engine.rec.preemption_events)


def close_unheld(r: Request, t: float) -> None:
    """Abort ``r`` at ``t`` while no engine holds it (parked, in transit, or on a node just lost):
    it finishes as aborted, as ``Engine.abort`` finishes a held one."""
    r.status = FINISHED
    r.outcome = OUTCOME_ABORTED
    r.finish_time = t


__all__ = ["CpuTierState", "ReplicaView", "close_unheld"]
