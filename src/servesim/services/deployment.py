"""The deployment a request names: the spec models an interface builds, and their resolution.

Why a service module: every question (a run, a sweep, a tuning study, a layout comparison) takes
a ``DeploymentSpec`` or a ``ClusterSpec`` and an SLO, and the interfaces build them from flags,
form fields or files. They take those models from here rather than from ``servesim.spec``, so an
interface depends on the services alone (the import rule in ``pyproject.toml``), and
``resolve`` / ``resolve_cluster`` / ``resolve_for_trace`` are the one way a spec becomes what runs,
whoever shows it (the web's defaults panel, the dashboard, the emulator's replicas).
"""

from __future__ import annotations

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
    "engine_values",
    "parse_slo",
    "resolve",
    "resolve_cluster",
    "resolve_for_trace",
    "runnable_deployment",
]
