"""``RunSpec``: one question asked of the simulator — this trace, on this deployment, against this SLO.

It is what a result document records as ``run`` (so a saved result says exactly what produced it),
what the web's run form submits, and what the CLI's ``simulate``/``dashboard`` build from their flags.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servesim.spec.deployment import DeploymentSpec
from servesim.spec.slo import PercentileSLO


class RunSpec(BaseModel):
    """A trace reference (file, bundled name or generator preset), the deployment, the SLO, seeds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str = Field(min_length=1, description="Trace file, bundled trace or generator preset.")
    num_requests: int | None = Field(None, ge=0, description="Requests to generate (presets only).")
    seed: int = Field(0, ge=0, description="Seed of generated traces and seed-JSON arrivals.")
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec)
    slo: PercentileSLO | None = Field(None, description="p99 caps (also per-request goodput thresholds).")


__all__ = ["RunSpec"]
