"""``servesim schema``: JSON Schema of every boundary object, for other tools to validate against."""

from __future__ import annotations

import json
from typing import Any

import typer
from pydantic import BaseModel

from servesim.actionlog import ActionRecord
from servesim.errors import shown
from servesim.services.perf import CalibrationReport, GPUSpec, HardwareProfile, KVCapacity, ModelSpec
from servesim.services.recovery import (
    ClusterSpec,
    FailureLogSpec,
    JobDecision,
    JobSpec,
    RecoveryInput,
    RecoveryPlan,
)
from servesim.services.rescheduling import (
    InterruptedRequest,
    ProjectedRequest,
    RescheduleInput,
    ReschedulePlan,
)
from servesim.services.run import SLO, EngineConfig, SimulationReport
from servesim.services.traces import GeneratorSpec, RequestRecord, TraceProvenance, TraceStats
from servesim.services.tune import (
    BatchScenario,
    BatchScenarioResult,
    Deployment,
    LoadScenario,
    LoadScenarioResult,
    PercentileSLO,
    SaturationReport,
    SchedulerRecommendation,
    SearchSpace,
    TuneResult,
)


def boundary_models() -> dict[str, type[BaseModel]]:
    """The Pydantic models that cross servesim's boundaries, by name."""
    models: dict[str, type[BaseModel]] = {
        "RequestRecord": RequestRecord,
        "TraceProvenance": TraceProvenance,
        "GeneratorSpec": GeneratorSpec,
        "TraceStats": TraceStats,
        "EngineConfig": EngineConfig,
        "SLO": SLO,
        "SimulationReport": SimulationReport,
        "RescheduleInput": RescheduleInput,
        "InterruptedRequest": InterruptedRequest,
        "ReschedulePlan": ReschedulePlan,
        "ProjectedRequest": ProjectedRequest,
        "ModelSpec": ModelSpec,
        "GPUSpec": GPUSpec,
        "HardwareProfile": HardwareProfile,
        "KVCapacity": KVCapacity,
        "CalibrationReport": CalibrationReport,
        "RecoveryInput": RecoveryInput,
        "RecoveryJobSpec": JobSpec,
        "JobDecision": JobDecision,
        "RecoveryPlan": RecoveryPlan,
        "RecoveryCluster": ClusterSpec,
        "FailureLogSpec": FailureLogSpec,
        "PercentileSLO": PercentileSLO,
        "Deployment": Deployment,
        "SearchSpace": SearchSpace,
        "SaturationReport": SaturationReport,
        "TuneResult": TuneResult,
        "SchedulerRecommendation": SchedulerRecommendation,
        "BatchScenario": BatchScenario,
        "BatchScenarioResult": BatchScenarioResult,
        "LoadScenario": LoadScenario,
        "LoadScenarioResult": LoadScenarioResult,
        "ActionRecord": ActionRecord,
    }
    return models


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema(
        name: str = typer.Argument(None, help="One model's name; all of them when omitted."),
    ) -> None:
        """Print the JSON Schema of servesim's input/output objects (JSON on stdout)."""
        models = boundary_models()
        if name is not None:
            if name not in models:
                raise typer.BadParameter(f"unknown model {shown(name)}; known: {', '.join(sorted(models))}")
            out: Any = models[name].model_json_schema()
        else:
            out = {n: m.model_json_schema() for n, m in sorted(models.items())}
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
