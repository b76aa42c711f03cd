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

import math
from typing import Any, Protocol

from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS, OffloadStats
from servesim.engine.request import OUTCOME_ABORTED, Request
from servesim.errors import InternalError


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
        self.remote_prefill: set[int] = set(remote_prefill or ())
        self.remote_decode: set[int] = set(remote_decode or ())
        self.holding: Any = None
        self.key_of: Any = None
        self.kv: Any = None  # the replica's KVCacheManager (set by the engine)
        self.finished_recving: set[int] = set()
        self.inflight_prefills: dict[int, Request] = {}
        self.gpu_hit: dict[int, int] = {}
        self.step_loaded: list[tuple[Request, int]] = []
        self.stats = OffloadStats()
        self._recv: dict[int, tuple[Request, float]] = {}  # idx -> (request, due)
        self._new_sends: list[Request] = []  # finished since the last step: sends not issued yet
        self._send_due: dict[int, float] = {}  # idx -> when its send ends (inf: not known yet)
        self._kept: dict[int, tuple[list[int], int, int]] = {}  # idx -> (blocks, live, cached)
        # What happened, per request index (a cluster's per-leg times and invariants):
        self.recv_started: dict[int, float] = {}  # blocks allocated, the receive issued
        self.recv_tokens: dict[int, int] = {}
        self.recv_done: dict[int, float] = {}  # the receive reported finished
        self.sent: dict[int, float] = {}  # the send reported finished (blocks freed)
        self.recv_failed: dict[int, float] = {}  # the source was lost mid-receive (recomputed here)
        self.recv_blocks = 0
        self.sent_blocks = 0

    def attach(self, holding: Any, key_of: Any) -> None:
        self.holding = holding
        self.key_of = key_of

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

    def update_state_after_alloc(self, r: Request, num_external: int, now: float, end: float) -> None:
        if r.idx not in self.remote_prefill:
            return
        self.remote_prefill.discard(r.idx)  # only one transfer per request
        if not num_external:
            return
        bs = self.kv.block_size
        first = -(-(r.prompt_len - num_external) // bs)
        n_blocks = len(r.blocks) - first
        if self.recv_due_fn is not None:
            due = self.recv_due_fn(r, now, end, n_blocks)
        elif self.timing is not None:
            due = self.timing.load_due(now, end, n_blocks)
        else:
            raise InternalError("invariant broken: a P/D connector without timing or link")
        self._recv[r.idx] = (r, due)
        self.recv_started[r.idx] = now
        self.recv_tokens[r.idx] = num_external
        self.recv_blocks += n_blocks
        self.stats.load_jobs += 1
        self.stats.loaded_blocks += n_blocks
        self.stats.loaded_tokens += num_external

    # -- end of schedule() -----------------------------------------------------------------------
    def build_connector_meta(self, plan: Any, start: float, end: float) -> None:
        inflight = self.inflight_prefills
        for r in plan.preempted:
            inflight.pop(r.idx, None)
        for r, n in plan.scheduled:
            if r.num_computed + n >= r.prompt_len + r.num_output:
                inflight.pop(r.idx, None)
        if self._new_sends:
            for r in self._new_sends:  # reqs_to_send goes to the worker with this step
                self.stats.store_jobs += 1
                if self.send_steps is not None:
                    self._send_due[r.idx] = start + (self.send_steps + 1) * self.step_s
            self._new_sends = []

    # -- after a step ------------------------------------------------------------------------------
    def request_finished(self, r: Request) -> None:
        """A prefill leg that finished keeps its blocks for the transfer (vLLM's delay_free):
        they leave the request here, so the scheduler's free returns none of them. An aborted
        one sends nothing (NixlConnector delays the free only of a prefill that finished)."""
        self.inflight_prefills.pop(r.idx, None)
        if r.outcome == OUTCOME_ABORTED:
            self.remote_decode.discard(r.idx)
            self.remote_prefill.discard(r.idx)
            return
        if r.idx not in self.remote_decode or not r.blocks:
            return
        self.remote_decode.discard(r.idx)
        self._kept[r.idx] = (r.blocks, r.num_live_blocks, r.num_cached_blocks)
        r.blocks = []
        r.num_live_blocks = r.num_cached_blocks = 0
        self._new_sends.append(r)
        if r.idx not in self._send_due:
            self._send_due[r.idx] = math.inf

    def send_done(self, idx: int, t: float) -> None:
        """A cluster's link: the decode replica has read request ``idx``'s KV by ``t``."""
        self._send_due[idx] = t

    def fail_recv(self, idx: int, t: float) -> None:
        """The KV source was lost mid-transfer (vLLM's ``kv_load_failure_policy`` "recompute"):
        the receive is reported finished with only the local prefix-cache hit valid, so the
        request keeps its blocks and recomputes the rest of its prompt here."""
        r, _ = self._recv.pop(idx)
        self.recv_failed[idx] = t
        r.num_computed = self.gpu_hit.get(idx, 0)
        if r.status == WAITING_FOR_REMOTE_KVS:
            self.finished_recving.add(idx)

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

    def pending_sends(self) -> list[int]:
        """Requests whose KV this (prefill) side still holds for a decode replica."""
        return list(self._kept)

    def receiving(self, idx: int) -> bool:
        """Request ``idx``'s KV is on its way here (its receive not reported yet)."""
        return idx in self._recv

    def complete_due(self, t: float) -> None:
        """``update_connector_output``: receives and sends that ended by ``t``."""
        if self._recv:
            for idx in [i for i, (_, due) in self._recv.items() if due <= t]:
                r, _ = self._recv.pop(idx)
                self.recv_done[idx] = t
                if r.status == WAITING_FOR_REMOTE_KVS:
                    self.finished_recving.add(idx)
        if self._kept:
            for idx in [i for i in self._kept if self._send_due.get(i, math.inf) <= t]:
                blocks, live, cached = self._kept.pop(idx)
                del self._send_due[idx]
                self.kv.pool.free(blocks, live, cached)
                self.sent[idx] = t
                self.sent_blocks += len(blocks)

    def drain(self, now: float) -> None:
        """End of run: sends still pending end (at their due time, or ``now`` if never read);
        vLLM's engine would step on, idle, until its worker reported them."""
        for idx in list(self._kept):
            due = self._send_due.get(idx, math.inf)
            self.send_done(idx, due if due < math.inf else now)
        self.complete_due(math.inf)

    def kept_blocks(self) -> list[list[int]]:
        """Blocks held for sends not yet done (the engine's block-conservation check)."""
        return [b for b, _, _ in self._kept.values()]

    def keeps_stepping(self) -> bool:
        """vLLM's engine steps on while requests wait for their KV, and while finished prefill
        legs still hold blocks for their sends (``Scheduler.has_finished_requests``)."""
        return len(self.holding) > 0 or bool(self._kept)

    def next_due(self) -> float:
        """The earliest time a receive or a send in flight here ends (inf: none will)."""
        t = min((due for _, due in self._recv.values()), default=math.inf)
        for idx in self._kept:
            due = self._send_due.get(idx, math.inf)
            if due < t:
                t = due
        return t

    def has_pending_loads(self) -> bool:
        return bool(self._recv)

    def num_pending(self) -> int:
        return len(self._recv) + len(self._kept)


__all__ = ["PDConnector"]
