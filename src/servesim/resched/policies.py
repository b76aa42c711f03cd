"""Re-admission order: the five policies and aging.

Every policy but ``fcfs`` puts *aged* requests first: those that have waited at least
``aging_wait_ms`` or been preempted at least ``aging_preemptions`` times, oldest (longest
``waited_ms``, then most preemptions, then input order) first. Among aged requests the order is
by age, so a request that has aged can only be overtaken by requests that are older still; no
request waits forever however many new urgent requests keep arriving (docs/resched.md). The
rest are ordered by the policy's key, ties broken by input order:

* ``fcfs``: input order (the caller's arrival order; starvation-free by itself, so no aging);
* ``priority``: lower ``priority`` first;
* ``least-slack-first``: smaller solo slack first (SLA budget minus the request's own service
  time if it were started now alone);
* ``shortest-remaining``: fewer ``tokens_remaining`` first (then fewer tokens to recompute);
* ``sla-aware`` (default): first the requests that can still meet their SLA (solo slack >= 0)
  by least slack, then the rest, which will violate anyway, by shortest remaining.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from servesim.errors import InternalError
from servesim.resched.models import InterruptedRequest, Policy


class OrderKeys(NamedTuple):
    """What the policies sort by, per request (input order)."""

    solo_slack_ms: float  # SLA budget minus service time if started now, alone
    to_compute: int  # tokens to compute before its first new token (recomputed + pending)


def is_aged(r: InterruptedRequest, aging_wait_ms: float | None, aging_preemptions: int | None) -> bool:
    """Has this request waited, or been preempted, long enough to go first?"""
    return (aging_wait_ms is not None and r.waited_ms >= aging_wait_ms) or (
        aging_preemptions is not None and r.preemptions >= aging_preemptions
    )


def order(
    requests: Sequence[InterruptedRequest],
    keys: Sequence[OrderKeys],
    policy: Policy,
    *,
    aging_wait_ms: float | None,
    aging_preemptions: int | None,
) -> tuple[list[int], list[bool]]:
    """Indices of ``requests`` in re-admission order, and per request whether aging moved it up."""
    n = len(requests)
    if len(keys) != n:
        raise InternalError("one OrderKeys per request")
    if policy is Policy.fcfs:
        return list(range(n)), [False] * n
    aged = [is_aged(r, aging_wait_ms, aging_preemptions) for r in requests]

    def key(i: int) -> tuple[float, ...]:
        r, k = requests[i], keys[i]
        if aged[i]:
            return (0, -r.waited_ms, -r.preemptions, i)
        if policy is Policy.priority:
            return (1, r.priority, i)
        if policy is Policy.least_slack_first:
            return (1, k.solo_slack_ms, i)
        if policy is Policy.shortest_remaining:
            return (1, r.tokens_remaining, k.to_compute, i)
        # sla-aware: those that can still make it, by least slack; then the rest, near-done first
        if k.solo_slack_ms >= 0:
            return (1, k.solo_slack_ms, i)
        return (2, r.tokens_remaining, k.to_compute, i)

    return sorted(range(n), key=key), aged
