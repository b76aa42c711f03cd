"""A web request's deployment as ``servesim.spec`` resolves it, and the defaults it gets (issue 27).

The web's bodies carry a ``DeploymentSpec`` (the keys the user set) and the jobs run
``servesim.spec.resolve`` on it — the same defaults (what ``vllm serve MODEL`` runs on that GPU),
the same KV sizing, the same ``timed as`` line and the same ``setup`` in the result as the CLI. A
setting the request leaves out gets the GPU's value; one it gives is kept; the run says which
were filled in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from servesim.services.deployment import DeploymentSpec, ResolvedDeployment, resolve
from servesim.services.perf import apply_serve_defaults
from servesim.web.schemas import BODIES


def engine_defaults(gpu: str) -> dict[str, Any]:
    """The engine flags ``vllm serve`` applies on ``gpu`` (unknown GPU: vLLM's fallback)."""
    return apply_serve_defaults({}, gpu)[1]


def resolved(spec: DeploymentSpec, max_model_len: int) -> ResolvedDeployment:
    """``servesim.spec.resolve`` of the request's deployment, the KV cache sized for
    ``max_model_len`` (a trace's longest request + 1) unless the engine sets one."""
    return resolve(spec, max_model_len=max_model_len)


def setup_notes(setup: ResolvedDeployment) -> list[str]:
    """The lines a run shows above its result, as the CLI prints them: what times the steps, the
    defaults applied, then any extrapolation warnings."""
    lines = [setup.timed_as]
    if setup.defaults_line:
        lines.append(setup.defaults_line)
    return [*lines, *setup.notes]


def stored_params(body: BaseModel) -> dict[str, Any]:
    """A request body as the job stores it: its ``deployment`` holds only what the user set (so
    the job resolves the rest as the CLI does and the form is restored to what was asked), its
    ``slo`` only the caps given."""
    params = body.model_dump(mode="json")
    deployment = getattr(body, "deployment", None)
    if isinstance(deployment, DeploymentSpec):
        params["deployment"] = deployment.model_dump(mode="json", exclude_unset=True)
    slo = getattr(body, "slo", None)
    if isinstance(slo, BaseModel):
        params["slo"] = slo.model_dump(mode="json", exclude_none=True)
    return params


def current_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """A stored job's params in today's shape: a run stored with an older body (``engine`` +
    ``hardware``, ``slo`` in ``ttft_ms``) reads as the body it is translated to, so "load these
    settings" and a comparison treat old and new runs alike. Params that no longer validate are
    returned as stored."""
    body = BODIES.get(kind)
    if body is None or "deployment" in params:
        return params
    try:
        return stored_params(body.model_validate(params))
    except (ValidationError, ValueError):
        return params
