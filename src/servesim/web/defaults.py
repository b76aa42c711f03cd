"""A web request's deployment as ``servesim.spec`` sees it, and the defaults it gets (issue 27).

The web's bodies carry the engine keys the user set (``EngineConfig``'s names) and the hardware
(model, GPU, TP, memory share); ``deployment_spec`` turns them into the ``DeploymentSpec`` every
interface builds, and the jobs run ``servesim.spec.resolve`` on it — the same defaults (what
``vllm serve MODEL`` runs on that GPU), the same KV sizing, the same ``timed as`` line and the
same ``setup`` in the result as the CLI. A setting the request leaves out gets the GPU's value;
one it gives is kept; the run says which were filled in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servesim.engine import EngineConfig
from servesim.perf.serve_defaults import apply_serve_defaults
from servesim.spec import DeploymentSpec, ResolvedDeployment, resolve
from servesim.web.schemas import HardwareBody


def engine_defaults(gpu: str) -> dict[str, Any]:
    """The engine flags ``vllm serve`` applies on ``gpu`` (unknown GPU: vLLM's fallback)."""
    return apply_serve_defaults({}, gpu)[1]


def given(engine: EngineConfig | None) -> dict[str, Any]:
    """The engine keys a request set (the rest are ``vllm serve``'s defaults)."""
    return {} if engine is None else engine.model_dump(mode="json", exclude_unset=True)


def deployment_spec(
    engine: EngineConfig | None, hw: HardwareBody, *, replicas: int = 1, router: str | None = None
) -> DeploymentSpec:
    """The ``DeploymentSpec`` of a request's engine keys and hardware (the CLI builds the same
    one from ``--model/--gpu/--tp/--gpu-memory-utilization`` and the engine flags)."""
    keys = given(engine)
    if hw.num_gpu_blocks_override is not None:
        keys["num_gpu_blocks"] = hw.num_gpu_blocks_override
    extra: dict[str, Any] = {"router": router} if router is not None else {}
    asked = hw.model_fields_set  # what the request named; the rest are the spec's own defaults
    return DeploymentSpec(
        model=hw.model if "model" in asked else None,
        gpu=hw.gpu if "gpu" in asked else None,
        tp=hw.tensor_parallel_size if "tensor_parallel_size" in asked else None,
        gpu_memory_utilization=hw.gpu_memory_utilization if "gpu_memory_utilization" in asked else None,
        replicas=replicas,
        engine=keys,
        **extra,
    )


def resolved(engine: EngineConfig | None, hw: HardwareBody, max_model_len: int) -> ResolvedDeployment:
    """``servesim.spec.resolve`` of the request's deployment, the KV cache sized for
    ``max_model_len`` (a trace's longest request + 1) unless the engine sets one."""
    return resolve(deployment_spec(engine, hw), max_model_len=max_model_len)


def setup_notes(setup: ResolvedDeployment) -> list[str]:
    """The lines a run shows above its result, as the CLI prints them: what times the steps, the
    defaults applied, then any extrapolation warnings."""
    lines = [setup.timed_as]
    if setup.defaults_line:
        lines.append(setup.defaults_line)
    return [*lines, *setup.notes]


def with_defaults(engine: EngineConfig, gpu: str) -> EngineConfig:
    """``engine`` with every GPU-dependent field the request did not set filled in for ``gpu``
    (the door's check: a ``ValidationError`` names the field vLLM would refuse)."""
    values, applied = apply_serve_defaults(given(engine), gpu, engine.max_model_len)
    if not applied:
        return engine
    return EngineConfig.model_validate(values)


def stored_params(body: BaseModel) -> dict[str, Any]:
    """A request body as the job stores it: its ``engine`` and ``hardware`` hold only what the user
    set, so the job resolves the rest as the CLI does and the form is restored to what was asked."""
    params = body.model_dump(mode="json")
    engine = getattr(body, "engine", None)
    if isinstance(engine, EngineConfig):
        params["engine"] = given(engine)
    hardware = getattr(body, "hardware", None)
    if isinstance(hardware, HardwareBody):
        params["hardware"] = hardware.model_dump(mode="json", exclude_unset=True)
    return params
