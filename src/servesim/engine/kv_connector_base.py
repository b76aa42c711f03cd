"""The scheduler side of vLLM's KV connector (``kv_connector/v1/base.py``), as the scheduler asks it.

vLLM 0.33's ``Scheduler`` keeps one admission loop and asks its connector questions at fixed
points; servesim's ``Scheduler`` asks a ``KVConnector`` the same ones at the same points (None:
no connector, and none of this runs):

* admission, after the GPU prefix-cache lookup of a request that holds no blocks:
  ``get_num_new_matched_tokens(r, hit)`` -> (tokens the connector can supply beyond the hit,
  None = ask again next step; whether they load asynchronously). The scheduler then allocates
  (``KVCacheManager.allocate_slots`` with ``num_external_computed_tokens`` and, for an
  asynchronous load, ``delay_cache_blocks`` and the blocks in-flight prefills reserve) and says
  so: ``update_state_after_alloc(r, num_external, now)``. An asynchronous load parks the request
  in WAITING_FOR_REMOTE_KVS in the scheduler's KV-holding queue (``kv_holding.py``);
* end of ``schedule()`` (the step's duration known): ``build_connector_meta(plan, start, end)``;
* a request finishes (end of a step, or an abort), before its blocks are freed:
  ``request_finished(r)`` -> delay_free: True keeps its blocks allocated until the connector
  reports its send finished;
* the worker's report (``get_finished(t)``, vLLM's worker ``get_finished`` handed to
  ``update_connector_output``): loads and sends that ended by ``t``; the scheduler readies the
  loaded requests (vLLM's ``finished_recving_kv_req_ids``) and frees the sent ones' blocks.
  Asked at every step's end and before every schedule; ``drain(now)`` ends a run.

What the engine's fast path (the decode group and its stretches) asks besides, so that it may run
with a connector and stay byte-equal to the plain loop: ``decode_ok(r)`` (the connector has no
per-step work for ``r`` while it decodes, so it may decode lazily), ``group_allocated(blocks)``
(the blocks the group took in a step, which the plain loop would have shown it through the
plan), ``quiet()`` (the next step's ``build_connector_meta`` has nothing to do unless it
schedules, preempts or admits someone) and ``next_due()`` (no report before then).

The connector never edits the scheduler's queues, its running list or the block pool: it
answers. ``bind_kv_cache_manager`` gives it the replica's KV-cache manager (block keys, block
size) and the KV-holding queue, which it shows observers read-only (``connector.holding``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from servesim.engine.kv_cache_manager import KVCacheManager
    from servesim.engine.kv_connector import OffloadingConnector
    from servesim.engine.kv_holding import KVHoldingQueue
    from servesim.engine.request import Request
    from servesim.engine.step_plan import StepPlan


class KVConnectorOutput:
    """What the worker reports at a step's end (vLLM's ``KVConnectorOutput``): the requests whose
    load ended (their blocks hold the KV now) and the indices of those whose send ended (their
    blocks may be freed), each in the order the transfers were issued."""

    __slots__ = ("finished_recving", "finished_sending")

    def __init__(self, finished_recving: list[Request], finished_sending: list[int]) -> None:
        self.finished_recving = finished_recving
        self.finished_sending = finished_sending


class ConnectorStats:
    """A connector's figures over a run (vLLM's connector metrics and prefix-cache stats)."""

    __slots__ = (
        "hit_tokens",
        "load_jobs",
        "loaded_blocks",
        "loaded_tokens",
        "queried_tokens",
        "store_failures",
        "store_jobs",
        "stored_blocks",
        "stored_tokens",
    )

    def __init__(self) -> None:
        # vLLM's connector prefix-cache stats (first admissions only, like the GPU hit rate):
        self.queried_tokens = 0  # tokens beyond the GPU hit asked of the connector
        self.hit_tokens = 0  # of those, tokens the connector supplied
        self.loaded_tokens = 0  # tokens loaded, resumed requests included
        self.stored_tokens = 0
        self.loaded_blocks = 0  # GPU blocks written by loads / read by stores
        self.stored_blocks = 0
        self.load_jobs = 0
        self.store_jobs = 0
        self.store_failures = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        """vLLM's ``connector_prefix_cache_stats.record``: one admission's query (first ones)."""
        if not preempted:
            self.queried_tokens += num_tokens
            self.hit_tokens += num_hits

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class KVConnector(Protocol):
    """What servesim's scheduler asks a KV connector, with vLLM's names (module docstring)."""

    stats: ConnectorStats

    def bind_kv_cache_manager(self, kv: KVCacheManager, holding: KVHoldingQueue) -> None:
        """The replica's KV-cache manager, and its KV-holding queue (for observers only)."""
        ...

    def get_num_new_matched_tokens(self, r: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        """Tokens beyond the ``num_computed_tokens`` of the GPU hit the connector can supply
        (None: it cannot tell yet, ask again next step), and whether they load asynchronously."""
        ...

    def update_state_after_alloc(self, r: Request, num_external_tokens: int, now: float) -> None:
        """``r``'s blocks are allocated (at ``now``): issue the load of ``num_external_tokens``."""
        ...

    def build_connector_meta(self, plan: StepPlan, start: float, end: float) -> None:
        """The step (``start`` to ``end``) is scheduled: what the worker does with it."""
        ...

    def request_finished(self, r: Request) -> bool:
        """``r`` finished, its blocks not yet freed: True delays their free until the connector
        reports its send finished (vLLM's delay_free_blocks)."""
        ...

    def get_finished(self, t: float) -> KVConnectorOutput | None:
        """Transfers that ended by ``t`` (None: none did)."""
        ...

    def drain(self, now: float) -> KVConnectorOutput | None:
        """The run ends at ``now``: transfers the engine would step on for end (vLLM's engine
        steps, idle, until its worker reports them)."""
        ...

    def cpu_tier(self) -> OffloadingConnector | None:
        """The CPU offload tier this connector keeps (None: it keeps none)."""
        ...

    def decode_ok(self, r: Request) -> bool:
        """``r`` (running, its prompt computed) may decode in the decode group: scheduling it for
        one token does nothing in ``build_connector_meta`` but note its new blocks."""
        ...

    def group_allocated(self, blocks: list[int]) -> None:
        """The decode group took ``blocks`` in the step being scheduled (plain loop: through the
        plan's scheduled members)."""
        ...

    def quiet(self, allocating: bool) -> bool:
        """A step that schedules nobody, or only decode-group members (no admission, no
        preemption), is a no-op for ``build_connector_meta`` (``allocating``: it may take blocks
        from the pool that the connector is not shown)."""
        ...

    def next_due(self) -> float:
        """``get_finished(t)`` reports nothing for any ``t`` before this (inf: nothing is due)."""
        ...


__all__ = ["ConnectorStats", "KVConnector", "KVConnectorOutput"]
