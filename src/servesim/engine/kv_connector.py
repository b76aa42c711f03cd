"""vLLM's KV-connector seam in the scheduler, and its native CPU offloading connector.

vLLM 0.33's ``Scheduler`` talks to a KV connector at four points; servesim's scheduler does the
same when it is given one (``Scheduler.connector``; None = the plain engine, unchanged):

* admission (``waiting_pass``): after the GPU prefix-cache lookup, ``get_num_new_matched_tokens``
  says how many further tokens the connector can supply and whether the load is asynchronous.
  An asynchronous load gets its blocks (``update_state_after_alloc``), the request waits in
  WAITING_FOR_REMOTE_KVS in the queue of requests holding KV blocks (drained before the waiting
  queue, as vLLM's ``kv_holding_waiting``), and is admitted once the load has finished;
* end of ``schedule()`` (``build_connector_meta``): the step's scheduled and finished requests
  offer their computed blocks for storing; stores of preempted requests, and of finished ones
  whose blocks were handed out again, are flushed (the worker waits for them in this step);
* ``request_finished``: a finished request's pending stores start watching its blocks;
* ``update_connector_output``: transfers reported finished at a step's end.

``OffloadingConnector`` is the scheduler side of vLLM's ``OffloadingConnector`` with the CPU
backend (``--kv-offloading-size``, ``--kv-offloading-backend native``): full prompt chunks are
stored as soon as they are computed (``offload_prompt_only``, vLLM's default), looked up on
admission after the GPU hit, loaded asynchronously. The worker is a timing model: a transfer
ends at the first step end at or after its due time (``StepCountTiming`` for the oracle cases,
``HostLinkTiming``: per-transfer overhead + bytes / host-link bandwidth).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servesim.engine.kv_offload import HIT_PENDING, MISS, CPUOffloadManager, RequestAccess
from servesim.engine.request import FINISHED, PREEMPTED, RUNNING, WAITING, Request
from servesim.errors import InputError, InternalError

WAITING_FOR_REMOTE_KVS = 6  # vLLM's RequestStatus of that name (servesim's other codes are 0-5)


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


class OffloadStats:
    """The offload figures of a run (vLLM's connector metrics and prefix-cache split)."""

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
        self.queried_tokens = 0  # tokens beyond the GPU hit asked of the CPU tier
        self.hit_tokens = 0  # of those, tokens the CPU tier supplied
        self.loaded_tokens = 0  # tokens loaded from the CPU tier, resumed requests included
        self.stored_tokens = 0
        self.loaded_blocks = 0  # GPU blocks written by loads / read by stores
        self.stored_blocks = 0
        self.load_jobs = 0
        self.store_jobs = 0
        self.store_failures = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


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
        self.holding: Any = None  # set by attach(): the queue of requests holding KV blocks
        self.key_of: Callable[[Request, int], int] | None = None
        self._states: dict[int, _ReqState] = {}
        self._jobs: dict[int, _Job] = {}
        self._next_job = 0
        self._new_loads: list[int] = []
        self._finished_since: list[Request] = []
        self._allocated: set[int] = set()  # GPU blocks handed out in the current step
        self._fenced: dict[int, set[int]] = {}  # GPU block -> pending store jobs of finished requests
        self._flush: set[int] = set()
        self._being_loaded: set[int] | None = set() if prefix_caching else None
        self.finished_recving: set[int] = set()  # request idx whose load has been reported done
        self.inflight_prefills: dict[int, Request] = {}
        self.gpu_hit: dict[int, int] = {}  # loading request -> its GPU prefix hit at admission
        self.step_loaded: list[tuple[Request, int]] = []  # this step's admissions: tokens loaded
        self.stats = OffloadStats()

    def attach(self, holding: Any, key_of: Callable[[Request, int], int]) -> None:
        self.holding = holding
        self.key_of = key_of

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

    def update_state_after_alloc(self, r: Request, num_external: int, now: float, end: float) -> None:
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
        jid = self._next_job
        self._next_job += 1
        blocks = r.blocks[first:n_gpu]
        self._jobs[jid] = _Job(r, keys, blocks, False, self.timing.load_due(now, end, len(blocks)))
        st.jobs.add(jid)
        self._new_loads.append(jid)
        st.next_stored = n_chunks  # CHUNK_LEVEL policy: the loaded chunks are not stored again
        if self._being_loaded is not None:
            self._being_loaded.update(keys)
        self.stats.load_jobs += 1
        self.stats.loaded_blocks += len(blocks)
        self.stats.loaded_tokens += num_external

    # -- end of schedule() ---------------------------------------------------------------------------
    def build_connector_meta(self, plan: Any, start: float, end: float) -> None:
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
        inflight = self.inflight_prefills
        for r in plan.preempted:
            inflight.pop(r.idx, None)
        for r, n in plan.scheduled:
            nt = r.prompt_len + r.num_output
            self._store(r, min(r.num_computed + n, nt, r.prompt_len), start, end, False)
            if r.num_computed + n >= nt:  # _update_after_schedule: no longer a prefill chunk
                inflight.pop(r.idx, None)
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
        jid = self._next_job
        self._next_job += 1
        self._jobs[jid] = _Job(r, to_store, blocks, True, self.timing.store_due(start, end, len(blocks)))
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
    def request_finished(self, r: Request) -> None:
        """A request finished (before its blocks are freed): its stores are built at the next
        step; its pending stores start watching its blocks."""
        self.inflight_prefills.pop(r.idx, None)
        st = self._states.get(r.idx)
        if st is None:
            return
        self._finished_since.append(r)
        for jid in st.jobs:
            job = self._jobs[jid]
            if job.is_store:
                for b in job.blocks:
                    self._fenced.setdefault(b, set()).add(jid)

    def complete_due(self, t: float) -> None:
        """``update_connector_output``: every transfer due by ``t`` has finished."""
        if not self._jobs:
            return
        done = sorted(j for j, job in self._jobs.items() if job.due <= t)
        for jid in done:
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
                    self.finished_recving.add(r.idx)
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

    def keeps_stepping(self) -> bool:
        """vLLM's engine steps on, with nothing to run, while requests wait for their KV."""
        return len(self.holding) > 0

    def has_pending_loads(self) -> bool:
        return any(not j.is_store for j in self._jobs.values())

    def num_pending(self) -> int:
        return len(self._jobs)


def waiting_pass(sched: Any, plan: Any, budget: int, thr: int, now: float, end: float) -> None:
    """Phase B with a connector: vLLM's admission loop over the KV-holding queue, then the waiting
    queue; requests whose KV is loading are skipped (kept in order), the first that does not fit
    stops the scan."""
    conn: OffloadingConnector = sched.connector
    holding = conn.holding
    waiting = sched.waiting
    running = sched.running
    kv = sched.kv
    bs = kv.block_size
    skipped_holding: list[Request] = []
    skipped_waiting: list[Request] = []
    while budget > 0:
        q = holding if len(holding) else waiting
        if not len(q):
            break
        if len(running) >= sched.max_num_seqs:
            break
        r = q.peek()
        num_tokens = r.prompt_len + r.num_output
        if r.status == WAITING_FOR_REMOTE_KVS:
            if r.idx not in conn.finished_recving:
                q.pop()
                skipped_holding.append(r)
                continue
            # _update_waiting_for_remote_kv: the loaded blocks are cached now
            if kv.caching:
                kv.cache_blocks(r, r.num_computed)
            if r.num_computed == num_tokens:
                r.num_computed = num_tokens - 1
            conn.finished_recving.discard(r.idx)
            r.status = PREEMPTED if r.num_preemptions else WAITING
        ext = 0
        load_async = False
        hit: list[int] = []
        hit_tokens = 0
        fresh = r.num_computed == 0 and not r.blocks  # a failed load keeps its blocks
        if fresh:
            hit = kv.lookup(r)
            hit_tokens = len(hit) * bs
            got, load_async = conn.get_num_new_matched_tokens(r, hit_tokens)
            if got is None:
                q.pop()
                (skipped_holding if r.num_computed else skipped_waiting).append(r)
                continue
            ext = got
            computed = hit_tokens + ext
        else:
            computed = r.num_computed
        if load_async:
            n = 0
        else:
            n = num_tokens - computed
            if 0 < thr < n:
                n = thr
            if n > budget:
                if not sched.chunked:
                    break
                n = budget
        if not fresh:
            ok = _allocate_holding(kv, r, n, bool(running))
        elif load_async:
            ok = _allocate_async(kv, r, hit, bool(running), ext, _reserved_blocks(conn, kv))
        else:
            ok = kv.allocate_admission(r, n, hit, bool(running))
        if not ok:
            break
        conn.update_state_after_alloc(r, ext, now, end)
        if fresh and r.num_preemptions == 0:
            conn.stats.queried_tokens += num_tokens - hit_tokens
            conn.stats.hit_tokens += ext
        if load_async:
            r.status = WAITING_FOR_REMOTE_KVS
            r.num_computed = computed
            conn.inflight_prefills[r.idx] = r
            conn.gpu_hit[r.idx] = hit_tokens
            q.pop()
            skipped_holding.append(r)
            continue
        q.pop()
        running.append(r)
        r.admit_seq = sched._admit_seq
        sched._admit_seq += 1
        gpu = hit_tokens if fresh else conn.gpu_hit.pop(r.idx, 0)
        if r.status == WAITING:
            plan.new.append(r)
            r.prefix_hit_tokens = gpu
            r.first_scheduled = now
        else:
            plan.resumed.append(r)
            lost = r.lost_tokens
            reused = computed if computed < lost else lost
            r.reused_tokens += reused
            r.recomputed_tokens += lost - reused
        if gpu:
            plan.prefix_hits.append((r, gpu))
        if computed > gpu:
            conn.step_loaded.append((r, computed - gpu))  # tokens the CPU tier brought
        r.status = RUNNING
        r.num_computed = computed
        if computed + n < num_tokens:
            conn.inflight_prefills[r.idx] = r
        else:
            conn.inflight_prefills.pop(r.idx, None)
        plan.scheduled.append((r, n))
        budget -= n
    # skipped requests go back to the front of their queue, in their order
    for q, skipped in ((holding, skipped_holding), (waiting, skipped_waiting)):
        for r in reversed(skipped):
            q.prepend(r)


def _reserved_blocks(conn: OffloadingConnector, kv: Any) -> int:
    """``_inflight_prefill_reserved_blocks``: blocks in-flight prefills still need."""
    bs = kv.block_size
    mml = kv.max_model_len
    total = 0
    for r in conn.inflight_prefills.values():
        nt = r.prompt_len + r.num_output
        need = -(-(nt if nt < mml else mml) // bs) - len(r.blocks)
        if need > 0:
            total += need
    return total


def _allocate_async(kv: Any, r: Request, hit: list[int], has_running: bool, ext: int, reserved: int) -> bool:
    """``allocate_slots`` for an asynchronous load: blocks for the hit and the loaded tokens,
    with ``reserved`` blocks kept for in-flight prefills; the loaded blocks are cached later."""
    room = kv.admission_room(r, hit, len(hit), has_running)  # its gate does not count the reservation
    if room < 0:
        return False
    pool = kv.pool
    bs = kv.block_size
    num_hit = len(hit)
    total = min(num_hit * bs + ext, kv.max_model_len)
    more = -(-total // bs) - num_hit
    if (more if more > 0 else 0) > room - reserved:
        return False
    if hit:
        pool.touch(hit)
        r.blocks = hit
        if more > 0:
            hit.extend(pool.get_new_blocks(more))
    else:
        r.blocks = pool.get_new_blocks(more)
    r.num_cached_blocks = r.num_live_blocks = num_hit
    return True


def _allocate_holding(kv: Any, r: Request, n: int, has_running: bool) -> bool:
    """``allocate_slots`` for a waiting request that already holds blocks (its load is done)."""
    room = kv.admission_room(r, [], len(r.blocks), has_running)  # its blocks revive none
    if room < 0:
        return False
    pool = kv.pool
    bs = kv.block_size
    num_tokens = r.prompt_len + r.num_output
    t = min(r.num_computed + n, kv.max_model_len)
    more = -(-t // bs) - len(r.blocks)
    if more > room:
        return False
    if more > 0:
        r.blocks.extend(pool.get_new_blocks(more))
    if kv.caching:
        t = r.num_computed + n
        kv.cache_blocks(r, t if t < num_tokens else num_tokens)
    return True
