"""The KV-holding queue keeps vLLM's order without vLLM's walk (``engine/kv_holding.py``).

vLLM's admission loop walks its ``kv_holding_waiting`` queue every step, popping the requests whose
KV load has not finished and re-queuing them in order. servesim parks those requests and lets a
request join the ready heap only when its load is reported finished. Random sequences of the
operations the scheduler applies (a load issued, a load reported finished, an admission scan that
admits some ready requests and stops at one that does not fit, an abort) must admit the same
requests in the same order as a literal transcription of vLLM's walk, under both policies, and
list the queue in the same order; and a scan must touch no request still loading.
"""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.kv_holding import KVHoldingQueue
from servesim.engine.request import REJECTED, WAITING, WAITING_FOR_REMOTE_KVS, Request


class VllmWalk:
    """vLLM 0.33's ``kv_holding_waiting`` as its scheduler uses it: a queue walked from the front,
    loading requests popped and prepended back in order after the scan (FCFS), or a heap on
    (priority, arrival, id) (priority policy)."""

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self.q: deque[Request] = deque()
        self.finished: set[int] = set()

    def _ordered(self) -> list[Request]:
        if self.priority:
            return sorted(self.q, key=lambda r: (r.priority, r.arrival, r.idx))
        return list(self.q)

    def add(self, r: Request) -> None:
        self.q.append(r)

    def scan(self, admit: int) -> list[Request]:
        """Admit up to ``admit`` requests whose load finished; the next one does not fit."""
        q = deque(self._ordered())
        skipped: list[Request] = []
        out: list[Request] = []
        while q:
            r = q[0]
            if r.idx not in self.finished and r.status == WAITING_FOR_REMOTE_KVS:
                skipped.append(q.popleft())
                continue
            r.status = WAITING  # promoted (its load taken up), then allocated
            if len(out) == admit:
                break  # it does not fit: the scan stops, it keeps its place
            out.append(q.popleft())
        for r in reversed(skipped):
            q.appendleft(r)
        self.q = q
        return out

    def remove(self, r: Request) -> None:
        self.q.remove(r)


def servesim_scan(h: KVHoldingQueue, admit: int) -> list[Request]:
    """The scheduler's admission loop over the holding queue (``Scheduler._waiting_pass``)."""
    out: list[Request] = []
    ready = h.ready
    while len(ready):
        r = ready.peek()
        assert r.idx not in h.loading, "the scan reached a request still loading"
        if r.status == WAITING_FOR_REMOTE_KVS:
            h.promoted(r)
            r.status = WAITING
        if len(out) == admit:
            break
        out.append(ready.pop())
    return out


ops = st.lists(
    st.tuples(st.sampled_from(["add", "finish", "scan", "abort"]), st.integers(0, 50), st.integers(0, 3)),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, priority=st.booleans())
def test_the_holding_queue_admits_in_vllms_order_without_walking(
    ops: list[tuple[str, int, int]], priority: bool
) -> None:
    model = VllmWalk(priority)
    h = KVHoldingQueue(priority)
    members: dict[int, Request] = {}
    mirror: dict[int, Request] = {}  # the model's own copies (statuses evolve separately)
    next_idx = 0
    for op, pick, k in ops:
        if op == "add":
            args = (next_idx, f"r{next_idx}", float(pick % 7), 10, 5, pick % 3)
            r, m = Request(*args), Request(*args)
            r.status = m.status = WAITING_FOR_REMOTE_KVS
            h.add_loading(r)
            model.add(m)
            members[r.idx], mirror[m.idx] = r, m
            next_idx += 1
        elif not members:
            continue
        else:
            idx = sorted(members)[pick % len(members)]
            if op == "finish":
                h.recv_finished(members[idx])
                if mirror[idx].status == WAITING_FOR_REMOTE_KVS:
                    model.finished.add(idx)
            elif op == "scan":
                got = [r.idx for r in servesim_scan(h, k)]
                want = [r.idx for r in model.scan(k)]
                assert got == want
                for i in got:
                    del members[i], mirror[i]
            else:  # an abort
                members[idx].status = mirror[idx].status = REJECTED
                h.remove(members.pop(idx))
                model.remove(mirror.pop(idx))
        assert len(h) == len(members)
        assert [r.idx for r in h] == [r.idx for r in model._ordered()]
        assert h.finished_recving == {
            i for i in model.finished if i in mirror and mirror[i].status == WAITING_FOR_REMOTE_KVS
        }


def test_a_cluster_empties_the_queue_in_its_order() -> None:
    """``pop`` (a lost replica's requests taken off it) goes in the queue's order, loading or not."""
    h = KVHoldingQueue(priority=False)
    reqs = [Request(i, f"r{i}", 0.0, 10, 5) for i in range(4)]
    for r in reqs:
        r.status = WAITING_FOR_REMOTE_KVS
        h.add_loading(r)
    h.recv_finished(reqs[2])
    assert [h.pop().idx for _ in range(len(h))] == [0, 1, 2, 3]
    assert len(h) == 0 and not h.finished_recving
