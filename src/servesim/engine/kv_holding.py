"""vLLM's ``kv_holding_waiting``: the scheduler's queue of waiting requests that hold KV blocks.

A request enters it when its admission allocates blocks for an asynchronous KV load (vLLM's
WAITING_FOR_REMOTE_KVS) and leaves it when it is admitted into the running list (or aborted).
The scheduler drains it before the waiting queue, in its own order: FCFS, the order requests
entered it; priority, vLLM's (priority, arrival, trace position).

vLLM walks the whole queue every step and skips (pops and re-queues) the requests whose load has
not finished. That order is kept here without the walk: a request whose load is in flight is
*parked* (``loading``) and joins the *ready* heap, at its place in the queue's order, only when
the connector reports its load finished (``recv_finished``, vLLM's
``finished_recving_kv_req_ids``). The admission loop sees the ready heap alone, so a step costs
nothing per request still loading, however many there are.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from servesim.engine.request import WAITING_FOR_REMOTE_KVS, Request
from servesim.errors import InternalError

# A request's place in the queue: FCFS (entry number, 0, 0); priority (priority, arrival, idx).
Key = tuple[int, float, int]


class ReadyQueue:
    """The holding requests the admission loop may look at, in the queue's order (a heap).

    It has the waiting queues' ``peek`` / ``pop`` / ``len`` so that the one admission loop reads
    either the same way; ``pop`` (an admission) takes the request out of the holding queue."""

    __slots__ = ("_heap", "_keys")

    def __init__(self, keys: dict[int, Key]) -> None:
        self._heap: list[tuple[Key, Request]] = []
        self._keys = keys  # the holding queue's members

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, key: Key, r: Request) -> None:
        heapq.heappush(self._heap, (key, r))

    def peek(self) -> Request:
        return self._heap[0][1]

    def pop(self) -> Request:
        r = heapq.heappop(self._heap)[1]
        del self._keys[r.idx]
        return r

    def entries(self) -> list[tuple[Key, Request]]:
        return list(self._heap)

    def remove(self, r: Request) -> None:
        self._heap = [e for e in self._heap if e[1] is not r]
        heapq.heapify(self._heap)


class KVHoldingQueue:
    """Requests holding KV blocks while not running: loading (parked) and ready (in order)."""

    __slots__ = ("_keys", "_next", "finished_recving", "loading", "priority", "ready")

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self._next = 0  # FCFS: the next entry number
        self._keys: dict[int, Key] = {}  # every member's place: request index -> key
        self.loading: dict[int, Request] = {}  # their KV load in flight (not reported finished)
        self.ready = ReadyQueue(self._keys)
        # vLLM's finished_recving_kv_req_ids: loads reported finished, not yet taken up by the
        # admission loop (``promoted``)
        self.finished_recving: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, r: Request) -> bool:
        return r.idx in self._keys

    def __iter__(self) -> Iterator[Request]:
        """Every member in the queue's order (loading ones included): for views and checks."""
        keys = self._keys
        members = [(keys[i], r) for i, r in self.loading.items()] + self.ready.entries()
        members.sort(key=_entry_key)
        return (r for _, r in members)

    def add_loading(self, r: Request) -> None:
        """``r`` was given blocks for an asynchronous load (WAITING_FOR_REMOTE_KVS): park it."""
        if r.idx in self._keys:
            raise InternalError(f"invariant broken: {r.req_id} entered the KV-holding queue twice")
        if self.priority:
            key: Key = (r.priority, r.arrival, r.idx)
        else:
            key = (self._next, 0.0, 0)
            self._next += 1
        self._keys[r.idx] = key
        self.loading[r.idx] = r

    def recv_finished(self, r: Request) -> None:
        """The connector reports ``r``'s load finished: it joins the ready requests in order.
        A request no longer waiting for it (aborted meanwhile) is left alone, as vLLM does."""
        if r.status != WAITING_FOR_REMOTE_KVS or self.loading.pop(r.idx, None) is None:
            return
        self.finished_recving.add(r.idx)
        self.ready.add(self._keys[r.idx], r)

    def promoted(self, r: Request) -> None:
        """The admission loop took up ``r``'s finished load (``_update_waiting_for_remote_kv``)."""
        self.finished_recving.discard(r.idx)

    def remove(self, r: Request) -> None:
        """``r`` leaves the queue from wherever it is (an abort)."""
        if self._keys.pop(r.idx, None) is None:
            return
        if self.loading.pop(r.idx, None) is None:
            self.ready.remove(r)
        self.finished_recving.discard(r.idx)

    def pop(self) -> Request:
        """Take out the first member in the queue's order (a cluster empties a lost replica)."""
        first = next(iter(self))
        self.remove(first)
        return first


def _entry_key(entry: tuple[Key, Request]) -> Key:
    return entry[0]


__all__ = ["KVHoldingQueue", "ReadyQueue"]
