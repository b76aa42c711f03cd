"""What the dashboard runs: one trace on one replica or a cluster, and how to restart it with a
changed vLLM flag (the same trace, fast-forwarded to the same simulated time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from pydantic import ValidationError

from servesim import (
    SLO,
    ClusterResult,
    EngineConfig,
    FailureEvent,
    LiveClusterRun,
    LiveFleetRun,
    LiveRun,
    RecoveryContext,
    Replica,
    RouterSpec,
    StepTimeModel,
    Trace,
)
from servesim.errors import InputError, InternalError, describe
from servesim.live import LivePDRun
from servesim.services.cluster import FailurePlan, PDResult
from servesim.services.deployment import (
    ClusterSpec,
    DisaggregatedSpec,
    ResolvedDisaggregated,
    resolve_cluster,
)
from servesim.services.run import OffloadingConnector

Rebuild = Callable[[EngineConfig], tuple[EngineConfig, StepTimeModel]]


@dataclass(frozen=True)
class DashboardSpec:
    """A dashboard run. ``rebuild`` re-derives KV blocks and step times after a flag change
    (the deployment setup of ``--model``); without it the config is used as it is."""

    trace: Trace
    title: str
    config: EngineConfig
    step_time: StepTimeModel
    replicas: int = 1
    router: RouterSpec | None = None
    failures: tuple[FailureEvent, ...] = ()
    recovery: str = "planner"
    context: RecoveryContext | None = None
    kv_checkpointing: str = "continuous"
    slo: SLO | None = None
    window_s: float = 30.0
    rebuild: Rebuild | None = field(default=None, compare=False)
    # vLLM's CPU offload tier for an engine of this config (``ResolvedDeployment.kv_connector``
    # of the deployment with it; None: no tier). Each engine gets a fresh, empty one.
    kv_connector: Callable[[EngineConfig], OffloadingConnector | None] | None = field(
        default=None, compare=False
    )

    def _connector(self) -> OffloadingConnector | None:
        return None if self.kv_connector is None else self.kv_connector(self.config)

    @property
    def is_cluster(self) -> bool:
        return self.replicas > 1 or bool(self.failures) or self.router is not None

    def replica_specs(self) -> list[Replica]:
        tier = None if self.kv_connector is None else self._connector
        return [Replica(f"n{i}", self.config, self.step_time, tier) for i in range(self.replicas)]

    def start(self) -> LiveRun | LiveFleetRun[ClusterResult]:
        if not self.is_cluster:
            return LiveRun(
                self.trace,
                self.config,
                self.step_time,
                slo=self.slo,
                window_s=self.window_s,
                kv_connector=self._connector(),
            )
        return LiveClusterRun(
            self.trace,
            self.replica_specs(),
            self.router,
            self.failures,
            self.recovery,
            self.context,
            kv_checkpointing=self.kv_checkpointing,  # type: ignore[arg-type]
            slo=self.slo,
            window_s=self.window_s,
        )

    def with_flags(self, **updates: Any) -> DashboardSpec:
        """The same run with vLLM flags changed (validated as a config file would be)."""
        config = EngineConfig.model_validate({**self.config.model_dump(), **updates})
        step = self.step_time
        if self.rebuild is not None:
            config, step = self.rebuild(config)
        return replace(self, config=config, step_time=step)


@dataclass(frozen=True)
class PDDashboardSpec:
    """A prefill/decode-disaggregated dashboard run: the ``ClusterSpec`` ``servesim cluster
    --prefill-replicas N --decode-replicas M`` records for the same flags, resolved as it resolves
    it (``servesim.spec.resolve_cluster``). A changed flag applies to both pools; a failure
    injected from the dashboard is one more of the spec's failures (the run replays to now)."""

    trace: Trace
    title: str
    cluster: ClusterSpec
    resolved: ResolvedDisaggregated
    slo: SLO | None = None
    window_s: float = 30.0

    is_cluster: ClassVar[bool] = True

    @property
    def disagg(self) -> DisaggregatedSpec:
        d = self.cluster.disaggregated
        if d is None:
            raise InternalError("a P/D dashboard without its pools")
        return d

    @property
    def config(self) -> EngineConfig:
        """The decode pool's engine (the status line's figures; a changed flag starts from it)."""
        return self.resolved.decode[0].config

    @property
    def prefill_config(self) -> EngineConfig:
        return self.resolved.prefill[0].config

    @property
    def failures(self) -> tuple[FailureEvent, ...]:
        return tuple(self.cluster.failures)

    @property
    def layout(self) -> str:
        """``1P2D``."""
        return f"{len(self.resolved.prefill)}P{len(self.resolved.decode)}D"

    def start(self) -> LiveFleetRun[PDResult]:
        r = self.resolved
        return LivePDRun(
            self.trace,
            r.prefill,
            r.decode,
            r.context,
            short_prompt_tokens=r.short_prompt_tokens,
            failures=self.cluster.failures,
            link_name=self.disagg.link,
            slo=self.slo,
            window_s=self.window_s,
        )

    def _with(self, cluster: ClusterSpec) -> PDDashboardSpec:
        try:
            cluster = ClusterSpec.model_validate(cluster.model_dump())
        except ValidationError as e:
            raise InputError(describe(e)) from None
        resolved = resolve_cluster(cluster, self.trace)
        if not isinstance(resolved, ResolvedDisaggregated):
            raise InternalError("a disaggregated cluster resolved without its pools")
        return replace(self, cluster=cluster, resolved=resolved)

    def with_flags(self, **updates: Any) -> PDDashboardSpec:
        """The same run with vLLM flags changed in both pools (each resolved again: KV sized,
        vLLM's rules checked; a flag a pool refuses is refused naming it)."""
        d = self.disagg
        pools = {
            name: pool.model_copy(update={"engine": {**pool.engine, **updates}})
            for name, pool in (("prefill", d.prefill), ("decode", d.decode))
        }
        return self._with(self.cluster.model_copy(update={"disaggregated": d.model_copy(update=pools)}))

    def with_failure(self, event: FailureEvent) -> PDDashboardSpec:
        """The same run with one more failure."""
        failures = sorted([*self.cluster.failures, event], key=lambda f: (f.time_s, f.node))
        try:
            FailurePlan(events=failures)  # checked as one plan, as ``servesim cluster`` checks --fail
        except ValidationError as e:
            raise InputError(describe(e)) from None
        return self._with(self.cluster.model_copy(update={"failures": failures}))
