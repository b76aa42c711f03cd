"""What the dashboard runs: one trace on one replica or a cluster, and how to restart it with a
changed vLLM flag (the same trace, fast-forwarded to the same simulated time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from servesim import (
    SLO,
    EngineConfig,
    FailureEvent,
    LiveClusterRun,
    LiveRun,
    RecoveryContext,
    Replica,
    RouterSpec,
    StepTimeModel,
    Trace,
)
from servesim.engine.kv_connector import OffloadingConnector

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

    def start(self) -> LiveRun | LiveClusterRun:
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
