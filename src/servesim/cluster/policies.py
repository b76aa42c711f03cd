"""Recovery policies of an aggregated fleet: where a request taken off a lost replica goes, and
whether its KV migrates or it restarts cold (``ClusterSimulator``'s ``recovery``; the planner's own
policy is ``servesim.cluster.planning.planner_policy``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from servesim.cluster.fleet import Interrupted
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.router import Router
from servesim.engine.replica import ReplicaView

Strategy = Literal["MIGRATE_STATE", "COLD_RESTART"]


@dataclass(frozen=True)
class Decision:
    strategy: Strategy
    target: int  # replica index
    delay_s: float  # until the request reaches the target (the KV transfer time)
    tokens_moved: int


# A recovery policy decides from the survivors' read-only views (``ReplicaView``), by replica index.
RecoveryPolicy = Callable[
    [Interrupted, Sequence[ReplicaView], Sequence[int], RecoveryContext, Router], Decision
]


def restart_policy(
    job: Interrupted,
    replicas: Sequence[ReplicaView],
    eligible: Sequence[int],
    ctx: RecoveryContext,
    router: Router,
) -> Decision:
    """Always recompute on the survivor the router picks."""
    return Decision("COLD_RESTART", router.pick(job.request, replicas, eligible), 0.0, 0)


def migrate_policy(
    job: Interrupted,
    replicas: Sequence[ReplicaView],
    eligible: Sequence[int],
    ctx: RecoveryContext,
    router: Router,
) -> Decision:
    """Migrate whatever KV survived (the last token is always recomputed, as vLLM does for
    loaded KV); restart when nothing survived."""
    target = router.pick(job.request, replicas, eligible)
    r = job.request
    moved = min(job.checkpointed_tokens, r.prompt_len + r.num_output - 1)
    if moved <= 0:
        return Decision("COLD_RESTART", target, 0.0, 0)
    return Decision("MIGRATE_STATE", target, ctx.setup_latency_s + ctx.transfer_s(moved), moved)


def default_context() -> RecoveryContext:
    """Llama-3.1-8B (its KV size), one GPU per replica, the planner's default link."""
    from servesim.perf import load_catalog
    from servesim.perf.catalog import resolve_model

    return RecoveryContext(model=resolve_model("llama-3.1-8b", load_catalog()))


__all__ = ["Decision", "RecoveryPolicy", "Strategy", "default_context", "migrate_policy", "restart_policy"]
