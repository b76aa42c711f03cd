"""Calibration profiles: the efficiency factors and overheads the roofline step-time model uses.

A ``HardwareProfile`` is a JSON file (``HardwareProfile.save`` / ``load``). servesim ships one
calibrated profile per GPU it has measurements for (``servesim/data/perf/profiles/<gpu>.json``);
other GPUs get the defaults below, which are physical priors, not fits to serving runs: the
GEMM efficiencies and the roofline's sharpness come from fitting Vidur's published per-layer
GEMM timings on H100 and A100 (``benchmarks/perf_vidur_gemm.py``: 0.73 of peak FLOP/s for
large GEMMs on both, 0.87-1.0 of peak bandwidth for weight streaming, p = 1.2-1.4, a few
microseconds per kernel); the overheads are typical kernel-launch and scheduling costs.

``fitted_range`` records what the calibration data covered, so that using the profile far
outside it warns (``ExtrapolationWarning``) instead of extrapolating silently.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.errors import shown
from servesim.perf.errors import PerfError

#: Below these a fitted GEMM efficiency is not a GPU's: servesim's shipped H100 profile fits 0.73
#: for both, and vLLM's dense GEMMs run well above a quarter of a datacenter GPU's peak FLOPs (for
#: prefill-size batches) and of its HBM bandwidth (streaming the weights at decode); an assumption
#: for the GPUs without a profile, stated as such. A fit that lands lower is absorbing latency the
#: step-time model does not have (a client, a front end, a loaded host): ``calibrate`` says so and
#: does not write the profile.
PLAUSIBLE_MIN: dict[str, float] = {"gemm_compute_efficiency": 0.25, "gemm_bandwidth_efficiency": 0.25}

#: Coefficients ``servesim calibrate`` can fit, with the bounds the fit keeps them in.
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_compute_efficiency": (0.05, 1.0),
    "gemm_bandwidth_efficiency": (0.05, 1.0),
    "gemm_roofline_sharpness": (1.0, 20.0),
    "moe_compute_efficiency": (0.01, 1.0),
    "moe_min_expert_fraction": (0.01, 1.0),
    "attention_compute_efficiency": (0.02, 1.0),
    "attention_bandwidth_efficiency": (0.02, 1.0),
    "interconnect_efficiency": (0.02, 1.0),
    "allreduce_latency_s": (1e-7, 2e-3),
    "step_overhead_s": (1e-6, 0.1),
    "per_layer_overhead_s": (1e-8, 1e-3),
    "per_sequence_overhead_s": (1e-8, 1e-3),
    "mixed_step_overhead_s": (1e-7, 0.05),
    "eager_layer_overhead_s": (1e-8, 1e-3),
    "frontend_latency_s": (1e-5, 1.0),
}


class FittedRange(BaseModel):
    """What the measurements behind a profile covered."""

    model_config = ConfigDict(extra="forbid")

    gpu: str | None = None
    tp: list[int] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    weight_bytes_per_gpu: tuple[float, float] | None = Field(None, description="Min and max over the data.")
    tokens_per_step: tuple[float, float] | None = None
    decode_ctx_per_seq: tuple[float, float] | None = None
    requests_per_second: tuple[float, float] | None = None


class HardwareProfile(BaseModel):
    """Named efficiency factors and overheads of one GPU + serving stack (all times in seconds).

    Efficiencies are fractions of the GPU's catalog peaks: achieved FLOP/s or bytes/s divided by
    the datasheet figure.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", description="Profile name.")
    gpu: str | None = Field(None, description="GPU the profile was calibrated on (None: generic priors).")
    framework: str = Field("vLLM V1", description="Serving stack the overheads describe.")
    gemm_compute_efficiency: float = Field(
        0.73, gt=0, le=1, description="Large GEMMs: achieved / peak dense tensor FLOP/s."
    )
    gemm_bandwidth_efficiency: float = Field(
        0.9, gt=0, le=1, description="Weight streaming of small-batch GEMMs: achieved / peak HBM bytes/s."
    )
    moe_compute_efficiency: float = Field(
        0.3,
        gt=0,
        le=1,
        description="Routed-expert (grouped) GEMMs: achieved / peak FLOP/s; each expert sees few tokens.",
    )
    moe_min_expert_fraction: float = Field(
        0.01,
        gt=0,
        le=1,
        description="Least fraction of each MoE layer's experts whose weights a step reads, however few "
        "tokens it routes (grouped-GEMM kernels that visit every expert); the uniform-routing "
        "expectation applies above it.",
    )
    gemm_roofline_sharpness: float = Field(
        1.25,
        ge=1,
        description="p of the smooth roofline (c^p + m^p)^(1/p); large p approaches max(compute, memory).",
    )
    attention_compute_efficiency: float = Field(
        0.5, gt=0, le=1, description="Prefill attention (QK^T, PV): achieved / peak FLOP/s."
    )
    attention_bandwidth_efficiency: float = Field(
        0.7, gt=0, le=1, description="Attention KV-cache reads: achieved / peak HBM bytes/s."
    )
    interconnect_efficiency: float = Field(
        0.7, gt=0, le=1, description="All-reduce bus bandwidth / catalog GPU-to-GPU bandwidth."
    )
    allreduce_latency_s: float = Field(
        4e-6,
        ge=0,
        description="Fixed cost of one tensor-parallel all-reduce per peer GPU (its barrier waits on each).",
    )
    step_overhead_s: float = Field(
        1.0e-3, ge=0, description="Fixed cost of every engine step (schedule, input prep, launch, sample)."
    )
    per_layer_overhead_s: float = Field(
        10e-6, ge=0, description="Per decoder layer per step: norms, rotary, activations, kernel tails."
    )
    per_sequence_overhead_s: float = Field(
        4e-6, ge=0, description="Per scheduled request per step: metadata, sampling, detokenize hand-off."
    )
    mixed_step_overhead_s: float = Field(
        3e-4, ge=0, description="Extra for steps with prefill work (piecewise CUDA graphs, eager attention)."
    )
    eager_layer_overhead_s: float = Field(
        1.5e-5, ge=0, description="Per layer, for steps larger than the biggest CUDA graph (no graphs)."
    )
    frontend_latency_s: float = Field(
        2e-3,
        ge=0,
        description="Per request, outside the engine: HTTP, tokenization, detokenization, streaming; "
        "added to TTFT and E2E by the workload-level predictions.",
    )
    async_scheduling: bool = Field(
        True,
        description="vLLM's async scheduling: a request arriving during a step joins the step after next "
        "(applied to request latencies by the workload-level predictions).",
    )
    fitted_range: FittedRange | None = Field(None, description="What the calibration data covered.")
    calibration: dict[str, Any] | None = Field(
        None, description="How the profile was fitted (method, errors)."
    )

    def coefficients(self, names: list[str] | None = None) -> dict[str, float]:
        keys = names if names is not None else list(FIT_BOUNDS)
        return {k: float(getattr(self, k)) for k in keys}

    def with_coefficients(self, values: dict[str, float]) -> HardwareProfile:
        unknown = set(values) - set(FIT_BOUNDS)
        if unknown:
            raise PerfError(f"not calibratable coefficients: {sorted(unknown)}; known: {sorted(FIT_BOUNDS)}")
        return self.model_copy(update={k: float(v) for k, v in values.items()})

    def save(self, path: str | Path) -> Path:
        from servesim.io import write_text_atomic

        text = json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
        return write_text_atomic(path, text)

    @classmethod
    def load(cls, path: str | Path) -> HardwareProfile:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PerfError(f"{p}: cannot read profile: {e}") from e
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            raise PerfError(
                f"{p}: invalid profile: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}"
            ) from e


def builtin_profile_names() -> list[str]:
    base = resources.files("servesim") / "data" / "perf" / "profiles"
    return sorted(p.name[: -len(".json")] for p in base.iterdir() if p.name.endswith(".json"))


def default_profile(gpu: str | None = None) -> HardwareProfile:
    """The shipped calibrated profile for ``gpu`` if there is one, else the generic priors."""
    if gpu is not None:
        base = resources.files("servesim") / "data" / "perf" / "profiles"
        f = base / f"{gpu}.json"
        if f.is_file():
            return HardwareProfile.model_validate(json.loads(f.read_text(encoding="utf-8")))
    return HardwareProfile(gpu=None, name="priors")


def resolve_profile(profile: str | Path | HardwareProfile | None, gpu: str | None) -> HardwareProfile:
    """A profile object, a JSON path, a shipped profile name, or None (the GPU's default)."""
    if isinstance(profile, HardwareProfile):
        return profile
    if profile is None:
        return default_profile(gpu)
    p = Path(profile)
    if p.suffix == ".json" or p.exists():
        return HardwareProfile.load(p)
    names = builtin_profile_names()
    if str(profile) in names:
        return default_profile(str(profile))
    raise PerfError(
        f"unknown profile {shown(profile)}: give a JSON file or one of the shipped profiles {names}"
    )
