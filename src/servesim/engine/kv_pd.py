"""Prefill/decode disaggregation through vLLM's KV-connector seam: the scheduler side of vLLM
0.33's ``NixlConnector`` (pull mode, ``nixl/pull_scheduler.py``), for both legs.

* **Decode leg** (``do_remote_prefill``): a request whose prompt KV was computed on a prefill
  replica. On admission ``get_num_new_matched_tokens`` says the whole prompt (minus the local
  prefix-cache hit) loads asynchronously; the request gets its blocks and waits in
  WAITING_FOR_REMOTE_KVS until the worker reports the receive finished (``finished_recving``);
  ``_update_waiting_for_remote_kv`` then caches the blocks and rewinds one token, so the first
  step recomputes only the last prompt token and samples the first output. The flag is cleared
  at the first allocation (vLLM: "only trigger 1 KV transfer per request"): a request preempted
  later recomputes locally.
* **Prefill leg** (``do_remote_decode``): the request runs with ``max_tokens`` 1; when it
  finishes ``request_finished`` returns delay_free, so its blocks stay allocated (hashed blocks
  stay in the prefix cache) until the worker reports the send finished (``finished_sending``).

The worker is a timing model: ``StepCountTiming`` (the oracle's fake worker: a receive issued in
step k ends in step k + ``load_steps``, a send issued at the first step after the finish ends
``store_steps`` later) or, in a cluster, a link that decides when each transfer lands
(``recv_due``) and tells the prefill side when its send is done (``send_done``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_connector_base import ConnectorStats, KVConnectorOutput
from servesim.engine.kv_holding import KVHoldingQueue
from servesim.engine.request import OUTCOME_ABORTED, WAITING_FOR_REMOTE_KVS, Request
from servesim.errors import InternalError

if TYPE_CHECKING:
    from servesim.engine.kv_connector import OffloadingConnector
    from servesim.engine.step_plan import StepPlan


class PDTiming(Protocol):
    def load_due(self, start: float, end: float, num_blocks: int) -> float: ...


class PDConnector:
    """Scheduler side of a P/D connector on one replica (kv_both: either leg per request).

    ``remote_prefill`` / ``remote_decode``: request indices of the decode / prefill legs
    (``mark_remote_prefill`` / ``mark_remote_decode`` add more, for a cluster's router).
    ``recv_due(r, start, end, num_blocks)`` (optional) overrides the timing's receive time: a
    cluster's link. Sends end when the timing says (``sends_by_steps``) or when ``send_done`` is
    called (a cluster).
    """

    def __init__(
        self,
        timing: PDTiming | None = None,
        remote_prefill: set[int] | None = None,
        remote_decode: set[int] | None = None,
        *,
        send_steps: int | None = None,
        step_s: float = 0.0,
        recv_due: Any = None,
    ) -> None:
        self.timing = timing
        self.recv_due_fn = recv_due
        self.send_steps = send_steps  # None: sends end when send_done() says (a cluster)
        self.step_s = step_s
        # Set by the engine: told when a due time is set from outside (``Engine._wake``).
        self.wake: Callable[[float], None] | None = None
        self.remote_prefill: set[int] = set(remote_prefill or ())
        self.remote_decode: set[int] = set(remote_decode or ())
        # Bound by the scheduler (bind_kv_cache_manager): the replica's KV-cache manager, and its
        # KV-holding queue, shown to observers through it (``holding``; it never edits it itself).
        self.kv: KVCacheManager | None = None
        self.holding = KVHoldingQueue(priority=False)  # empty until bound
        self.gpu_hit: dict[int, int] = {}  # receiving request -> its local prefix hit
        self.stats = ConnectorStats()
        self._issued = 0  # transfers issued so far: the order they are reported in
        self._recv: dict[int, tuple[Request, float, int]] = {}  # idx -> (request, due, order)
        self._recv_heap: list[tuple[float, int]] = []  # (due, idx); stale entries skipped
        self._failed: list[Request] = []  # receives cut off (fail_recv), not reported yet
        self._new_sends: list[Request] = []  # finished since the last step: sends not issued yet
        self._send_due: dict[int, float] = {}  # idx -> when its send ends (inf: not known yet)
        self._kept: dict[int, tuple[int, Request]] = {}  # idx -> (order, the leg keeping blocks)
        self._send_heap: list[tuple[float, int]] = []  # (due, idx) of kept legs; stale skipped
        # What happened, per request index (a cluster's per-leg times and invariants):
        self.recv_started: dict[int, float] = {}  # blocks allocated, the receive issued
        self.recv_tokens: dict[int, int] = {}
        self.recv_done: dict[int, float] = {}  # the receive reported finished
        self.sent: dict[int, float] = {}  # the send reported finished (blocks freed)
        self.recv_failed: dict[int, float] = {}  # the source was lost mid-receive (recomputed here)
        self.recv_blocks = 0
        self.sent_blocks = 0

    def bind_kv_cache_manager(self, kv: KVCacheManager, holding: KVHoldingQueue) -> None:
        self.kv = kv
        self.holding = holding

    @property
    def finished_recving(self) -> set[int]:
        """Decode legs whose receive was reported done (or cut off) and that the scheduler has not
        taken up yet."""
        done = self.holding.finished_recving
        if self._failed:
            return done | {r.idx for r in self._failed if r.status == WAITING_FOR_REMOTE_KVS}
        return done

    def cpu_tier(self) -> OffloadingConnector | None:
        return None

    def mark_remote_prefill(self, idx: int) -> None:
        self.remote_prefill.add(idx)

    def mark_remote_decode(self, idx: int) -> None:
        self.remote_decode.add(idx)

    # -- admission ---------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, r: Request, num_computed: int) -> tuple[int | None, bool]:
        """The decode leg pulls every prompt token the local prefix cache lacks, asynchronously."""
        if r.idx in self.remote_prefill:
            count = r.prompt_len - num_computed
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, r: Request, num_external: int, now: float) -> None:
        if r.idx not in self.remote_prefill:
            return
        self.remote_prefill.discard(r.idx)  # only one transfer per request
        if not num_external:
            return
        if self.kv is None:
            raise InternalError("invariant broken: the P/D connector was not bound to a replica")
        first = -(-(r.prompt_len - num_external) // self.kv.block_size)
        n_blocks = len(r.blocks) - first
        if self.recv_due_fn is not None:
            due = self.recv_due_fn(r, now, now, n_blocks)
        elif self.timing is not None:
            due = self.timing.load_due(now, now, n_blocks)
        else:
            raise InternalError("invariant broken: a P/D connector without timing or link")
        self._recv[r.idx] = (r, due, self._issued)
        self._issued += 1
        heapq.heappush(self._recv_heap, (due, r.idx))
        self.gpu_hit[r.idx] = r.prompt_len - num_external
        self.recv_started[r.idx] = now
        self.recv_tokens[r.idx] = num_external
        self.recv_blocks += n_blocks
        self.stats.load_jobs += 1
        self.stats.loaded_blocks += n_blocks
        self.stats.loaded_tokens += num_external

    # -- end of schedule() -----------------------------------------------------------------------
    def build_connector_meta(self, plan: StepPlan, start: float, end: float) -> None:
        if self._new_sends:
            for r in self._new_sends:  # reqs_to_send goes to the worker with this step
                self.stats.store_jobs += 1
                if self.send_steps is not None:
                    self._set_send_due(r.idx, start + (self.send_steps + 1) * self.step_s)
            self._new_sends = []

    # -- after a step ------------------------------------------------------------------------------
    def request_finished(self, r: Request) -> bool:
        """A prefill leg that finished keeps its blocks for the transfer (vLLM's delay_free:
        True, the scheduler frees them when the send is reported done). An aborted one sends
        nothing (NixlConnector delays the free only of a prefill that finished)."""
        if r.outcome == OUTCOME_ABORTED:
            self.remote_decode.discard(r.idx)
            self.remote_prefill.discard(r.idx)
            return False
        if r.idx not in self.remote_decode or not r.blocks:
            return False
        self.remote_decode.discard(r.idx)
        self._kept[r.idx] = (self._issued, r)
        self._issued += 1
        self._new_sends.append(r)
        due = self._send_due.get(r.idx)
        if due is None:
            self._send_due[r.idx] = math.inf
        elif due < math.inf:
            heapq.heappush(self._send_heap, (due, r.idx))
        return True

    def _set_send_due(self, idx: int, t: float) -> None:
        self._send_due[idx] = t
        if idx in self._kept and t < math.inf:
            heapq.heappush(self._send_heap, (t, idx))

    def send_done(self, idx: int, t: float) -> None:
        """A cluster's link: the decode replica has read request ``idx``'s KV by ``t``."""
        self._set_send_due(idx, t)
        if self.wake is not None:
            self.wake(t)  # the replica may be idling in a span past ``t``: it ends there

    def fail_recv(self, idx: int, t: float) -> None:
        """The KV source was lost mid-transfer (vLLM's ``kv_load_failure_policy`` "recompute"):
        the receive is reported finished with only the local prefix-cache hit valid, so the
        request keeps its blocks and recomputes the rest of its prompt here."""
        r, _, _ = self._recv.pop(idx)
        self.recv_failed[idx] = t
        r.num_computed = self.gpu_hit.pop(idx, 0)
        self._failed.append(r)

    def cancel_recv(self, idx: int) -> None:
        """The request was aborted mid-receive (its blocks went back with it): the read is cut."""
        self._recv.pop(idx, None)

    def resend(self, idx: int) -> None:
        """The decode replica that was reading request ``idx``'s KV is lost: keep the blocks until
        another one reads them (``send_done``) or the planner recomputes instead (``send_done(now)``)."""
        if idx in self._kept:
            self._send_due[idx] = math.inf

    def holds(self, idx: int, t: float) -> bool:
        """Request ``idx``'s KV is still here for a decode replica to read (its send not done by ``t``)."""
        return idx in self._kept and self._send_due.get(idx, math.inf) > t

    def kept_blocks(self) -> list[list[int]]:
        """Blocks held for sends not yet done."""
        return [r.blocks for _, r in self._kept.values()]

    def pending_sends(self) -> list[int]:
        """Requests whose KV this (prefill) side still holds for a decode replica."""
        return list(self._kept)

    def receiving(self, idx: int) -> bool:
        """Request ``idx``'s KV is on its way here (its receive not reported yet)."""
        return idx in self._recv

    def get_finished(self, t: float) -> KVConnectorOutput | None:
        """The worker's report: receives and sends that ended by ``t`` (each in the order they
        were issued), and receives cut off since the last report."""
        recving: list[Request] = []
        if self._failed:
            recving, self._failed = self._failed, []
        for idx in self._due(self._recv_heap, t, self._recv_order):
            r, _, _ = self._recv.pop(idx)
            self.recv_done[idx] = t
            self.gpu_hit.pop(idx, None)
            if r.status == WAITING_FOR_REMOTE_KVS:
                recving.append(r)
        sending: list[int] = []
        for idx in self._due(self._send_heap, t, self._send_order):
            _, r = self._kept.pop(idx)
            del self._send_due[idx]
            self.sent[idx] = t
            self.sent_blocks += len(r.blocks)
            sending.append(idx)
        return KVConnectorOutput(recving, sending) if recving or sending else None

    @staticmethod
    def _due(heap: list[tuple[float, int]], t: float, order: Any) -> list[int]:
        """Pop the entries due by ``t`` off ``heap``; ``order(idx, due)`` is the transfer's issue
        order, or None when the entry is stale (the transfer is gone, or its due time moved)."""
        if not heap or heap[0][0] > t:
            return []
        due: dict[int, int] = {}
        while heap and heap[0][0] <= t:
            d, idx = heapq.heappop(heap)
            k = order(idx, d)
            if k is not None:
                due[idx] = k
        return sorted(due, key=due.__getitem__)

    def _recv_order(self, idx: int, due: float) -> int | None:
        e = self._recv.get(idx)
        return e[2] if e is not None and e[1] == due else None

    def _send_order(self, idx: int, due: float) -> int | None:
        e = self._kept.get(idx)
        return e[0] if e is not None and self._send_due.get(idx) == due else None

    def drain(self, now: float) -> KVConnectorOutput | None:
        """End of run: sends still pending end (at their due time, or ``now`` if never read);
        vLLM's engine would step on, idle, until its worker reported them."""
        for idx in list(self._kept):
            due = self._send_due.get(idx, math.inf)
            self.send_done(idx, due if due < math.inf else now)
        return self.get_finished(math.inf)

    def next_due(self) -> float:
        """The earliest time a receive or a send in flight here ends (inf: none will)."""
        t = math.inf
        for heap, order in ((self._recv_heap, self._recv_order), (self._send_heap, self._send_order)):
            while heap and order(heap[0][1], heap[0][0]) is None:
                heapq.heappop(heap)  # stale
            if heap and heap[0][0] < t:
                t = heap[0][0]
        return t

    # -- the engine's fast path (kv_connector_base.py) ---------------------------------------------
    def decode_ok(self, r: Request) -> bool:
        """Neither leg does anything per decode step: a receive ends before the first one, a send
        starts when the request finishes."""
        return True

    def group_allocated(self, blocks: list[int]) -> None:
        return None

    def quiet(self, allocating: bool) -> bool:
        return not self._new_sends and not self._failed

    def has_pending_loads(self) -> bool:
        return bool(self._recv)


__all__ = ["PDConnector"]
