"""Request and response bodies of the REST API (Pydantic; the OpenAPI schema is built from them).

The bodies are the specs every interface builds (issue 27): a run's ``deployment`` is
``servesim.spec.DeploymentSpec`` (model, GPU, TP, memory share, replicas, router and the vLLM keys
set, in ``EngineConfig``'s names) and its ``slo`` is ``servesim.spec.PercentileSLO``, given as an
object (``{"ttft_p99_ms": 500}``) or in the CLI's one syntax (``"ttft_p99_ms=500,tpot_p99_ms=50"``),
both read by the one parser with the CLI's wording. The API takes exactly what the CLI resolves.

Older bodies (``engine`` + ``hardware``, a top-level ``replicas``/``router``, the engine's
per-request ``slo`` keys ``ttft_ms``/``tpot_ms``/``e2e_ms``) are translated into that shape before
validation (``legacy_body``), so stored runs and existing clients keep working and get the same
result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from servesim import tune_defaults
from servesim.services.cluster import FailureEvent, PoolSpec, ShortPromptTokens
from servesim.services.deployment import DeploymentSpec, PercentileSLO, SLOError
from servesim.services.layouts import DEFAULT_LAYOUT_KINDS, LayoutKind
from servesim.services.rescheduling import Policy

if TYPE_CHECKING:
    from servesim.services.cluster import DisaggSpec

ID_PATTERN = r"^[0-9a-f]{32}$"
#: The most GPU types one Tune job compares (and GPU prices it takes).
MAX_GPU_TYPES = 16
#: A catalog GPU's name as a body gives it (checked against the catalog by the field's validator).
GpuName = Annotated[str, Field(min_length=1, max_length=100)]
#: The most replicas one web job simulates (a cluster of 1,024 is the CLI's, not a shared server's).
WEB_MAX_REPLICAS = 16
#: The older bodies' hardware keys and the ``DeploymentSpec`` field each became.
LEGACY_HARDWARE = {
    "model": "model",
    "gpu": "gpu",
    "tensor_parallel_size": "tp",
    "gpu_memory_utilization": "gpu_memory_utilization",
}
#: The engine's per-request SLO keys of the older simulate/advise bodies: each is the p99 cap
#: ``PercentileSLO`` names (its ``request_slo`` is that same per-request threshold).
LEGACY_SLO = {"ttft_ms": "ttft_p99_ms", "tpot_ms": "tpot_p99_ms", "e2e_ms": "e2e_p99_ms"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def legacy_body(data: Any, *, cluster: bool, legacy_slo: bool) -> Any:
    """An older body (``engine`` + ``hardware``; ``cluster``: a top-level ``replicas`` and
    ``router``; ``legacy_slo``: ``slo`` in the engine's ``ttft_ms``/``tpot_ms``/``e2e_ms``) in
    today's shape: ``deployment`` (a ``DeploymentSpec``) and a ``PercentileSLO``. A body already in
    today's shape is returned as it is; one mixing both shapes is refused."""
    if not isinstance(data, dict):
        return data
    old = [k for k in ("engine", "hardware", *(("replicas", "router") if cluster else ())) if k in data]
    out = dict(data)
    if old:
        if "deployment" in data:
            raise ValueError(f"give deployment, or the older {' and '.join(old)}, not both")
        hardware = out.pop("hardware", None)
        engine = out.pop("engine", None)
        dep: dict[str, Any] = {}
        keys: dict[str, Any] = {}
        if engine is not None:
            if not isinstance(engine, dict):
                raise ValueError("engine must be an object of vLLM keys")
            keys.update(engine)
        if hardware is not None:
            if not isinstance(hardware, dict):
                raise ValueError("hardware must be an object (model, gpu, tensor_parallel_size ...)")
            for key, value in hardware.items():
                if key == "num_gpu_blocks_override":
                    if value is not None:
                        keys["num_gpu_blocks"] = value
                elif key in LEGACY_HARDWARE:
                    dep[LEGACY_HARDWARE[key]] = value
                else:
                    raise ValueError(f"hardware has no key {key!r}: use {', '.join(LEGACY_HARDWARE)}")
        for key in ("replicas", "router"):
            if key in out:
                dep[key] = out.pop(key)
        if keys:
            dep["engine"] = keys
        out["deployment"] = dep
    slo = out.get("slo")
    if legacy_slo and isinstance(slo, dict) and any(k in slo for k in LEGACY_SLO):
        if any(k in slo for k in LEGACY_SLO.values()):
            raise ValueError("slo: give the p99 caps (ttft_p99_ms ...) or the older ttft_ms ..., not both")
        out["slo"] = {LEGACY_SLO.get(k, k): v for k, v in slo.items()}
    return out


def read_slo(value: Any) -> Any:
    """A body's ``slo``: null, an object of ``PercentileSLO``'s keys or the CLI's text, read by
    the one parser (``PercentileSLO.from_mapping`` / ``servesim.spec.parse_slo``), so a bad SLO is
    worded as the CLI words it. An empty text or object is no SLO, as an empty ``--slo`` is."""
    from servesim.services.deployment import parse_slo

    if isinstance(value, str):
        if len(value) > 1000:
            raise SLOError(f"SLO text of {len(value):,} characters: at most 1,000")
        return parse_slo(value)
    if isinstance(value, dict):
        return PercentileSLO.from_mapping(value)
    return value


def single_run_slo(value: PercentileSLO | None) -> PercentileSLO | None:
    """A single run's SLO: each cap is each request's goodput threshold; ``good=FRACTION`` is
    judged by saturate and tune (refused here as the CLI refuses it)."""
    if value is not None:
        value.per_request()
    return value


class SpecBody(Strict):
    """A body that runs a deployment: the spec, its older shape translated first."""

    #: Whether the older body had a top-level ``replicas`` / ``router`` (simulate, saturate).
    _cluster_keys: ClassVar[bool] = False
    #: Whether the older body's ``slo`` was the engine's per-request SLO (simulate, advise).
    _legacy_slo: ClassVar[bool] = False

    deployment: DeploymentSpec = Field(
        default_factory=DeploymentSpec,
        description="The deployment (servesim.spec.DeploymentSpec, as the CLI's flags build it): "
        "model, GPU, TP, memory share, replicas, router and the vLLM keys set; the rest are what "
        "vllm serve runs on that GPU.",
    )

    @model_validator(mode="before")
    @classmethod
    def _older_shape(cls, data: Any) -> Any:
        return cls.older(data)

    @classmethod
    def older(cls, data: Any) -> Any:
        """``data`` in today's shape (``legacy_body``)."""
        return legacy_body(data, cluster=cls._cluster_keys, legacy_slo=cls._legacy_slo)


def _text_too(schema: dict[str, Any]) -> None:
    """The ``slo`` field's schema: the object, or the CLI's text, or null."""
    schema.setdefault("anyOf", []).insert(1, {"type": "string", "maxLength": 1000})


SLOField: Any = Field(
    None,
    description="p99 caps in ms, also each request's goodput threshold: an object "
    '({"ttft_p99_ms": 500, "tpot_p99_ms": 50}) or the CLI\'s text ("ttft_p99_ms=500,tpot_p99_ms=50").',
    json_schema_extra=_text_too,
)


class PoolBody(PoolSpec):
    """One pool of a disaggregated run: the one pool type (``cluster.pd.PoolSpec``: replicas, GPU
    and TP, the deployment's where unset) with this server's per-job replica bound; the
    deployment's model and vLLM keys apply to every pool."""

    replicas: int = Field(1, ge=1, le=WEB_MAX_REPLICAS, description="Replicas of this pool.")
    config: dict[str, object] = Field(
        default_factory=dict,
        max_length=0,
        description="Not set here: the deployment's vLLM keys (deployment.engine) apply to both pools.",
    )

    @field_validator("config", mode="before")
    @classmethod
    def _keys_are_the_deployments(cls, value: Any) -> Any:
        if isinstance(value, dict) and value:
            raise ValueError("a pool takes the deployment's vLLM keys (deployment.engine): set them there")
        return value


class DisaggregatedBody(Strict):
    """Prefill/decode disaggregation: the two pools, the KV-transfer link, the short-prompt
    threshold (``servesim cluster --prefill-replicas N --decode-replicas M``)."""

    prefill: PoolBody = Field(default_factory=PoolBody)
    decode: PoolBody = Field(default_factory=PoolBody)
    link: str = Field("rdma-400g", min_length=1, max_length=100, description="KV-transfer link preset.")
    short_prompt_tokens: ShortPromptTokens = 0

    @field_validator("link")
    @classmethod
    def _known_link(cls, value: str) -> str:
        from servesim.services.cluster import link_presets

        presets = link_presets()
        if value not in presets:
            raise ValueError(f"unknown link {value!r}; presets: {', '.join(sorted(presets))}")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> DisaggregatedBody:
        total = self.prefill.replicas + self.decode.replicas
        if total > WEB_MAX_REPLICAS:
            raise ValueError(
                f"{total} replicas in the two pools: this server simulates at most {WEB_MAX_REPLICAS} per job"
            )
        return self


class SimulateBody(SpecBody):
    """One replica (``deployment.replicas`` 1), a cluster with failures (more replicas,
    ``failures``), or prefill and decode pools (``disaggregated``; failures name ``pN``/``dN``)."""

    _cluster_keys = True
    _legacy_slo = True

    trace_id: str = Field(pattern=ID_PATTERN)
    slo: PercentileSLO | None = SLOField
    label: str | None = Field(None, max_length=200)
    failures: list[FailureEvent] = Field(default_factory=list, max_length=64)
    recovery: Literal["planner", "migrate", "restart"] = "planner"
    disaggregated: DisaggregatedBody | None = Field(
        None, description="Prefill and decode pools instead of identical replicas (null: aggregated)."
    )

    _slo = field_validator("slo", mode="before")(read_slo)
    _one_run = field_validator("slo")(single_run_slo)

    @model_validator(mode="after")
    def _pools(self) -> SimulateBody:
        pd = self.disaggregated
        if pd is None:
            names = [f"n{k}" for k in range(self.deployment.replicas)]  # as resolve_cluster names them
            for i, f in enumerate(self.failures):
                if f.node not in names:
                    raise ValueError(
                        f"failures[{i}].node: no replica {f.node!r}; the replicas are "
                        f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
                    )
            return self
        if self.deployment.replicas != 1:
            raise ValueError(
                "deployment.replicas: a disaggregated run's replicas are its pools' "
                "(disaggregated.prefill.replicas, disaggregated.decode.replicas); leave it at 1"
            )
        from servesim.services.cluster import parse_pool_node

        for i, f in enumerate(self.failures):
            try:
                parse_pool_node(f.node, pd.prefill.replicas, pd.decode.replicas)
            except ValueError as e:
                raise ValueError(f"failures[{i}].node: {e}") from None
        if self.deployment.profile is not None:
            raise ValueError(
                "deployment.profile: a disaggregated run times each pool on its own GPU; leave it out"
            )
        return self

    def pools(self) -> DisaggSpec:
        """The pools as the CLI's flags (or a cluster file) state them: each pool's replicas, GPU
        and TP (else the deployment's TP), the deployment's vLLM keys on both, its model served."""
        from servesim.services.cluster import DisaggSpec

        pd, dep = self.disaggregated, self.deployment
        if pd is None:
            raise ValueError("not a disaggregated run")
        made = {
            name: PoolSpec(replicas=p.replicas, gpu=p.gpu, tp=p.tp or dep.tp, config=dict(dep.engine))
            for name, p in (("prefill", pd.prefill), ("decode", pd.decode))
        }
        model = {"model": dep.model} if dep.model is not None else {}
        return DisaggSpec(**made, link=pd.link, short_prompt_tokens=pd.short_prompt_tokens, **model)

    def shared(self) -> dict[str, Any]:
        """What every pool takes from the deployment besides its model and keys: the step timing
        and the memory share, where set (``DisaggregatedSpec.of_pools``)."""
        dep = self.deployment
        out: dict[str, Any] = {"step_time_ms": dep.step_time_ms, "linear_step_time": dep.linear_step_time}
        if dep.gpu_memory_utilization is not None:
            out["gpu_memory_utilization"] = dep.gpu_memory_utilization
        return out


class RescoreBody(Strict):
    """Another SLO for a finished run (``POST /api/runs/{id}/slo``): the same ``slo`` as a
    simulation's, read by the same parser; null (or none given) scores the run with no SLO."""

    slo: PercentileSLO | None = SLOField

    _slo = field_validator("slo", mode="before")(read_slo)
    _one_run = field_validator("slo")(single_run_slo)


class SaturateBody(SpecBody):
    _cluster_keys = True

    trace_id: str = Field(pattern=ID_PATTERN)
    slo: PercentileSLO | None = SLOField
    target_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    seeds: int = Field(2, ge=1, le=5, description="Replicate seeds per rate.")
    rtol: float = Field(
        0.02,
        ge=0.01,
        le=0.5,
        description="Relative resolution of the rate search (the lattice tune's headroom uses too).",
    )
    label: str | None = Field(None, max_length=200)

    _slo = field_validator("slo", mode="before")(read_slo)


class LayoutsBody(Strict):
    """Aggregated against disaggregated layouts of one GPU budget instead of the flag search
    (``servesim tune --layouts agg,disagg --gpus N``): the deployment's model and GPU serve every
    layout, each pool at vllm serve's defaults but for the values tried here."""

    kinds: list[LayoutKind] = Field(
        default_factory=lambda: list(DEFAULT_LAYOUT_KINDS), min_length=1, description="The kinds compared."
    )
    gpus: int = Field(ge=1, le=WEB_MAX_REPLICAS, description="The GPU budget every layout spends.")
    link: str = Field("rdma-400g", min_length=1, max_length=100, description="KV-transfer link preset.")
    short_prompt_tokens: int = Field(
        0, ge=0, le=10_000_000, description="Prompts shorter than this prefill on their decode replica."
    )
    prefill_batched_tokens: list[Annotated[int, Field(ge=1, le=1 << 24)]] = Field(
        default_factory=list, max_length=8, description="Prefill pool max_num_batched_tokens values to try."
    )
    decode_max_seqs: list[Annotated[int, Field(ge=1, le=1 << 20)]] = Field(
        default_factory=list, max_length=8, description="Decode pool max_num_seqs values to try."
    )
    break_even: bool = Field(True, description="Bisect the link bandwidth where disaggregation stops paying.")

    @field_validator("link")
    @classmethod
    def _known_link(cls, value: str) -> str:
        from servesim.services.cluster import link_presets

        presets = link_presets()
        if value not in presets:
            raise ValueError(f"unknown link {value!r}; presets: {', '.join(sorted(presets))}")
        return value


class TuneBody(SpecBody):
    trace_id: str = Field(pattern=ID_PATTERN)
    baseline: bool = Field(
        True,
        description="Evaluate the deployment first as the study's baseline (your configuration, "
        "the Run tab's); false: vllm serve's defaults are the only starting point.",
    )
    slo: PercentileSLO | None = SLOField
    target_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    objective: Literal["goodput_per_gpu", "pareto"] = "goodput_per_gpu"
    n_trials: int = Field(tune_defaults.TRIALS, ge=1, description="Trials this job adds to the study.")
    trial_seeds: int = Field(
        tune_defaults.TRIAL_SEEDS, ge=1, le=3, description="Seeds (replicates) per trial."
    )
    pruning: Literal["rungs", "none"] = Field("none", description="Search rungs (docs/tuning.md).")
    verify_seeds: int = Field(
        tune_defaults.VERIFY_SEEDS, ge=1, le=5, description="Fresh seeds re-verifying the recommendation."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)
    max_gpus: int | None = Field(None, ge=1, le=64)
    space: dict[str, Any] | None = Field(None, description="Knob -> choices or {low, high} (docs/tuning.md).")
    study_name: str | None = Field(
        None, max_length=120, pattern=r"^[A-Za-z0-9_.:-]+$", description="Resume this stored study."
    )
    gpu_hour_usd: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        description="$ per GPU-hour of the deployment's GPU: the plan's $ an hour, a day and per 1M "
        "tokens (none: the GPU's list price, gpu_prices over it, as servesim tune --gpu-hour-usd).",
    )
    layouts: LayoutsBody | None = Field(
        None, description="Compare layouts of one GPU budget instead of searching flags (verify_seeds apply)."
    )
    gpu_prices: dict[GpuName, float] = Field(
        default_factory=dict,
        max_length=MAX_GPU_TYPES,
        description="$ per GPU-hour by catalog GPU over the shipped list prices (servesim tune "
        "--gpu-price h100=2.5 / --gpu-prices FILE): each a positive number.",
    )
    gpu_types: list[GpuName] = Field(
        default_factory=list,
        max_length=MAX_GPU_TYPES,
        description="GPU types to compare (servesim tune --gpu-types h100,l40s): one study of n_trials "
        "each, the cheapest verified type meeting the SLO recommended; empty: the deployment's GPU "
        "alone. Not with deployment.gpu, gpu_hour_usd, layouts or a fixed step time.",
    )
    label: str | None = Field(None, max_length=200)

    _slo = field_validator("slo", mode="before")(read_slo)

    @field_validator("gpu_prices")
    @classmethod
    def _priced(cls, value: dict[str, float]) -> dict[str, float]:
        """Each GPU known and each price positive, in the CLI's words (``perf.prices``)."""
        from servesim.services.perf import load_prices

        load_prices().with_overrides(value, "gpu_prices")
        return value

    @field_validator("gpu_types")
    @classmethod
    def _known_types(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """Each type known and priced (``services.gpu_types.gpu_type_names``, as the CLI checks)."""
        from servesim.services.gpu_types import gpu_type_names

        if value:
            gpu_type_names(value, info.data.get("gpu_prices") or {}, flag="gpu_types")
        return value

    @classmethod
    def older(cls, data: Any) -> Any:
        # The older body's ``engine`` null (or absent) meant "no baseline: vllm serve's defaults";
        # today's body names its deployment, which is the baseline unless it says otherwise.
        if isinstance(data, dict) and "baseline" not in data:
            data = {**data, "baseline": "deployment" in data or data.get("engine") is not None}
        return super().older(data)


class RecoverBody(Strict):
    """A node-interruption record (``servesim recover``'s input: ``active_jobs`` ...)."""

    record: dict[str, Any]


class RescheduleBody(Strict):
    """Interrupted requests (``servesim reschedule``'s input: batch_capacity, interrupted_requests)."""

    data: dict[str, Any]
    policy: Policy | None = None


class AdviseBody(SpecBody):
    """Batching advice on a stored trace (for ``deployment`` against ``slo``), or rescheduling /
    fallback advice on a record."""

    _legacy_slo = True

    task: Literal["batching", "reschedule", "fallback"] = "batching"
    trace_id: str | None = Field(None, pattern=ID_PATTERN)
    slo: PercentileSLO | None = SLOField
    data: dict[str, Any] | None = Field(None, description="The reschedule input or recovery record.")
    advisor: Literal["auto", "dspy", "rules", "claude"] = Field(
        "auto",
        description="auto: with the server's ANTHROPIC_API_KEY the DSPy program (compiled when one is "
        "saved), else the rules advisor, as `servesim advise` chooses; dspy, claude (pydantic-ai) "
        "or rules by name.",
    )
    optimize: int = Field(6, ge=0, le=40, description="Optuna trials for the optimizer's best (batching).")

    _slo = field_validator("slo", mode="before")(read_slo)
    _one_run = field_validator("slo")(single_run_slo)


class BenchSimulateBody(SpecBody):
    """Re-run a stored ``vllm bench serve`` result's workload (or compare it with a stored run)."""

    bench_id: str = Field(pattern=ID_PATTERN)
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds the re-created send times.")
    run_id: str | None = Field(
        None, pattern=ID_PATTERN, description="Compare with this finished simulation run instead."
    )
    label: str | None = Field(None, max_length=200)


#: Each job kind's body (a stored job's params are one of these, dumped by ``stored_params``).
BODIES: dict[str, type[SpecBody]] = {
    "simulate": SimulateBody,
    "saturate": SaturateBody,
    "tune": TuneBody,
    "advise": AdviseBody,
    "overlay": BenchSimulateBody,
}


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


class JobState(BaseModel):
    """A job's status and progress: ``GET /api/jobs/{id}``'s body, and the JSON ``data`` of every
    event its ``/events`` stream sends (``event: progress`` while it runs, then one ``event: end``)."""

    id: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    done: int = Field(description="Units of work done (requests simulated, trials, rates).")
    total: int = Field(description="Units of work in all (0 until the job knows).")
    eta_s: float | None = Field(None, description="Seconds left at the rate so far (running jobs).")
    extra: dict[str, Any] | None = Field(None, description="A snapshot the page draws (a study's trials).")
    error: str | None = Field(None, description="Why it failed or was cancelled.")


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
