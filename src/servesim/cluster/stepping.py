"""How ``ClusterSimulator`` runs its replicas up to its next external event, when nobody watches
the order of their steps (no observer, no step budget, no abort waiting for a step).

Between two external events replicas do not interact, so each runs up to the event in one call
(``Engine.steps_until``) and then begins its next step: the same steps as taking every
replica's in time order. ``run_to_event`` does that for every replica, as any event needs.

A routed arrival needs less. The router reads each replica as of the arrival; if every replica
were run to every arrival, each arrival would cut each busy replica's decode stretch (its cheap
multi-step path) into single scheduler steps, and a fleet's work would grow with the square of
its replicas (arrivals grow with them, and each touches them all). ``run_to_arrival`` runs only
the replicas whose reading may differ at the arrival: none for a router that reads nothing
(round robin, random); for one that reads queue lengths (least outstanding, power of two), those
whose ``StretchCursor`` cannot show that no request finishes before the arrival. The others are
left behind, and ``catch_up`` runs the one the router picks to the arrival before the request
is submitted to it. A replica left behind runs later the steps it would have run: a decode
stretch run in one go ends the same steps, with the same times and records, as one cut at every
arrival (the fast path equals the step-by-step engine), so the results are byte for byte the
same. ``run_to_event`` catches every replica up before any other event and at the end of an
``advance``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesim.engine.stretch_cursor import settle_all

if TYPE_CHECKING:
    from servesim.cluster.simulate import ClusterSimulator


def run_replica(sim: ClusterSimulator, k: int, horizon: float, t_ext: float, until: float) -> int:
    """Run replica ``k`` up to an event at ``t_ext`` and begin its next step (``horizon``), unless
    its step in flight ends after it; returns the steps ended. A replica already run to it is
    left as it is."""
    p = sim.inflight[k]
    if p is not None and (p.end > t_ext or p.end >= until):
        return 0
    engine = sim.current[k]
    p, ended, last = engine.steps_until(p, horizon, t_ext, until)
    if ended and last > sim.now:
        sim.now = last
    if p is None:
        p = engine.begin_step(horizon)
    sim.inflight[k] = p
    return int(ended)


def run_to_event(sim: ClusterSimulator, horizon: float, t_ext: float, until: float) -> tuple[int, int, float]:
    """Every live replica run to the event at ``t_ext`` (``horizon``: where its steps may begin).
    One pass, which also finds the first step in flight to end: (steps ended, its replica, its
    end). A replica whose step in flight ends after the event is left as it is, so a fleet's
    events cost little per replica. Replicas left behind by ``run_to_arrival`` are first run to
    the last arrival, as they would have been there: what follows is then the same to the
    float (the cluster's ``now``, the steps in flight)."""
    inflight, alive = sim.inflight, sim.alive
    steps, k_step, t_step = 0, -1, math.inf
    if sim._behind:
        steps += _catch_up_all(sim)
    for k in range(len(inflight)):
        if alive[k]:
            steps += run_replica(sim, k, horizon, t_ext, until)
        p = inflight[k]
        if p is not None and p.end < t_step:
            k_step, t_step = k, p.end
    if sim._watching:
        sim._watching = False
        sim._watched = [False] * len(inflight)
    return steps, k_step, t_step


def _catch_up_all(sim: ClusterSimulator) -> int:
    """Run every replica left behind to the last routed arrival; returns the steps ended."""
    t, lagging, steps = sim._last_arrival, sim._lagging, 0
    for k in range(len(lagging)):
        if lagging[k]:
            lagging[k] = False
            if sim.alive[k]:
                steps += run_replica(sim, k, t, t, math.inf)
    sim._behind = False
    return steps


def run_to_arrival(sim: ClusterSimulator, t: float) -> int:
    """Prepare a routed arrival at ``t`` (before ``advance``'s ``until``): every replica is left
    as it is while its router's reading of it cannot differ at ``t``, or run just far enough to
    make sure (``StretchCursor.settle``); the module docstring says why. Returns the steps
    ended. The steps in flight that ``advance`` must end before the arrival are then ended."""
    sim._behind = True
    sim._last_arrival = t
    sim._lagging[:] = sim.alive  # every live replica, until caught up (``catch_up``)
    if sim.router_reads == "nothing":
        return 0
    sim._watching = True
    return settle_all(sim._cursors, sim.current, sim.inflight, sim.alive, sim._watched, sim.queues, t)


def catch_up(sim: ClusterSimulator, k: int, t: float) -> None:
    """Replica ``k`` is about to change at ``t`` (a request submitted to it): run it to ``t`` first
    if ``run_to_arrival`` left it behind, and stop trusting its cursor."""
    if sim._lagging[k]:
        sim._lagging[k] = False
        run_replica(sim, k, t, t, math.inf)
    sim._watched[k] = False


__all__ = ["catch_up", "run_replica", "run_to_arrival", "run_to_event"]
