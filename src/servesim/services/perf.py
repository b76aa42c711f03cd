"""The step-time and memory model's questions: what ``servesim perf models|gpus|memory|step|profiles``
asks (``servesim calibrate`` and ``sim2real``: ``services.calibration``).

* ``catalog``: the model and GPU catalogs (the shipped one, extended by a file);
* ``memory``: the KV-cache capacity vLLM would allocate (``MemoryRequest``);
* ``step``: one engine step timed by the roofline model, part by part (``StepRequest``);
* ``profiles`` / ``profile``: the shipped calibrated profiles.

Batch limits a request leaves out are what ``vllm serve`` runs on the GPU, as in every command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.engine.config import Quantization
from servesim.perf import (
    CalibrationReport,
    ExtrapolationWarning,
    GPUSpec,
    HardwareProfile,
    KVCapacity,
    ModelSpec,
    PerfError,
    load_catalog,
)
from servesim.perf.catalog import Catalog
from servesim.perf.offload import check_offloading_size
from servesim.perf.prices import load_prices, parse_price_overrides, read_price_file
from servesim.perf.profile import builtin_profile_names
from servesim.perf.serve_defaults import apply_serve_defaults
from servesim.perf.setup import DEFAULT_GPU, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_MODEL, DEFAULT_TP

if TYPE_CHECKING:
    from servesim.engine.step_time import BatchComposition
    from servesim.perf.roofline import RooflineStepTime


def catalog(path: Path | None = None) -> Catalog:
    """The model and GPU catalogs: the shipped one, extended by ``path`` (models:/gpus: entries)."""
    from servesim.perf import load_catalog

    return load_catalog(path) if path is not None else load_catalog()


def batch_limits(gpu: str, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> tuple[int, int]:
    """The batch limits given, else what ``vllm serve`` runs on ``gpu`` (every command's defaults)."""
    from servesim.perf.serve_defaults import vllm_serve_defaults

    seqs, budget = vllm_serve_defaults(gpu)
    return (max_num_seqs or seqs, max_num_batched_tokens or budget)


class Hardware(BaseModel):
    """Model, GPU and TP (None: the default deployment's), and an extra catalog file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(None, description="Catalog name, HF id, or a local config.json.")
    gpu: str | None = Field(None, description="Catalog GPU name.")
    tp: int | None = Field(None, ge=1, le=64, description="Tensor-parallel degree.")
    catalog: Path | None = Field(None, description="Extra catalog YAML file.")

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL

    @property
    def gpu_name(self) -> str:
        return self.gpu or DEFAULT_GPU

    @property
    def degree(self) -> int:
        return self.tp or DEFAULT_TP


class MemoryRequest(Hardware):
    """The KV-cache capacity of one replica as vLLM sizes it."""

    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    block_size: int = Field(16, ge=1)
    kv_dtype: str = Field("auto", description="auto, bfloat16, float16, fp8.")
    quantization: Quantization | None = Field(None, description="vLLM --quantization (perf.precision).")
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = Field(None, description="Default: the model's max_position_embeddings.")
    data_parallel_size: int = Field(
        1, ge=1, le=64, exclude_if=lambda v: v == 1, description="vLLM --data-parallel-size."
    )
    enable_expert_parallel: bool = Field(
        False, exclude_if=lambda v: v is False, description="vLLM --enable-expert-parallel."
    )

    @property
    def utilization(self) -> float:
        return self.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION


def memory(request: MemoryRequest) -> KVCapacity:
    """Weights, start-up reserve and KV blocks per GPU (its ``caveats``: where it is unvalidated);
    with data parallelism, one rank's GPU holding its share of the experts
    (``perf.expert_parallel``: the fullest GPU under an uneven EP split)."""
    from servesim.perf import kv_capacity
    from servesim.perf.catalog import resolve_gpu, resolve_model
    from servesim.perf.expert_parallel import check_data_parallel, expert_shards
    from servesim.perf.precision import apply_quantization

    seqs, budget = batch_limits(request.gpu_name, request.max_num_seqs, request.max_num_batched_tokens)
    cat = catalog(request.catalog)
    gpu = resolve_gpu(request.gpu_name, cat)
    model = apply_quantization(
        resolve_model(request.model_name, cat), request.quantization, gpu, request.degree
    )
    shards = None
    dp, ep = request.data_parallel_size, request.enable_expert_parallel
    if dp > 1 or ep:
        check_data_parallel(model, request.degree, dp, ep)
        shards = expert_shards(model, request.degree, dp, ep)
    return kv_capacity(
        model,
        gpu,
        request.degree,
        gpu_memory_utilization=request.utilization,
        block_size=request.block_size,
        kv_dtype=request.kv_dtype,
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        max_model_len=request.max_model_len,
        catalog=cat,
        expert_shards=shards,
    )


class StepRequest(Hardware):
    """One engine step: ``decodes`` decoding requests of mean context ``decode_ctx`` and prefill
    chunks as ``TOKENS[:CACHED]``."""

    profile: str | None = Field(None, description="Profile JSON or shipped name.")
    decodes: int = 0
    decode_ctx: int = 1024
    prefill: list[str] = Field(default_factory=list)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True)
class StepAnswer:
    """The step's time and its parts, by the model that timed it."""

    step_time: RooflineStepTime
    batch: BatchComposition
    breakdown: dict[str, float]
    total_s: float

    def document(self) -> dict[str, Any]:
        """``perf step --json``: the time, its parts, and the model."""
        return {
            "step_time_s": self.total_s,
            "breakdown_s": self.breakdown,
            "model": self.step_time.model_dump(),
        }


def prefill_chunks(specs: list[str]) -> list[tuple[int, int]]:
    """``TOKENS[:CACHED]`` chunks as ``(tokens, cached)`` (one line naming a bad one)."""
    from servesim.errors import shown

    chunks = []
    for p in specs:
        c, _, cached = p.partition(":")
        try:
            chunks.append((int(c), int(cached or 0)))
        except ValueError:
            raise PerfError(f"--prefill {shown(p)}: use TOKENS or TOKENS:CACHED") from None
    return chunks


def step(request: StepRequest) -> StepAnswer:
    """The roofline model's time of the request's step, component by component."""
    from servesim.engine.step_time import BatchComposition
    from servesim.perf import build_step_time_model

    seqs, budget = batch_limits(request.gpu_name, request.max_num_seqs, request.max_num_batched_tokens)
    chunks = prefill_chunks(request.prefill)
    decodes = request.decodes
    if decodes < 0 or any(c <= 0 or k < 0 for c, k in chunks) or (decodes == 0 and not chunks):
        raise PerfError("a step needs --decodes N > 0 and/or --prefill TOKENS[:CACHED] chunks")
    st = build_step_time_model(
        request.model_name,
        request.gpu_name,
        request.degree,
        request.profile,
        catalog=catalog(request.catalog),
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
    )
    batch = BatchComposition(decodes, decodes * request.decode_ctx, chunks)
    return StepAnswer(step_time=st, batch=batch, breakdown=st.breakdown(batch), total_s=st.step_time(batch))


def profiles() -> list[str]:
    """The shipped calibrated profiles' names."""
    from servesim.perf import builtin_profile_names

    return builtin_profile_names()


def profile(name: str) -> HardwareProfile:
    """A shipped profile by name, or a profile JSON file."""
    from servesim.perf import resolve_profile

    return resolve_profile(name, None)


__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MODEL",
    "DEFAULT_TP",
    "CalibrationReport",
    "Catalog",
    "ExtrapolationWarning",
    "GPUSpec",
    "HardwareProfile",
    "KVCapacity",
    "MemoryRequest",
    "ModelSpec",
    "PerfError",
    "StepAnswer",
    "StepRequest",
    "apply_serve_defaults",
    "batch_limits",
    "builtin_profile_names",
    "catalog",
    "check_offloading_size",
    "load_catalog",
    "load_prices",
    "memory",
    "parse_price_overrides",
    "prefill_chunks",
    "profile",
    "profiles",
    "read_price_file",
    "step",
]
