"""The deployment a request names: the spec models an interface builds, and their resolution.

Why a service module: every question (a run, a sweep, a tuning study, a layout comparison) takes
a ``DeploymentSpec`` or a ``ClusterSpec`` and an SLO, and the interfaces build them from flags,
form fields or files. They take those models from here rather than from ``servesim.spec``, so an
interface depends on the services alone (the import rule in ``pyproject.toml``), and
``resolve`` / ``resolve_cluster`` / ``resolve_for_trace`` are the one way a spec becomes what runs,
whoever shows it (the web's defaults panel, the dashboard, the emulator's replicas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.spec import (
    ClusterSpec,
    DeploymentSpec,
    DisaggregatedSpec,
    MigrationLink,
    PercentileSLO,
    Rebuild,
    ResolvedDeployment,
    ResolvedDisaggregated,
    SLOError,
    engine_values,
    parse_slo,
    resolve,
    resolve_cluster,
    resolve_for_trace,
)
from servesim.spec.cluster import runnable_deployment

if TYPE_CHECKING:
    from servesim.engine.config import EngineConfig


def check_drafter(spec: DeploymentSpec, config: EngineConfig) -> None:
    """The speculative config's drafter built on the deployment's model, GPU and TP as a run
    builds it (``perf.setup``'s ``resolve_drafter``): a ``ConfigError`` for one that cannot run
    there (an unknown draft model, another vocabulary, a TP vLLM refuses). An interface checks
    a body with it before a job starts."""
    from servesim.engine.step_time import resolve_drafter
    from servesim.perf.roofline import build_step_time_model
    from servesim.perf.setup import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_TP

    sc = config.speculative_config
    if sc is None or sc.method == "ngram" or spec.fixed_timing:
        return
    tp = DEFAULT_TP if spec.tp is None else spec.tp
    resolve_drafter(
        build_step_time_model(spec.model or DEFAULT_MODEL, spec.gpu or DEFAULT_GPU, tp, warn=False), sc
    )


__all__ = [
    "ClusterSpec",
    "DeploymentSpec",
    "DisaggregatedSpec",
    "MigrationLink",
    "PercentileSLO",
    "Rebuild",
    "ResolvedDeployment",
    "ResolvedDisaggregated",
    "SLOError",
    "check_drafter",
    "engine_values",
    "parse_slo",
    "resolve",
    "resolve_cluster",
    "resolve_for_trace",
    "runnable_deployment",
]
