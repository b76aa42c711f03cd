"""The CPU tier of vLLM 0.33's native KV offloading: ``CPUOffloadingManager`` + ``LRUCachePolicy``.

A port of ``vllm/v1/kv_offload/cpu/manager.py`` and ``cpu/policies/lru.py`` for one
full-attention group, keyed by servesim's block content keys instead of vLLM's block hashes.
What it keeps, as vLLM does:

* a pool of ``num_chunks`` CPU chunks (one chunk = ``blocks_per_chunk`` GPU blocks);
* per chunk a reference count: -1 while its store is in flight (a lookup says HIT_PENDING), then
  the number of loads reading it; only ready chunks nobody reads are evictable;
* LRU order by *rank*: a chunk stored or first touched by a request gets (request rank, -end
  position), so within one request the tail is evicted before the head; when a request finishes,
  every chunk it saw gets a fresh rank, tail first, so its head is the most recently used.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from servesim.errors import InternalError

MISS = 0
HIT = 1
HIT_PENDING = 2


class RequestAccess:
    """What vLLM keeps per request in its ``ReqContext``: the LRU rank and the keys seen."""

    __slots__ = ("finished", "positions", "rank", "seen")

    def __init__(self) -> None:
        self.rank = 0  # 0: not assigned yet
        self.seen: dict[int, None] = {}  # keys in first-seen order
        self.positions: dict[int, int] = {}  # key -> end token of its chunk
        self.finished = False


class CPUOffloadManager:
    """The scheduler-side CPU chunk pool with LRU eviction (``cache_policy="lru"``)."""

    def __init__(self, num_chunks: int) -> None:
        self.num_chunks = num_chunks
        self._num_allocated = 0
        self._free: list[int] = []
        self.ref: dict[int, int] = {}  # key -> ref count (-1: store in flight)
        self.chunk_id: dict[int, int] = {}
        self._ranks: dict[int, tuple[int, int]] = {}
        self._evictable: set[int] = set()
        self._heap: list[tuple[tuple[int, int], int]] = []
        self._next_rank = 0
        self.num_evictable = 0
        self.num_write_pending = 0
        self.evicted_chunks = 0

    # -- ranks ------------------------------------------------------------------------------
    def _request_rank(self, acc: RequestAccess) -> int:
        if not acc.rank:
            self._next_rank += 1
            acc.rank = self._next_rank
        return acc.rank

    def _push(self, key: int) -> None:
        heapq.heappush(self._heap, (self._ranks[key], key))

    def _update_recency(self, keys: Iterable[int]) -> None:
        for key in keys:
            if key not in self.ref:
                continue
            self._next_rank += 1
            self._ranks[key] = (self._next_rank, 0)  # its heap entry is re-ranked lazily (_evict)

    def _on_request_access(self, keys: Sequence[int], acc: RequestAccess) -> None:
        rank = self._request_rank(acc)
        for key in keys:
            pos = acc.positions.get(key)
            if pos is None or key not in self.ref:
                continue
            new = (rank, -pos)
            if self._ranks[key] >= new:
                continue
            self._ranks[key] = new  # its heap entry is re-ranked lazily (_evict)

    def _record_access(self, keys: Iterable[int], acc: RequestAccess) -> None:
        new = [k for k in keys if k not in acc.seen]
        for k in new:
            acc.seen[k] = None
        if new:
            self._on_request_access(new, acc)

    # -- the manager's API --------------------------------------------------------------------
    def lookup(self, key: int) -> int:
        c = self.ref.get(key)
        if c is None:
            return MISS
        return HIT if c >= 0 else HIT_PENDING

    def prepare_load(self, keys: Sequence[int], acc: RequestAccess) -> None:
        for key in keys:
            c = self.ref[key]
            if c < 0:
                raise InternalError("invariant broken: loading a chunk whose store is in flight")
            if c == 0:
                self._evictable.discard(key)
                self.num_evictable -= 1
            self.ref[key] = c + 1
        self._record_access(keys, acc)

    def complete_load(self, keys: Iterable[int]) -> None:
        for key in keys:
            c = self.ref[key] - 1
            self.ref[key] = c
            if c == 0:
                self.num_evictable += 1
                self._evictable.add(key)
                self._push(key)

    def prepare_store(self, keys: Sequence[int], acc: RequestAccess) -> list[int] | None:
        """The keys to store now (absent ones), evicting LRU chunks for them; None when the
        tier cannot make room (every other chunk is in flight or being read)."""
        to_store: list[int] = []
        ready: set[int] = set()
        for key in keys:
            c = self.ref.get(key)
            if c is None:
                to_store.append(key)
            elif c >= 0:
                ready.add(key)
        recorded = set(to_store) | ready
        self._record_access([k for k in keys if k in recorded], acc)
        if not to_store:
            return []
        free = len(self._free) + self.num_chunks - self._num_allocated
        n_evict = len(to_store) - free
        if n_evict > 0:
            if n_evict > self.num_evictable:
                return None
            evicted = self._evict(n_evict, set(keys))
            if evicted is None:
                return None
            self.num_evictable -= len(evicted)
            self.evicted_chunks += len(evicted)
        rank = self._request_rank(acc)
        for key in to_store:
            if self._num_allocated < self.num_chunks:
                cid = self._num_allocated
                self._num_allocated += 1
            else:
                cid = self._free.pop()
            self.ref[key] = -1
            self.chunk_id[key] = cid
            pos = acc.positions.get(key)
            if pos is None:
                self._next_rank += 1
                self._ranks[key] = (self._next_rank, 0)
            else:
                self._ranks[key] = (rank, -pos)
        self.num_write_pending += len(to_store)
        return to_store

    def complete_store(self, keys: Iterable[int]) -> None:
        for key in keys:
            if self.ref.get(key) == -1:
                self.ref[key] = 0
                self.num_write_pending -= 1
                self.num_evictable += 1
                self._evictable.add(key)
                self._push(key)

    def on_request_finished(self, acc: RequestAccess) -> None:
        if acc.finished:
            return
        acc.finished = True
        keys = list(acc.seen)
        if all(k in acc.positions for k in keys):
            keys.sort(key=acc.positions.__getitem__)
        self._update_recency(reversed(keys))

    def _evict(self, n: int, protected: set[int]) -> list[int] | None:
        """The ``n`` least recently used evictable chunks outside ``protected``. A rank only ever
        grows, and a chunk's heap entry is pushed when it becomes evictable, not when its rank
        grows: an entry popped with an old rank goes back with the current one. Every entry's
        rank is at most its chunk's, so an entry popped with its chunk's current rank is the
        least recently used chunk (the order of pushing on every change, without the pushes)."""
        heap = self._heap
        ranks = self._ranks
        selected: list[tuple[tuple[int, int], int]] = []
        chosen: set[int] = set()
        deferred: list[tuple[tuple[int, int], int]] = []
        while heap and len(selected) < n:
            entry = heapq.heappop(heap)
            rank, key = entry
            if key not in self._evictable or key in chosen:
                continue
            current = ranks[key]
            if current != rank:
                heapq.heappush(heap, (current, key))
                continue
            if key in protected:
                deferred.append(entry)
                continue
            selected.append(entry)
            chosen.add(key)
        for entry in deferred:
            heapq.heappush(heap, entry)
        if len(selected) < n:
            for entry in selected:
                heapq.heappush(heap, entry)
            return None
        out = []
        for _, key in selected:
            self._evictable.discard(key)
            del self.ref[key]
            self._free.append(self.chunk_id.pop(key))
            del self._ranks[key]
            out.append(key)
        return out

    def usage(self) -> float:
        """vLLM's ``cpu_cache_usage_perc``: chunks held and not evictable, over the pool."""
        used = self._num_allocated - len(self._free) - self.num_evictable
        return used / self.num_chunks if self.num_chunks else 0.0

    def num_stored(self) -> int:
        return len(self.ref)
