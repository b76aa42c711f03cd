"""Capacity questions: how far can the load go? (``SaturateRequest`` -> ``SaturateAnswer``), and
what the tuning study (``services.tune``) and the layout comparison (``services.layouts``) share
with it: where the runs go (``Execution``), the traffic (``workload_of``) and the deployment's
hardware checked before any work (``checked_hardware``).

``servesim saturate``, the web's saturation job and the demo's sweep all build a
``SaturateRequest`` and call ``saturate``: the same trace reading, the same deployment (vllm serve's
defaults on the GPU for what it leaves unset), the one capacity search
(``tuning.saturation.find_saturation``) on the fresh seeds (``tuning.workload.fresh_seeds``) that
``tune``'s headroom also uses, so the SLO knee and the unstable rate are the same number wherever
the question is asked. The answer's document is ``report.capacity.saturate_document(answer)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import ConfigError, InputError, describe
from servesim.services.inputs import Progress, TraceInput, counter
from servesim.spec import DeploymentSpec, PercentileSLO

if TYPE_CHECKING:
    from servesim.traces.schema import TraceProvenance
    from servesim.tuning import Hardware, SaturationReport, Workload

#: Seeds per rate a request may ask for (each rate runs once per seed).
MAX_SEEDS = 20


class Execution(BaseModel):
    """Where a capacity question's simulations run: in this process, a process pool or Ray.
    The answer does not depend on it (the jobs are deterministic and told back in order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executor: Literal["local", "process", "ray"] = "local"
    jobs: int = Field(2, ge=1, le=1024, description="Workers (process pool or Ray CPUs).")
    address: str | None = Field(None, description="Ray cluster address (executor ray).")


class DeploymentFieldError(ConfigError):
    """A deployment setting refused before any work; ``field`` is the ``DeploymentSpec`` field
    (``model``, ``gpu``, ``tp``) so each interface names it its own way (``--gpu``,
    ``body.deployment.gpu``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def check_names(spec: DeploymentSpec) -> None:
    """The deployment's model, GPU, TP and profile checked: an unknown name or a TP the
    model's heads cannot split over is refused before the first run, naming the setting
    (``DeploymentFieldError``), as ``simulate`` refuses it before its run. A fixed step time
    names no model or GPU: nothing to check."""
    from servesim.perf.catalog import resolve_gpu, resolve_model
    from servesim.perf.memory import check_tp
    from servesim.perf.profile import resolve_profile
    from servesim.perf.setup import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_TP

    if spec.fixed_timing:
        return
    model = _named("model", lambda: resolve_model(spec.model or DEFAULT_MODEL))
    _named("gpu", lambda: resolve_gpu(spec.gpu or DEFAULT_GPU))
    _named("tp", lambda: check_tp(model, DEFAULT_TP if spec.tp is None else spec.tp))
    if spec.profile is not None:  # else every trial failed alone: "no trial could run, widen the space"
        _named("profile", lambda: resolve_profile(spec.profile, spec.gpu or DEFAULT_GPU))


def checked_hardware(spec: DeploymentSpec) -> Hardware:
    """The hardware context of ``spec`` (``tuning.hardware_of``), its names checked first
    (``check_names``)."""
    from servesim.tuning import hardware_of

    check_names(spec)
    return hardware_of(spec)


def _named(field: str, check: Callable[[], Any]) -> Any:
    try:
        return check()
    except InputError as exc:
        raise DeploymentFieldError(field, describe(exc)) from None


def workload_of(trace: TraceInput) -> Workload:
    """The request's traffic as a ``Workload`` (rescaled to any rate, replicated by seed): a file
    or bundled trace read as ``TraceInput.open`` reads it (named as the request names it), else a
    generator preset with its size and seed."""
    from servesim.traces.bundled import BUNDLED_TRACES
    from servesim.tuning import Workload

    if Path(trace.source).exists() or trace.source in BUNDLED_TRACES:
        return Workload.from_trace(trace.open(), name=trace.name)
    return Workload.from_source(trace.source, seed=trace.seed, num_requests=trace.num_requests)


class SaturateRequest(BaseModel):
    """A deployment under traffic scaled rate by rate: where the SLO stops holding, where the
    queue grows without bound, and the throughput-latency curve."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: TraceInput
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec)
    slo: PercentileSLO | None = Field(None, description="p99 caps: the SLO knee is where they stop holding.")
    target_rate: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Load to judge headroom at (default: the trace's)."
    )
    seeds: int = Field(3, ge=1, le=MAX_SEEDS, description="Fresh seeds (replicates) per rate.")
    rtol: float = Field(
        0.02, gt=0, le=0.5, allow_inf_nan=False, description="Relative resolution of the rate search."
    )
    min_rate: float | None = Field(None, gt=0, allow_inf_nan=False, description="Lowest rate to try.")
    max_rate: float | None = Field(None, gt=0, allow_inf_nan=False, description="Highest rate to try.")
    compare_off: bool = Field(
        True, description="With speculative decoding on: also search the deployment with it off."
    )
    execution: Execution = Field(default_factory=Execution)


@dataclass(frozen=True)
class SaturateAnswer:
    """The sweep's report, with the traffic and hardware it ran on."""

    request: SaturateRequest
    report: SaturationReport
    workload: Workload
    hardware: Hardware
    #: the vllm serve defaults the deployment started from (what it left unset)
    defaults_applied: dict[str, Any]

    @property
    def provenance(self) -> TraceProvenance | None:
        return self.workload.provenance


def saturate(request: SaturateRequest, *, progress: Progress | None = None) -> SaturateAnswer:
    """Scale the arrival rate of the request's traffic on its deployment: the SLO knee and the
    unstable rate (``tuning.saturation.find_saturation``, on ``fresh_seeds(request.seeds)``), the
    curve and the status at the target rate (``progress``: phase ``rates``). The deployment is
    checked before the trace is read."""
    from servesim.cluster import RouterSpec
    from servesim.spec import engine_values
    from servesim.tuning import Deployment, EvalSettings, SaturationSettings, find_saturation
    from servesim.tuning.workload import fresh_seeds

    spec = request.deployment
    hardware = checked_hardware(spec)
    engine_values(spec)  # vLLM's own rules on the keys given, before any work
    workload = workload_of(request.trace)
    mml = workload.default_max_model_len()
    _, applied = engine_values(spec, mml)
    settings = SaturationSettings(
        seeds=fresh_seeds(request.seeds),
        rtol=request.rtol,
        min_rate=request.min_rate,
        max_rate=request.max_rate,
    )
    ex = request.execution
    report = find_saturation(
        workload,
        Deployment.from_spec(spec, mml),
        hardware,
        request.slo,
        target_rate=request.target_rate or workload.base_rate,
        settings=settings,
        eval_settings=EvalSettings(router=RouterSpec(policy=spec.router)),
        executor=ex.executor,
        n_jobs=ex.jobs,
        address=ex.address,
        progress=counter(progress, "rates"),
        compare_off=request.compare_off,
    )
    return SaturateAnswer(request, report, workload, hardware, dict(applied))


__all__ = [
    "DeploymentFieldError",
    "Execution",
    "SaturateAnswer",
    "SaturateRequest",
    "check_names",
    "checked_hardware",
    "saturate",
    "workload_of",
]
