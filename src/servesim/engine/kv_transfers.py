"""The scheduler's bookkeeping for its KV connector: what vLLM's ``Scheduler`` keeps beside the
connector, and the points where it asks the connector (``kv_connector_base.py`` lists them).

* the KV-holding queue (``kv_holding.py``): requests whose blocks are allocated for an
  asynchronous load, parked until the connector reports the load finished;
* ``inflight_prefills`` (vLLM's ``_inflight_prefills``): requests still prefilling, whose
  remaining blocks an asynchronous load must leave free (``reserved_blocks``);
* ``sending``: finished requests whose blocks the connector keeps for a send (delay_free),
  freed when it reports the send finished;
* ``local_hit``: each loading request's GPU prefix hit at admission (its prefix-hit record).

The scheduler's one admission loop calls in here; the engine asks ``transfers_done`` before
every schedule and the scheduler at every step's end, ``build_connector_meta`` once a step's
duration is known, ``keeps_stepping`` when nothing is scheduled, ``drain`` at the end of a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_holding import KVHoldingQueue
from servesim.engine.request import PREEMPTED, WAITING, WAITING_FOR_REMOTE_KVS, Request

if TYPE_CHECKING:
    from servesim.engine.kv_connector_base import KVConnector, KVConnectorOutput
    from servesim.engine.step_plan import StepPlan


class KVTransferState:
    """The scheduler's side of the connector seam for one replica."""

    __slots__ = ("connector", "holding", "inflight_prefills", "kv", "local_hit", "sending")

    def __init__(self, connector: KVConnector, kv: KVCacheManager, priority: bool) -> None:
        self.connector = connector
        self.kv = kv
        self.holding = KVHoldingQueue(priority)
        self.inflight_prefills: dict[int, Request] = {}
        self.sending: dict[int, Request] = {}
        self.local_hit: dict[int, int] = {}
        connector.bind_kv_cache_manager(kv, self.holding)

    # -- admission ---------------------------------------------------------------------------
    def update_waiting_for_remote_kv(self, r: Request) -> None:
        """vLLM's ``_update_waiting_for_remote_kv``: ``r``'s load has finished, its blocks are
        hashed now; a request whose every token arrived recomputes its last one (to sample)."""
        kv = self.kv
        if kv.caching:
            kv.cache_blocks(r, r.num_computed)
        num_tokens = r.prompt_len + r.num_output
        if r.num_computed == num_tokens:
            r.num_computed = num_tokens - 1
        self.holding.promoted(r)
        r.status = PREEMPTED if r.num_preemptions else WAITING

    def reserved_blocks(self) -> int:
        """vLLM's ``_inflight_prefill_reserved_blocks``: blocks in-flight prefills still need."""
        kv = self.kv
        bs = kv.block_size
        mml = kv.max_model_len
        total = 0
        for r in self.inflight_prefills.values():
            num_tokens = r.prompt_len + r.num_output
            need = -(-(num_tokens if num_tokens < mml else mml) // bs) - len(r.blocks)
            if need > 0:
                total += need
        return total

    def allocated(
        self, r: Request, ext: int, now: float, fresh: bool, hit_tokens: int, load_async: bool
    ) -> bool:
        """``r``'s blocks are allocated: the connector is told (``update_state_after_alloc``), a
        first query counted; an asynchronous load parks ``r`` in the KV-holding queue
        (WAITING_FOR_REMOTE_KVS, its computed tokens set) and True is returned."""
        conn = self.connector
        conn.update_state_after_alloc(r, ext, now)
        if fresh:
            conn.stats.record(r.prompt_len + r.num_output - hit_tokens, ext, r.num_preemptions > 0)
        if not load_async:
            return False
        r.status = WAITING_FOR_REMOTE_KVS
        r.num_computed = hit_tokens + ext
        self.inflight_prefills[r.idx] = r
        self.local_hit[r.idx] = hit_tokens
        self.holding.add_loading(r)
        return True

    def admitted(self, plan: StepPlan, r: Request, gpu: int, n: int) -> None:
        """``r`` joined the running list with ``gpu`` of its computed tokens from the prefix
        cache and ``n`` to compute: the tokens the connector brought, and whether it still
        prefills after this step."""
        computed = r.num_computed
        if computed > gpu:
            if plan.loaded is None:
                plan.loaded = []
            plan.loaded.append((r, computed - gpu))
        if computed + n < r.prompt_len + r.num_output:
            self.inflight_prefills[r.idx] = r
        else:
            self.inflight_prefills.pop(r.idx, None)

    def prefills_done(self, plan: StepPlan) -> None:
        """End of ``schedule()``: prefills this step preempts or completes leave the reservation."""
        inflight = self.inflight_prefills
        for r in plan.preempted:
            inflight.pop(r.idx, None)
        for r, n in plan.scheduled:
            if r.num_computed + n >= r.prompt_len + r.num_output:
                inflight.pop(r.idx, None)

    # -- the step and its results ------------------------------------------------------------
    def build_connector_meta(self, plan: StepPlan, start: float, end: float) -> None:
        """The step, scheduled from ``start`` to ``end``, goes to the connector's worker."""
        self.connector.build_connector_meta(plan, start, end)

    def request_finished(self, r: Request) -> bool:
        """vLLM's ``_connector_finished``: ``r`` finished; True when the connector keeps its
        blocks for a send (freed when it reports the send done)."""
        self.inflight_prefills.pop(r.idx, None)
        if self.connector.request_finished(r):
            self.sending[r.idx] = r
            return True
        return False

    def remove(self, r: Request) -> bool:
        """``r`` leaves the KV-holding queue (an abort); False if it was not in it."""
        if r not in self.holding:
            return False
        self.holding.remove(r)
        self.local_hit.pop(r.idx, None)
        return True

    def transfers_done(self, t: float) -> None:
        """vLLM's ``_update_from_kv_xfer_finished``: the transfers the connector reports ended by
        ``t``. Loaded requests join the KV-holding queue's ready ones; sent ones free blocks."""
        self._apply(self.connector.get_finished(t))

    def drain(self, now: float) -> None:
        """The run ends at ``now``: the transfers an idle engine would still step for end."""
        self._apply(self.connector.drain(now))

    def _apply(self, out: KVConnectorOutput | None) -> None:
        if out is None:
            return
        holding = self.holding
        for r in out.finished_recving:
            holding.recv_finished(r)
        free = self.kv.free
        sending = self.sending
        for idx in out.finished_sending:
            free(sending.pop(idx))

    def keeps_stepping(self) -> bool:
        """vLLM's engine steps on, with nothing to run, while requests wait for their KV and
        while finished ones keep their blocks for a send (``has_finished_requests``)."""
        return len(self.holding) > 0 or len(self.sending) > 0


__all__ = ["KVTransferState"]
