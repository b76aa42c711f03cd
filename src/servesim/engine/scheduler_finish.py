"""Requests finished from outside a scheduler's step loop (a client went away), as vLLM's
``Scheduler.finish_requests``: rare, so kept out of the compiled step code (``scheduler.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import FINISHED, REJECTED, RUNNING, Request
from servesim.engine.step_plan import running_index

if TYPE_CHECKING:
    from servesim.engine.scheduler import Scheduler


def finish_requests(
    sched: Scheduler, requests: list[Request], outcome: int, step: int, t: float
) -> list[Request]:
    """vLLM's ``Scheduler.finish_requests(request_ids, finished_status)``: requests finished
    from outside the step loop (a client went away: ``OUTCOME_ABORTED``, vLLM's
    FINISHED_ABORTED) at ``t``, between steps (``step``: the next one). Running ones leave
    the running list (a decode-group member is made explicit first); waiting, preempted and
    KV-loading (WAITING_FOR_REMOTE_KVS) ones leave their queue. Then, as vLLM's
    ``_free_request``, the connector's ``request_finished`` and the KV blocks back to the
    pool (hashed ones stay in the prefix cache). A load still in flight for a KV-loading
    request runs to its end in the connector, which no longer admits the request; its
    blocks are freed now (vLLM delays that free until the worker reports the load). Returns
    the requests finished here: not those already finished."""
    valid: list[Request] = []
    running_gone: list[Request] = []
    xfer = sched.kv_xfer
    for r in requests:
        status = r.status
        if status in (FINISHED, REJECTED):
            continue
        valid.append(r)
        if status == RUNNING:
            if r.sync_step >= 0:  # a decode-group member: make the group explicit first
                sched.materialize_all(step, t)
            running_gone.append(r)
    for r in running_gone:
        del sched.running[running_index(sched.running, r)]
        if r in sched.explicit:
            sched.explicit.remove(r)
    for r in valid:
        status = r.status
        # REJECTED marks a queued request gone (the priority queues drop its entry lazily)
        r.status = FINISHED if status == RUNNING else REJECTED
        # a request in the KV-holding queue: loading its KV, or loaded and not admitted yet
        in_holding = xfer is not None and xfer.remove(r)
        if status != RUNNING and not in_holding:
            sched.waiting.remove(r)
        r.outcome = outcome
        r.finish_time = t
        if xfer is not None and xfer.request_finished(r):
            continue  # its blocks wait for the connector's send
        if r.blocks:
            sched.kv.free(r)
    return valid


__all__ = ["finish_requests"]
