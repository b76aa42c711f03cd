"""vLLM's native CPU offloading connector (scheduler side), on the seam of ``kv_connector_base.py``.

``OffloadingConnector`` is the scheduler side of vLLM's ``OffloadingConnector`` with the CPU
backend (``--kv-offloading-size``, ``--kv-offloading-backend native``): full prompt chunks are
stored as soon as they are computed (``offload_prompt_only``, vLLM's default), looked up on
admission after the GPU hit (``get_num_new_matched_tokens``), loaded asynchronously
(``update_state_after_alloc``: the request waits in WAITING_FOR_REMOTE_KVS in the scheduler's
KV-holding queue). ``build_connector_meta`` offers the step's scheduled and finished requests'
computed blocks for storing and flushes the stores of preempted requests, and of finished ones
whose blocks were handed out again (the worker waits for them in this step); ``request_finished``
makes a finished request's pending stores watch its blocks.

The worker is a timing model: a transfer ends at the first step end at or after its due time
(``StepCountTiming`` for the oracle cases, ``HostLinkTiming``: per-transfer overhead + bytes /
host-link bandwidth); ``get_finished`` reports them, in the order they were issued.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_connector_base import ConnectorStats, KVConnectorOutput
from servesim.engine.kv_holding import KVHoldingQueue
from servesim.engine.kv_offload import HIT_PENDING, MISS, CPUOffloadManager, RequestAccess
from servesim.engine.request import FINISHED, WAITING_FOR_REMOTE_KVS, Request
from servesim.errors import InputError, InternalError

if TYPE_CHECKING:
    from servesim.engine.step_plan import StepPlan

OffloadStats = ConnectorStats  # the name the offload figures have had (results, views, tests)


class StepCountTiming:
    """Transfers of a fixed number of steps (vLLM's oracle fake worker): a load or store issued
    in step k is reported finished in step k + ``load_steps`` / ``store_steps``."""

    def __init__(self, step_s: float, load_steps: int = 1, store_steps: int = 1) -> None:
        self.step_s = step_s
        self.load_steps = load_steps
        self.store_steps = store_steps

    def load_due(self, start: float, end: float, num_blocks: int) -> float:
        return start + (self.load_steps + 1) * self.step_s

    def store_due(self, start: float, end: float, num_blocks: int) -> float:
        return start + (self.store_steps + 1) * self.step_s


class HostLinkTiming:
    """GPU<->host copies over the host link (PCIe or C2C): ``overhead_s + bytes / bandwidth``.
    Loads start with the step that issues them (vLLM's worker submits them before the forward
    pass and the request waits, so the step itself is not slowed); stores start when the step's
    forward pass has written the blocks (vLLM defers them to the next step's start)."""

    def __init__(self, bytes_per_block: int, bandwidth_bytes_s: float, overhead_s: float) -> None:
        if bytes_per_block <= 0 or bandwidth_bytes_s <= 0 or overhead_s < 0:
            raise InputError("host-link timing needs bytes_per_block > 0, bandwidth > 0, overhead >= 0")
        self.bytes_per_block = bytes_per_block
        self.bandwidth = bandwidth_bytes_s
        self.overhead_s = overhead_s

    def seconds(self, num_blocks: int) -> float:
        return self.overhead_s + num_blocks * self.bytes_per_block / self.bandwidth

    def load_due(self, start: float, end: float, num_blocks: int) -> float:
        return start + self.seconds(num_blocks)

    def store_due(self, start: float, end: float, num_blocks: int) -> float:
        return end + self.seconds(num_blocks)


class _Job:
    __slots__ = ("blocks", "due", "is_store", "keys", "req")

    def __init__(self, req: Request, keys: list[int], blocks: list[int], is_store: bool, due: float) -> None:
        self.req = req
        self.keys = keys
        self.blocks = blocks
        self.is_store = is_store
        self.due = due


class _ReqState:
    """vLLM's ``RequestOffloadState`` for one full-attention group."""

    __slots__ = ("acc", "block_ids", "finished", "jobs", "local", "next_stored")

    def __init__(self) -> None:
        self.acc = RequestAccess()
        self.block_ids: list[int] = []
        self.next_stored = 0
        self.local = 0
        self.jobs: set[int] = set()
        self.finished = False


class OffloadingConnector:
    """Scheduler side of vLLM's OffloadingConnector over a CPU tier of ``num_chunks`` chunks."""

    def __init__(
        self,
        num_chunks: int,
        timing: StepCountTiming | HostLinkTiming,
        block_size: int,
        blocks_per_chunk: int = 1,
        prefix_caching: bool = True,
    ) -> None:
        if num_chunks < 0 or blocks_per_chunk < 1:
            raise InputError("the CPU tier needs num_chunks >= 0 and blocks_per_chunk >= 1")
        self.manager = CPUOffloadManager(num_chunks)
        self.timing = timing
        self.bs = block_size
        self.bpc = blocks_per_chunk
        self.tpc = block_size * blocks_per_chunk
        # Bound by the scheduler (bind_kv_cache_manager): block content keys, and its KV-holding
        # queue, shown to observers through it (``holding``; the connector itself never edits it).
        self.holding = KVHoldingQueue(priority=False)  # empty until bound
        self.key_of: Callable[[Request, int], int] | None = None
        self._states: dict[int, _ReqState] = {}
        self._jobs: dict[int, _Job] = {}
        self._due: list[tuple[float, int]] = []  # (due, job id) of the jobs, a heap (stale ones skipped)
        self._next_job = 0
        self._new_loads: list[int] = []
        self._finished_since: list[Request] = []
        self._allocated: set[int] = set()  # GPU blocks handed out in the current step
        self._fenced: dict[int, set[int]] = {}  # GPU block -> pending store jobs of finished requests
        self._flush: set[int] = set()
        self._being_loaded: set[int] | None = set() if prefix_caching else None
        self.stats = ConnectorStats()

    def bind_kv_cache_manager(self, kv: KVCacheManager, holding: KVHoldingQueue) -> None:
        self.key_of = kv.block_key
        self.holding = holding

    @property
    def finished_recving(self) -> set[int]:
        """Requests whose load was reported done and that the scheduler has not taken up yet."""
        return self.holding.finished_recving

    def cpu_tier(self) -> OffloadingConnector:
        return self

    def _issue(self, job: _Job) -> int:
        jid = self._next_job
        self._next_job += 1
        self._jobs[jid] = job
        heapq.heappush(self._due, (job.due, jid))
        return jid

    # -- keys ------------------------------------------------------------------------------------
    def _key(self, r: Request, c: int) -> int:
        if self.key_of is None:
            raise InternalError("invariant broken: the connector was not attached (attach())")
        return self.key_of(r, (c + 1) * self.bpc - 1)

    def _state(self, r: Request) -> _ReqState:
        st = self._states.get(r.idx)
        if st is None:
            st = self._states[r.idx] = _ReqState()
        return st

    def _keys(self, r: Request, st: _ReqState, lo: int, hi: int) -> list[int]:
        keys = []
        pos = st.acc.positions
        for c in range(lo, hi):
            k = self._key(r, c)
            pos[k] = (c + 1) * self.tpc
            keys.append(k)
        return keys

    def _num_keyed(self, r: Request) -> int:
        return (r.prompt_len + r.num_output) // self.bs // self.bpc

    # -- admission ---------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, r: Request, num_computed: int) -> tuple[int | None, bool]:
        """Tokens beyond the GPU hit the CPU tier can supply (None: ask again next step), and
        whether they load asynchronously (always, as vLLM without a sync-load budget)."""
        st = self._state(r)
        st.block_ids = []
        st.next_stored = 0
        if st.jobs:
            return None, False
        st.local = num_computed
        tpc = self.tpc
        keyed = self._num_keyed(r)
        max_hit = min(r.prompt_len + r.num_output, keyed * tpc)
        if max_hit - num_computed < tpc:
            hit = 0
        else:
            start = num_computed // tpc
            n_chunks = min(-(-max_hit // tpc), keyed)
            keys = self._keys(r, st, start, n_chunks)
            count = 0
            pending = False
            lookup = self.manager.lookup
            for k in keys:
                res = lookup(k)
                if res == MISS:
                    break
                count += 1
                if res == HIT_PENDING:
                    pending = True
            if count == 0:
                hit = 0
            elif pending:
                return None, False
            else:
                hit = min(max_hit, tpc * (start + count)) - num_computed
                if hit < tpc:
                    hit = 0
                elif self._being_loaded:
                    end = -(-(num_computed + hit) // tpc)
                    if any(k in self._being_loaded for k in keys[: end - start]):
                        return None, False
        return hit, hit > 0

    def update_state_after_alloc(self, r: Request, num_external: int, now: float) -> None:
        """Blocks are allocated: note them, and issue the load of ``num_external`` tokens."""
        self._allocated.update(r.blocks)
        if not num_external:
            return
        st = self._state(r)
        local = st.local
        cached = local + num_external
        n_gpu = -(-cached // self.bs)
        first = -(-local // self.bs)
        start_chunk = first // self.bpc
        n_chunks = -(-cached // self.tpc)
        keys = self._keys(r, st, start_chunk, n_chunks)
        self.manager.prepare_load(keys, st.acc)
        blocks = r.blocks[first:n_gpu]
        jid = self._issue(_Job(r, keys, blocks, False, self.timing.load_due(now, now, len(blocks))))
        st.jobs.add(jid)
        self._new_loads.append(jid)
        st.next_stored = n_chunks  # CHUNK_LEVEL policy: the loaded chunks are not stored again
        if self._being_loaded is not None:
            self._being_loaded.update(keys)
        self.stats.load_jobs += 1
        self.stats.loaded_blocks += len(blocks)
        self.stats.loaded_tokens += num_external

    # -- end of schedule() ---------------------------------------------------------------------------
    def build_connector_meta(self, plan: StepPlan, start: float, end: float) -> None:
        """Stores for the step's scheduled requests and the requests finished since the last
        step; flushes; LRU bookkeeping of finished requests. Called once per step."""
        for r, _n in plan.scheduled:
            st = self._state(r)
            new = r.blocks[len(st.block_ids) :]
            if new:
                st.block_ids.extend(new)
                self._allocated.update(new)
        for r in plan.preempted:
            pst = self._states.get(r.idx)
            if pst is not None and pst.jobs:
                self._flush.update(j for j in pst.jobs if j not in self._new_loads)
        if self._fenced and self._allocated:
            for b in self._allocated:
                jobs = self._fenced.get(b)
                if jobs:
                    self._flush.update(jobs)
        for r, n in plan.scheduled:
            nt = r.prompt_len + r.num_output
            self._store(r, min(r.num_computed + n, nt, r.prompt_len), start, end, False)
        finished = self._finished_since
        self._finished_since = []
        for r in finished:
            self._store(r, r.prompt_len, start, end, True)
        for r in finished:
            fst = self._states.get(r.idx)
            if fst is None:
                continue
            fst.finished = True
            self.manager.on_request_finished(fst.acc)
            if not fst.jobs:
                del self._states[r.idx]
        for jid in self._flush:
            job = self._jobs.get(jid)
            if job is not None:
                job.due = start  # the worker waits for it in this step
                heapq.heappush(self._due, (start, jid))
        self._flush = set()
        self._new_loads = []
        self._allocated = set()

    def _store(self, r: Request, offloadable: int, start: float, end: float, finished: bool) -> None:
        st = self._states.get(r.idx)
        if st is None:
            return
        n_chunks = min(offloadable // self.tpc, len(st.block_ids) // self.bpc, self._num_keyed(r))
        lo = st.next_stored
        if n_chunks <= lo:
            if n_chunks > st.next_stored:
                st.next_stored = n_chunks
            return
        keys = self._keys(r, st, lo, n_chunks)
        to_store = self.manager.prepare_store(keys, st.acc)
        if to_store is None:
            self.stats.store_failures += 1
            return
        if not to_store:
            st.next_stored = max(st.next_stored, n_chunks)
            return
        want = set(to_store)
        blocks = []
        for i, k in enumerate(keys):
            if k in want:
                c = lo + i
                blocks.extend(st.block_ids[c * self.bpc : (c + 1) * self.bpc])
        st.next_stored = max(st.next_stored, n_chunks)
        jid = self._issue(_Job(r, to_store, blocks, True, self.timing.store_due(start, end, len(blocks))))
        st.jobs.add(jid)
        self.stats.store_jobs += 1
        self.stats.stored_blocks += len(blocks)
        self.stats.stored_tokens += len(to_store) * self.tpc
        if finished:
            for b in blocks:
                self._fenced.setdefault(b, set()).add(jid)
                if b in self._allocated:
                    self._flush.add(jid)

    # -- after a step ------------------------------------------------------------------------------
    def request_finished(self, r: Request) -> bool:
        """A request finished (before its blocks are freed): its stores are built at the next
        step; its pending stores start watching its blocks. Its blocks are freed at once."""
        st = self._states.get(r.idx)
        if st is None:
            return False
        self._finished_since.append(r)
        for jid in st.jobs:
            job = self._jobs[jid]
            if job.is_store:
                for b in job.blocks:
                    self._fenced.setdefault(b, set()).add(jid)
        return False

    def get_finished(self, t: float) -> KVConnectorOutput | None:
        """The worker's report: every transfer due by ``t`` has finished (in job order)."""
        due = self._due
        if not due or due[0][0] > t:
            return None
        jobs = self._jobs
        done: set[int] = set()
        while due and due[0][0] <= t:
            d, jid = heapq.heappop(due)
            job = jobs.get(jid)
            if job is not None and job.due == d:  # else stale: done already, or flushed earlier
                done.add(jid)
        recving: list[Request] = []
        for jid in sorted(done):
            job = self._jobs.pop(jid)
            r = job.req
            st = self._states[r.idx]
            if job.is_store:
                self.manager.complete_store(job.keys)
            else:
                self.manager.complete_load(job.keys)
                if self._being_loaded:
                    self._being_loaded.difference_update(job.keys)
                if r.status == WAITING_FOR_REMOTE_KVS:
                    recving.append(r)
            if self._fenced and job.is_store and r.status == FINISHED:
                for b in job.blocks:
                    s = self._fenced.get(b)
                    if s is not None:
                        s.discard(jid)
                        if not s:
                            del self._fenced[b]
            st.jobs.discard(jid)
            if st.finished and not st.jobs:
                del self._states[r.idx]
        return KVConnectorOutput(recving, []) if recving else None

    def drain(self, now: float) -> KVConnectorOutput | None:
        """Nothing to end: vLLM's engine does not step on for stores in flight."""
        return None

    # -- the engine's fast path (kv_connector_base.py) ---------------------------------------------
    def decode_ok(self, r: Request) -> bool:
        """Offered every step, a decoding request stores nothing once its prompt's chunks are
        stored (``offload_prompt_only``): only a refused store (a full tier) is retried per step."""
        st = self._states.get(r.idx)
        return st is None or st.next_stored >= r.prompt_len // self.tpc

    def group_allocated(self, blocks: list[int]) -> None:
        """New blocks of decode-group members: handed out in this step (the fences check them)."""
        if self._fenced or self._finished_since:  # else nothing reads them before the step's end
            self._allocated.update(blocks)

    def quiet(self, allocating: bool) -> bool:
        """Stores of finished requests are built at the next step; a fenced block handed out
        flushes its store (so a step that allocates is quiet only without fences)."""
        return not self._finished_since and not (allocating and self._fenced)

    def next_due(self) -> float:
        """The earliest due time of a job in flight (stale heap entries dropped on the way)."""
        due = self._due
        jobs = self._jobs
        while due:
            d, jid = due[0]
            job = jobs.get(jid)
            if job is not None and job.due == d:
                return d
            heapq.heappop(due)
        return math.inf

    def has_pending_loads(self) -> bool:
        return any(not j.is_store for j in self._jobs.values())

    def num_pending(self) -> int:
        return len(self._jobs)


__all__ = [
    "WAITING_FOR_REMOTE_KVS",
    "HostLinkTiming",
    "OffloadStats",
    "OffloadingConnector",
    "StepCountTiming",
]
