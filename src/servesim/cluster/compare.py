"""Comparing recovery strategies on one cluster: the same trace, replicas, router and node
failures under every strategy (always migrate, always restart, the planner per job) and without
a failure, each summed up as a ``StrategyOutcome`` row (``servesim cluster``, the dashboard's
cluster summary and the demo's cluster step share it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servesim.bounds import MAX_REPLICAS
from servesim.cluster.config import FailureEvent, FailurePlan, KVCheckpointing, RouterSpec, failure_schedule
from servesim.cluster.recovery import RecoveryContext
from servesim.cluster.results import ClusterLoRA, ClusterOffload, ClusterResult
from servesim.cluster.simulate import Replica
from servesim.engine.results import SLO
from servesim.errors import InputError, shown
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace


class LinkSpec(BaseModel):
    """What moving KV costs: the served model (its KV bytes per token) and the network."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field("llama-3.1-8b", description="Catalog name of the served model.")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree of a replica.")
    bandwidth_gbps: float = Field(10.0, gt=0, description="Link per TP rank between replicas, Gbit/s.")
    transfer_efficiency: float = Field(0.9, gt=0, le=1)
    setup_latency_ms: float = Field(10.0, ge=0)
    kv_checkpointing: KVCheckpointing = "continuous"
    kv_dtype: str = Field(
        "auto", description="The replicas' kv_cache_dtype: the bytes a token's KV moves as."
    )

    def context(self) -> RecoveryContext:
        return RecoveryContext(
            model=resolve_model(self.model, load_catalog()),
            tp=self.tp,
            kv_dtype=self.kv_dtype,
            bandwidth_gbps=self.bandwidth_gbps,
            transfer_efficiency=self.transfer_efficiency,
            setup_latency_s=self.setup_latency_ms / 1000.0,
        )


class ClusterFile(BaseModel):
    """A cluster file: replicas (vLLM keys each), router, and the link for KV migration."""

    model_config = ConfigDict(extra="forbid")
    replicas: list[dict[str, Any]] = Field(
        min_length=1, max_length=MAX_REPLICAS, description="Each: name, and vLLM keys (config)."
    )
    router: RouterSpec = Field(default_factory=RouterSpec)
    link: LinkSpec = Field(default_factory=LinkSpec)

    @field_validator("link")
    @classmethod
    def _dtype_is_the_replicas(cls, link: LinkSpec) -> LinkSpec:
        """The KV moves as the replicas store it: its dtype is theirs, not the link's."""
        if "kv_dtype" in link.model_fields_set:
            raise ValueError("kv_dtype is not a link setting: give the replicas kv_cache_dtype")
        return link

    def replica_keys(self, where: str = "the cluster file") -> list[tuple[str, dict[str, Any]]]:
        """Each replica's name (default ``n<i>``) and the vLLM keys it sets (its ``config``
        mapping, or its own keys), with dashes read as underscores."""
        out = []
        for i, r in enumerate(self.replicas):
            keys = dict(r)
            name = str(keys.pop("name", f"n{i}"))
            settings = keys.get("config", keys)
            if not isinstance(settings, dict):
                raise InputError(f"{where}: replica {shown(name)}: config must be a mapping of vLLM keys")
            out.append((name, {str(k).replace("-", "_"): v for k, v in settings.items()}))
        return out


class StrategyOutcome(BaseModel):
    """One recovery strategy's results, for the comparison table and the cluster document."""

    strategy: str
    num_finished: int
    num_unfinished: int
    ttft_p99_ms: float
    e2e_p99_ms: float
    interrupted: int
    interrupted_e2e_p99_ms: float
    migrated: int
    restarted: int
    tokens_recomputed: int
    gb_moved: float
    # The CPU tiers' figures (fleet and per replica) when the replicas have one; kept out of the
    # row's dump: the cluster document carries them as its own ``offload`` section.
    offload: ClusterOffload | None = Field(None, exclude=True)
    # Likewise the LoRA adapters' figures (fleet and per replica): the document's ``lora`` section.
    lora: ClusterLoRA | None = Field(None, exclude=True)


#: The row of a run without a failure: the comparison's baseline, or the whole answer when no
#: failure is injected (every strategy would be the same run).
NO_FAILURE = "no failure"


def outcome(name: str, result: ClusterResult, ctx: RecoveryContext) -> StrategyOutcome:
    """One row of the comparison (GB moved: the KV-bytes formula over all TP ranks)."""
    s = result.summary
    return StrategyOutcome(
        strategy=name,
        num_finished=s.cluster.num_finished,
        num_unfinished=s.cluster.num_unfinished,
        ttft_p99_ms=s.cluster.ttft_ms.p99,
        e2e_p99_ms=s.cluster.e2e_ms.p99,
        interrupted=s.impact.num_interrupted,
        interrupted_e2e_p99_ms=s.impact.interrupted_e2e_ms.p99,
        migrated=s.impact.num_migrated,
        restarted=s.impact.num_restarted,
        tokens_recomputed=s.impact.tokens_recomputed,
        gb_moved=ctx.bytes_total(s.impact.tokens_moved) / 1e9,
        offload=s.offload,
        lora=s.lora,
    )


def compare_recovery(
    trace: Trace,
    replicas: Sequence[Replica],
    router: RouterSpec,
    failures: Sequence[FailureEvent],
    link: LinkSpec,
    strategies: Sequence[str],
    *,
    slo: SLO | None = None,
    baseline: bool = True,
    observers: Sequence[Any] = (),
) -> tuple[list[StrategyOutcome], dict[str, ClusterResult]]:
    """Run ``trace`` without a failure (``baseline``) and under each recovery strategy with
    ``failures``; the comparison rows (baseline first) and each strategy's full result. Without
    a failure there is nothing to compare: one run, its row and result named ``NO_FAILURE``.
    ``observers``: event observers of the strategies' runs (progress, a timeline)."""
    from servesim.cluster import POLICIES, simulate_cluster

    unknown = [s for s in strategies if s not in POLICIES]
    if unknown:
        raise InputError(f"unknown recovery {shown(unknown[0])}; use one of {', '.join(POLICIES)}")
    ctx = link.context()
    common: dict[str, Any] = {"context": ctx, "kv_checkpointing": link.kv_checkpointing, "slo": slo}
    if not failures:  # nothing to recover: one run, not the same run once per strategy
        result = simulate_cluster(trace, replicas, router, (), observers=list(observers), **common)
        return [outcome(NO_FAILURE, result, ctx)], {NO_FAILURE: result}
    rows: list[StrategyOutcome] = []
    if baseline:
        rows.append(outcome(NO_FAILURE, simulate_cluster(trace, replicas, router, (), **common), ctx))
    results: dict[str, ClusterResult] = {}
    for name in strategies:
        results[name] = simulate_cluster(
            trace, replicas, router, failures, recovery=name, observers=list(observers), **common
        )
        rows.append(outcome(name, results[name], ctx))
    return rows, results


def failure_events(
    listed: Sequence[FailureEvent],
    nodes: Sequence[str],
    trace: Trace,
    *,
    mtbf_s: float | None = None,
    warning_s: float = 0.0,
    recover_after_s: float | None = None,
    seed: int = 0,
) -> list[FailureEvent]:
    """The ``listed`` failures plus, with ``mtbf_s``, random ones per node over the trace's span
    (``failure_schedule``), in time order and checked as one plan."""
    events = list(listed)
    if mtbf_s is not None:
        horizon = float(trace.df["arrival_time_s"].max()) if len(trace) else 0.0
        events += failure_schedule(
            list(nodes), horizon, mtbf_s, warning_s=warning_s, recover_after_s=recover_after_s, seed=seed
        )
    events.sort(key=lambda e: (e.time_s, e.node))
    FailurePlan(events=events)
    return events


def cluster_document(
    events: Sequence[FailureEvent],
    link: LinkSpec,
    route: RouterSpec,
    rows: Sequence[StrategyOutcome],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The comparison as a document: the failures, link, router and one row per strategy (plus
    optional sections such as the planner's per-request ``decisions``). With CPU offload tiers,
    ``offload`` maps each strategy to its tiers' figures (``fleet`` and ``replicas``); without
    one the section is absent. With LoRA adapters, ``lora`` maps each strategy to the adapters'
    figures (``fleet``: the replicas' sums, and ``replicas``) likewise."""
    tiers = {r.strategy: r.offload.model_dump(mode="json") for r in rows if r.offload is not None}
    lora = {r.strategy: r.lora.model_dump(mode="json") for r in rows if r.lora is not None}
    return {
        "failures": [e.model_dump(mode="json") for e in events],
        "link": link.model_dump(mode="json"),
        "router": route.model_dump(mode="json"),
        "strategies": [r.model_dump(mode="json") for r in rows],
        **({"offload": tiers} if tiers else {}),
        **({"lora": lora} if lora else {}),
        **(extra or {}),
    }


__all__ = [
    "NO_FAILURE",
    "ClusterFile",
    "LinkSpec",
    "StrategyOutcome",
    "cluster_document",
    "compare_recovery",
    "failure_events",
    "outcome",
]
