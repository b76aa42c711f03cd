"""vLLM's waiting queues: FCFS (a deque; preempted requests go back to the front) and priority
(a heap ordered by (priority, arrival time, request id); preempted requests are re-inserted)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from itertools import islice

from servesim.engine.request import REJECTED, Request


class FCFSQueue(deque[Request]):
    """A deque (as in vLLM): ``len()`` and truth tests stay in C on the hot path."""

    add = deque.append
    prepend = deque.appendleft
    pop = deque.popleft

    def peek(self) -> Request:
        return self[0]

    def head(self, k: int) -> list[Request]:
        """The first ``k`` requests in scheduling order (for live views; the queue is unchanged)."""
        return list(islice(self, k))


class PriorityQueue:
    """Min-heap on (priority, arrival, trace position); removed (timed-out) entries are skipped lazily.

    vLLM orders by (priority, arrival_time, request_id); real arrival times are distinct (wall
    clock at receipt), so requests sharing a trace timestamp are ordered by trace position."""

    __slots__ = ("_heap", "_n")

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, r: Request) -> None:
        heapq.heappush(self._heap, (r.priority, r.arrival, r.idx, r))
        self._n += 1

    prepend = add

    def _clean(self) -> None:
        heap = self._heap
        while heap and heap[0][3].status == REJECTED:
            heapq.heappop(heap)

    def peek(self) -> Request:
        self._clean()
        return self._heap[0][3]

    def pop(self) -> Request:
        self._clean()
        self._n -= 1
        return heapq.heappop(self._heap)[3]

    def remove(self, r: Request) -> None:
        # The caller marks r REJECTED first; its heap entry is dropped when it reaches the top.
        self._n -= 1

    def head(self, k: int) -> list[Request]:
        """The first ``k`` requests in scheduling order, in O(n log k) (the heap is unchanged)."""
        live = (e for e in self._heap if e[3].status != REJECTED)
        return [e[3] for e in heapq.nsmallest(k, live, key=lambda e: e[:3])]

    def __iter__(self) -> Iterator[Request]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]) if e[3].status != REJECTED)
