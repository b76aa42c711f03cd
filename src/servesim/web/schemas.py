"""Request and response bodies of the REST API (Pydantic; the OpenAPI schema is built from them).

Engine settings are servesim's ``EngineConfig`` itself (vLLM's flag names with underscores), SLOs
are the library's ``SLO`` / ``PercentileSLO``: the API takes exactly what the library validates.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from servesim.cluster import FailureEvent
from servesim.engine import SLO, EngineConfig
from servesim.resched import Policy
from servesim.tuning import PercentileSLO
from servesim.tuning.hardware import DEFAULT_GPU, DEFAULT_MODEL

ID_PATTERN = r"^[0-9a-f]{32}$"
RouterName = Literal[
    "round_robin", "random", "least_outstanding", "least_kv", "power_of_two", "prefix_aware", "vllm_dp"
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareBody(Strict):
    """The served model and GPUs (``servesim perf`` catalog), as ``vllm serve`` would size them."""

    model: str = Field(DEFAULT_MODEL, min_length=1, max_length=200, description="Catalog model name.")
    gpu: str = Field(DEFAULT_GPU, min_length=1, max_length=100, description="Catalog GPU name.")
    tensor_parallel_size: int = Field(1, ge=1, le=16, description="vLLM --tensor-parallel-size.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM --gpu-memory-utilization.")
    num_gpu_blocks_override: int | None = Field(
        None, ge=2, description="vLLM --num-gpu-blocks-override: KV blocks instead of the memory model's."
    )


class SimulateBody(Strict):
    """One replica (``replicas`` 1) or a cluster with failures (``replicas`` > 1 or ``failures``)."""

    trace_id: str = Field(pattern=ID_PATTERN)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    hardware: HardwareBody = Field(default_factory=HardwareBody)
    slo: SLO | None = None
    label: str | None = Field(None, max_length=200)
    replicas: int = Field(1, ge=1, le=16)
    router: RouterName = "least_outstanding"
    failures: list[FailureEvent] = Field(default_factory=list, max_length=64)
    recovery: Literal["planner", "migrate", "restart"] = "planner"


class SaturateBody(Strict):
    trace_id: str = Field(pattern=ID_PATTERN)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    hardware: HardwareBody = Field(default_factory=HardwareBody)
    slo: PercentileSLO | None = None
    replicas: int = Field(1, ge=1, le=16)
    target_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    seeds: int = Field(2, ge=1, le=5, description="Replicate seeds per rate.")
    rtol: float = Field(0.05, ge=0.01, le=0.5)
    label: str | None = Field(None, max_length=200)


class TuneBody(Strict):
    trace_id: str = Field(pattern=ID_PATTERN)
    hardware: HardwareBody = Field(default_factory=HardwareBody)
    engine: EngineConfig | None = Field(
        None,
        description="Your configuration (the Run tab's): the study's baseline. None: vllm serve's defaults.",
    )
    slo: PercentileSLO | None = None
    target_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    objective: Literal["goodput_per_gpu", "pareto"] = "goodput_per_gpu"
    n_trials: int = Field(12, ge=1, description="Trials this job adds to the study.")
    trial_seeds: int = Field(1, ge=1, le=3)
    verify_seeds: int = Field(2, ge=1, le=5)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    max_gpus: int | None = Field(None, ge=1, le=64)
    space: dict[str, Any] | None = Field(None, description="Knob -> choices or {low, high} (docs/tuning.md).")
    study_name: str | None = Field(
        None, max_length=120, pattern=r"^[A-Za-z0-9_.:-]+$", description="Resume this stored study."
    )
    label: str | None = Field(None, max_length=200)


class RecoverBody(Strict):
    """A node-interruption record (``servesim recover``'s input: ``active_jobs`` ...)."""

    record: dict[str, Any]


class RescheduleBody(Strict):
    """Interrupted requests (``servesim reschedule``'s input: batch_capacity, interrupted_requests)."""

    data: dict[str, Any]
    policy: Policy | None = None


class AdviseBody(Strict):
    """Batching advice on a stored trace, or rescheduling / fallback advice on a record."""

    task: Literal["batching", "reschedule", "fallback"] = "batching"
    trace_id: str | None = Field(None, pattern=ID_PATTERN)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    hardware: HardwareBody = Field(default_factory=HardwareBody)
    slo: SLO | None = None
    data: dict[str, Any] | None = Field(None, description="The reschedule input or recovery record.")
    advisor: Literal["auto", "dspy", "rules", "claude"] = Field(
        "auto",
        description="auto: with the server's ANTHROPIC_API_KEY the DSPy program (compiled when one is "
        "saved), else the rules advisor, as `servesim advise` chooses; dspy, claude (pydantic-ai) "
        "or rules by name.",
    )
    optimize: int = Field(6, ge=0, le=40, description="Optuna trials for the optimizer's best (batching).")


class BenchSimulateBody(Strict):
    """Re-run a stored ``vllm bench serve`` result's workload (or compare it with a stored run)."""

    bench_id: str = Field(pattern=ID_PATTERN)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    hardware: HardwareBody = Field(default_factory=HardwareBody)
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds the re-created send times.")
    run_id: str | None = Field(
        None, pattern=ID_PATTERN, description="Compare with this finished simulation run instead."
    )
    label: str | None = Field(None, max_length=200)


class BenchOut(BaseModel):
    id: str
    name: str
    created_at: str
    summary: dict[str, Any]


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: ``3`` and ``3.0`` are one (the OpenAPI document says integer), while
    ``true`` and ``"3"`` are not numbers at all (then the strict int check refuses them)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]


class GenerateBody(Strict):
    preset: str = Field("default", min_length=1, max_length=100, description="Preset or arrival name.")
    num_requests: JsonInt = Field(500, ge=1, strict=True)  # strict: JSON true is not a count
    seed: JsonInt = Field(0, ge=0, le=2**31 - 1, strict=True)
    name: str | None = Field(None, max_length=200)


class JobOut(BaseModel):
    id: str
    kind: str
    title: str
    status: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    progress_done: int
    progress_total: int
    trace_id: str | None
    params: dict[str, Any]
    error: str | None


class TraceOut(BaseModel):
    id: str
    name: str
    created_at: str
    origin: str
    num_requests: int
    num_dropped: int
    digest: str
    stats: dict[str, Any]
    dropped: list[dict[str, Any]]
