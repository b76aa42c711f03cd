"""A deployment with ``data_parallel_size`` > 1 (or ``enable_expert_parallel``): its layout, its
per-rank setup and its run, as ``vllm serve --data-parallel-size D --enable-expert-parallel``.

``servesim.spec.resolve`` asks ``data_parallel_layout`` for the layout (None for a plain TP
deployment, which then resolves exactly as before): the experts' split sizes each rank's KV cache
(``perf.expert_parallel.expert_shards``), and a MoE model's ranks are timed by
``DataParallelStepTime`` (the lockstep group). ``run_data_parallel`` runs the D rank engines
(``cluster.data_parallel``) and ``simulation_result`` makes their run one deployment's result, so
every view and document of ``servesim simulate`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from servesim.cluster.data_parallel import DataParallelStats, simulate_data_parallel
from servesim.cluster.fleet import Replica
from servesim.cluster.results import ClusterResult, build_cluster_result
from servesim.engine.results import SLO, SimulationResult
from servesim.errors import ConfigError
from servesim.perf.catalog import ModelSpec, resolve_model
from servesim.perf.expert_parallel import (
    DataParallelStepTime,
    check_data_parallel,
    describe_layout,
    expert_shards,
)
from servesim.perf.roofline import RooflineStepTime
from servesim.perf.setup import DEFAULT_MODEL, DEFAULT_TP, ReplicaSetup

if TYPE_CHECKING:
    from servesim.events import Observer
    from servesim.spec.deployment import DeploymentSpec, ResolvedDeployment
    from servesim.traces.schema import Trace


@dataclass(frozen=True)
class DataParallelLayout:
    """``dp`` ranks of ``tp`` GPUs, experts split (``ep``) or sliced over all of them."""

    model: ModelSpec
    tp: int
    dp: int
    ep: bool

    @property
    def expert_shards(self) -> float:
        return expert_shards(self.model, self.tp, self.dp, self.ep)

    @property
    def lockstep(self) -> bool:
        """MoE ranks step together (``DPEngineCoreProc``); dense ones are independent."""
        return self.model.is_moe and self.dp > 1

    def timing(self, setup: ReplicaSetup) -> tuple[Any, str]:
        """The ranks' step-time model and the ``timed as`` line with the layout said."""
        step = setup.step_time
        if self.lockstep and isinstance(step, RooflineStepTime):
            step = DataParallelStepTime(step, self.dp, self.ep)
        how = "in lockstep" if self.lockstep else "independent"
        ranks = f"; {describe_layout(self.model, self.tp, self.dp, self.ep)}"
        if self.dp > 1:
            ranks += f": {self.dp} engines ({self.dp * self.tp} GPUs), {how}, vLLM's DP load balancer"
        return step, setup.timed_as + ranks


def data_parallel_layout(spec: DeploymentSpec) -> DataParallelLayout | None:
    """The spec's DP / EP layout, None without either; ``ConfigError`` naming the field when it
    cannot be run (no model on a GPU to time it, EP on a dense model)."""
    if spec.data_parallel_size == 1 and not spec.enable_expert_parallel:
        return None
    if spec.fixed_timing:
        raise ConfigError(
            "--data-parallel-size / --enable-expert-parallel need a model on a GPU (the ranks' "
            "weights, KV cache and lockstep are the roofline's), not --step-time-ms / --linear-step-time"
        )
    if spec.data_parallel_size > 1 and spec.engine.get("speculative_config") is not None:
        raise ConfigError(
            "--speculative-config with --data-parallel-size: the drafter's passes inside a lockstep "
            "step are not modelled; drop one"
        )
    model = resolve_model(spec.model or DEFAULT_MODEL)
    tp = spec.tp or DEFAULT_TP
    try:
        check_data_parallel(model, tp, spec.data_parallel_size, spec.enable_expert_parallel)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return DataParallelLayout(model, tp, spec.data_parallel_size, spec.enable_expert_parallel)


def rank_replicas(resolved: ResolvedDeployment) -> list[Replica]:
    """The deployment's DP ranks, ``dp0`` to ``dp{D-1}``, each an engine of the resolved config."""
    tier = resolved.kv_connector if resolved.config.kv_offloading_size is not None else None
    return [
        Replica(f"dp{k}", resolved.config, resolved.step_time, tier)
        for k in range(resolved.spec.data_parallel_size)
    ]


def run_data_parallel(
    trace: Trace,
    resolved: ResolvedDeployment,
    slo: SLO | None,
    *,
    fast: bool = True,
    observers: Sequence[Observer] = (),
    pooled_itl: bool = True,
) -> tuple[ClusterResult, DataParallelStats]:
    """The ranks run on ``trace`` (lockstep when the step model is the group's), as a fleet result."""
    step = resolved.step_time
    lockstep = step if isinstance(step, DataParallelStepTime) else None
    run, stats = simulate_data_parallel(
        trace, rank_replicas(resolved), lockstep, fast=fast, observers=observers
    )
    result = build_cluster_result(run, slo, pooled_itl=pooled_itl, router="vllm_dp")
    return result, stats


def simulation_result(
    result: ClusterResult, resolved: ResolvedDeployment, stats: DataParallelStats
) -> SimulationResult:
    """The ranks' run as one deployment's result: the group's summary, every request (its
    ``replica`` column names the rank that served it), every rank's steps; the step-time model's
    description carries the DP figures (``data_parallel``)."""
    from servesim.engine.simulate import describe_model

    desc = {**describe_model(resolved.step_time), "data_parallel": stats.model_dump(mode="json")}
    weights = [w for w, _ in result.itl.values()]
    gaps = [g for _, g in result.itl.values()]
    itl = (np.concatenate(weights), np.concatenate(gaps)) if weights else None
    return SimulationResult(
        resolved.config,
        desc,
        result.summary.cluster,
        result.requests.drop(columns=["num_moves"]),
        result.steps,
        result.preemptions,
        result.preemptions.iloc[0:0],
        None,
        itl,
    )


def data_parallel_line(stats: dict[str, Any]) -> str:
    """The human output's line on the ranks (``DataParallelStats`` as a result stores it):
    ``data parallel: 8 ranks in lockstep, 1,234 group steps, 300 dummy rank-steps, 2 waves;
    requests per rank 12, 13, ...``."""
    ranks = stats["data_parallel_size"]
    routed = ", ".join(f"{n:,}" for n in stats["routed"])
    summed = " (the totals' engine steps and busy time are summed over the ranks)"
    if not stats["lockstep"]:
        return f"data parallel: {ranks} independent ranks (a dense model); requests per rank {routed}{summed}"
    return (
        f"data parallel: {ranks} ranks in lockstep, {stats['group_steps']:,} group steps, "
        f"{stats['dummy_rank_steps']:,} dummy rank-steps (an idle rank's step in a wave), "
        f"{stats['waves']:,} wave(s); requests per rank {routed}{summed}"
    )


__all__ = [
    "DataParallelLayout",
    "data_parallel_layout",
    "data_parallel_line",
    "rank_replicas",
    "run_data_parallel",
    "simulation_result",
]
