"""Clusters of replicas: routing, node failures, KV migration vs recompute.

Public API::

    simulate_cluster(trace, replicas, router=RouterSpec(...), failures=[FailureEvent(...)],
                     recovery="planner" | "migrate" | "restart" | callable,
                     context=RecoveryContext(model=..., bandwidth_gbps=...),   # recovery costs
                     kv_checkpointing="continuous" | "on_warning" | "none",
                     slo=SLO(...)) -> ClusterResult

The per-job planner (``servesim.cluster.recovery``) is also usable alone (``servesim recover``).
Every fleet (``ClusterSimulator``, ``servesim.cluster.pd.PDCluster``) is a ``Fleet``
(``servesim.cluster.fleet``): what ``servesim.live`` and ``servesim.online`` drive.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.cluster.config import FailureEvent, FailurePlan, KVCheckpointing, RouterSpec, failure_schedule
from servesim.cluster.fleet import Fleet, FleetBase, FleetSnapshot
from servesim.cluster.planning import planner_policy, target_state
from servesim.cluster.recovery import RecoveryContext
from servesim.cluster.results import ClusterResult, ClusterSummary, FailureImpact, build_cluster_result
from servesim.cluster.router import Router
from servesim.cluster.simulate import (
    ClusterSimulator,
    Decision,
    Interrupted,
    RecoveryPolicy,
    Replica,
    default_context,
    migrate_policy,
    restart_policy,
)
from servesim.engine.results import SLO
from servesim.errors import InputError, shown
from servesim.events import Observer
from servesim.heap import gc_paused
from servesim.traces.schema import Trace

POLICIES: dict[str, RecoveryPolicy] = {
    "planner": planner_policy,
    "migrate": migrate_policy,
    "restart": restart_policy,
}


def simulate_cluster(
    trace: Trace,
    replicas: Sequence[Replica],
    router: RouterSpec | None = None,
    failures: Sequence[FailureEvent] = (),
    recovery: str | RecoveryPolicy = "planner",
    context: RecoveryContext | None = None,
    *,
    kv_checkpointing: KVCheckpointing = "continuous",
    slo: SLO | None = None,
    fast: bool = True,
    observers: Sequence[Observer] = (),
    pooled_itl: bool = True,
    replica_summaries: bool = True,
) -> ClusterResult:
    """Run ``trace`` over ``replicas`` on one clock, with failures and per-request recovery.
    ``observers`` receive every replica's events (tagged with its name) and the cluster's.
    ``pooled_itl=False`` leaves the pooled ITL out of the summaries, ``replica_summaries=False``
    the per-replica summaries (``summary.replicas`` is then empty): together they are a third of
    a tuning trial's CPU on a fleet, and the tuner reads neither. The rest is unchanged."""
    sim = cluster_simulator(
        trace,
        replicas,
        router,
        failures,
        recovery,
        context,
        kv_checkpointing=kv_checkpointing,
        fast=fast,
        observers=observers,
    )
    # The collector stays off through the summary (its collections would find nothing:
    # ``gc_paused``) until the replicas are freed: on again with them alive, its next
    # collection would traverse every object they hold.
    with gc_paused():
        result = build_cluster_result(
            sim.run(),
            slo,
            pooled_itl=pooled_itl,
            replica_summaries=replica_summaries,
            recovery=recovery if isinstance(recovery, str) else getattr(recovery, "__name__", None),
            router=(router or RouterSpec()).policy,
        )
        del sim
    return result


def cluster_simulator(
    trace: Trace,
    replicas: Sequence[Replica],
    router: RouterSpec | None = None,
    failures: Sequence[FailureEvent] = (),
    recovery: str | RecoveryPolicy = "planner",
    context: RecoveryContext | None = None,
    *,
    kv_checkpointing: KVCheckpointing = "continuous",
    fast: bool = True,
    observers: Sequence[Observer] = (),
) -> ClusterSimulator:
    """The simulator ``simulate_cluster`` runs (a recovery policy by name, failures validated)."""
    if isinstance(recovery, str):
        if recovery not in POLICIES:
            raise InputError(f"unknown recovery policy {shown(recovery)}; known: {', '.join(POLICIES)}")
        policy = POLICIES[recovery]
    else:
        policy = recovery
    FailurePlan(events=list(failures))  # validates the sequence
    return ClusterSimulator(
        trace,
        replicas,
        router,
        failures,
        policy,
        context,
        kv_checkpointing=kv_checkpointing,
        fast=fast,
        observers=observers,
    )


__all__ = [
    "POLICIES",
    "ClusterResult",
    "ClusterSimulator",
    "ClusterSummary",
    "Decision",
    "FailureEvent",
    "FailureImpact",
    "FailurePlan",
    "Fleet",
    "FleetBase",
    "FleetSnapshot",
    "Interrupted",
    "KVCheckpointing",
    "RecoveryContext",
    "RecoveryPolicy",
    "Replica",
    "Router",
    "RouterSpec",
    "build_cluster_result",
    "cluster_simulator",
    "default_context",
    "failure_schedule",
    "migrate_policy",
    "planner_policy",
    "restart_policy",
    "simulate_cluster",
    "target_state",
]
