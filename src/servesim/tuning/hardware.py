"""The hardware context of a study: what every trial's ``DeploymentSpec`` shares, and how it resolves.

A trial is a ``DeploymentSpec`` (``servesim.spec``): the context's model, GPU and profile (``base``)
with the trial's TP, memory share, replicas and vLLM keys (``spec_on``), made concrete by
``servesim.spec.resolve`` — the one path from a deployment to an engine config, KV blocks and a
step-time model that ``simulate``, ``cluster`` and the web take too. The contexts differ only in
what they lay over it:

* ``PerfHardware`` (the default: ``llama-3.1-8b`` on ``h100``, TP 1, ``gpu_memory_utilization``
  0.9): the spec as it is, so ``servesim.perf`` times the steps (roofline) and sizes the KV cache
  as vLLM would; TP and the memory share change both, so the tuner can search them.
  ``num_gpu_blocks`` fixes the KV blocks instead (e.g. a seed scenario that states them).
* ``FixedHardware``: any ``StepTimeModel`` plus a KV block count, no catalog (tests, your own
  measurements): the spec is resolved with fixed timing (no GPU: vllm serve's small-GPU row) and
  its step-time model replaces the constant/linear one. Its step times do not depend on TP or
  memory, so those two knobs are fixed for it (``varies`` is empty).

Both count fixed KV blocks of a reference block size; a deployment with another ``block_size``
gets the same token capacity in its own blocks (``1 + (blocks - 1) x ref // block_size``; block 0
is vLLM's null block).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from servesim.engine.simulate import describe_model
from servesim.engine.step_time import ConstantStepTime, LinearStepTime, StepTimeModel
from servesim.errors import ConfigError
from servesim.perf.setup import DEFAULT_GPU as DEFAULT_GPU  # one default deployment for every command
from servesim.perf.setup import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_TP
from servesim.perf.setup import DEFAULT_MODEL as DEFAULT_MODEL
from servesim.spec import DeploymentSpec, ResolvedDeployment, resolve


@runtime_checkable
class Hardware(Protocol):
    """A study's hardware context: the spec every trial shares and how a trial's spec resolves."""

    @property
    def varies(self) -> frozenset[str]:
        """The deployment knobs the hardware responds to (``tensor_parallel_size``,
        ``gpu_memory_utilization``); the others are fixed at the defaults below."""
        ...

    @property
    def default_tensor_parallel_size(self) -> int: ...

    @property
    def default_gpu_memory_utilization(self) -> float: ...

    @property
    def serve_model(self) -> str:
        """The model argument of ``vllm serve``."""
        ...

    @property
    def base(self) -> DeploymentSpec:
        """Model, GPU, profile (or fixed timing): the fields no trial changes."""
        ...

    def resolve(self, spec: DeploymentSpec) -> ResolvedDeployment:
        """``servesim.spec.resolve`` of a trial's spec in this context; ``ValueError`` (a
        ``ConfigError``/``PerfError``, with the reason) when it cannot run (weights do not fit,
        TP does not divide the heads, the KV cache cannot hold ``max_model_len``, ...)."""
        ...

    def describe(self) -> dict[str, Any]: ...


def spec_on(
    hardware: Hardware, engine: dict[str, Any], *, tp: int, gpu_memory_utilization: float, replicas: int = 1
) -> DeploymentSpec:
    """The ``DeploymentSpec`` of one trial: ``hardware.base`` with these vLLM keys, TP, memory share."""
    return DeploymentSpec.model_validate(
        {
            **hardware.base.model_dump(),
            "tp": tp,
            "gpu_memory_utilization": gpu_memory_utilization,
            "replicas": replicas,
            "engine": engine,
        }
    )


@functools.lru_cache(maxsize=256)
def _resolve(spec_json: str) -> ResolvedDeployment:
    # A study resolves the same few specs over and over (each trial's runs, the probe, the
    # ablations): the roofline build and the KV sizing are paid once per distinct spec.
    return resolve(DeploymentSpec.model_validate_json(spec_json))


def _with_blocks(spec: DeploymentSpec, num_gpu_blocks: int, ref_block_size: int) -> DeploymentSpec:
    block_size = int(spec.engine.get("block_size", 16))
    blocks = scale_blocks(num_gpu_blocks, ref_block_size, block_size)
    return spec.model_copy(update={"engine": {**spec.engine, "num_gpu_blocks": blocks}})


def scale_blocks(num_gpu_blocks: int, ref_block_size: int, block_size: int) -> int:
    """The same KV token capacity in blocks of ``block_size`` (block 0 stays the null block)."""
    return 1 + (num_gpu_blocks - 1) * ref_block_size // block_size


class PerfHardware(BaseModel):
    """Model x GPU x TP through ``servesim.spec.resolve`` (roofline step times, vLLM's KV sizing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(DEFAULT_MODEL, description="Catalog model name (servesim perf models).")
    gpu: str = Field(DEFAULT_GPU, description="Catalog GPU name.")
    tensor_parallel_size: int = Field(1, ge=1, description="Default TP degree (searchable).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Default memory share (searchable).")
    profile: str | None = Field(None, description="Calibration profile name or JSON path; None = the GPU's.")
    kv_dtype: Literal["auto"] = Field(
        "auto", description="KV-cache dtype: the model's (the deployment spec models no other)."
    )
    num_gpu_blocks: int | None = Field(
        None, ge=2, description="Override the memory model: KV blocks per replica (of kv_block_size tokens)."
    )
    kv_block_size: int = Field(16, ge=1, description="Tokens per block of num_gpu_blocks.")

    @property
    def varies(self) -> frozenset[str]:
        if self.num_gpu_blocks is not None:
            return frozenset({"tensor_parallel_size"})
        return frozenset({"tensor_parallel_size", "gpu_memory_utilization"})

    @property
    def default_tensor_parallel_size(self) -> int:
        return self.tensor_parallel_size

    @property
    def default_gpu_memory_utilization(self) -> float:
        return self.gpu_memory_utilization

    @property
    def serve_model(self) -> str:
        return _hf_id(self.model)

    @property
    def base(self) -> DeploymentSpec:
        return DeploymentSpec(model=self.model, gpu=self.gpu, profile=self.profile)

    def resolve(self, spec: DeploymentSpec) -> ResolvedDeployment:
        if self.num_gpu_blocks is not None:
            spec = _with_blocks(spec, self.num_gpu_blocks, self.kv_block_size)
        return _resolve(spec.model_dump_json())

    def describe(self) -> dict[str, Any]:
        return {"kind": "perf", **self.model_dump(mode="json")}


@functools.lru_cache(maxsize=32)
def _hf_id(model: str) -> str:
    try:
        from servesim.perf import load_catalog

        spec = load_catalog().entry(model)
    except (ImportError, ValueError):
        return model
    return spec.hf_id or spec.name


@dataclass(frozen=True)
class FixedHardware:
    """A given step-time model and KV block count (no catalog): TP and memory are not modelled."""

    step_time: StepTimeModel
    num_gpu_blocks: int
    block_size: int = 16
    gpus_per_replica: int = 1
    gpu_memory_utilization: float = 0.9
    model_name: str = "MODEL"
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 2:
            raise ConfigError(f"num_gpu_blocks must be >= 2, got {self.num_gpu_blocks}")
        if self.block_size < 1 or self.gpus_per_replica < 1:
            raise ConfigError("block_size and gpus_per_replica must be >= 1")

    @property
    def varies(self) -> frozenset[str]:
        return frozenset()

    @property
    def default_tensor_parallel_size(self) -> int:
        return self.gpus_per_replica

    @property
    def default_gpu_memory_utilization(self) -> float:
        return self.gpu_memory_utilization

    @property
    def serve_model(self) -> str:
        return self.model_name

    @property
    def base(self) -> DeploymentSpec:
        """Fixed timing (a constant step time as ``step_time_ms``; any other model as the
        linear one, which ``resolve`` replaces with it): no GPU, so the small-GPU defaults."""
        if isinstance(self.step_time, ConstantStepTime) and self.step_time.step_time_s <= 3600:
            return DeploymentSpec(step_time_ms=self.step_time.step_time_s * 1000.0)
        return DeploymentSpec(linear_step_time=True)

    def resolve(self, spec: DeploymentSpec) -> ResolvedDeployment:
        tp = spec.tp or 1
        if tp != self.gpus_per_replica:
            raise ConfigError(
                f"the fixed hardware model has one step-time model for {self.gpus_per_replica} GPU(s) per "
                f"replica; tensor_parallel_size {tp} cannot be simulated (use PerfHardware "
                "to vary TP)"
            )
        # TP is this context's, not a flag of the fixed timing (which refuses --tp)
        fixed = _with_blocks(spec, self.num_gpu_blocks, self.block_size).model_copy(update={"tp": None})
        res = _resolve(fixed.model_dump_json())
        blocks = res.config.num_gpu_blocks
        return dataclasses.replace(
            res,
            step_time=self.step_time,
            notes=self.notes,
            tp=self.gpus_per_replica,
            timed_as=f"a given {describe_model(self.step_time).get('kind', 'step-time')} model; "
            f"{blocks:,} KV blocks as given",
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "fixed",
            "step_time_model": describe_model(self.step_time),
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size,
            "gpus_per_replica": self.gpus_per_replica,
        }


def hardware_of(spec: DeploymentSpec) -> Hardware:
    """The hardware context of a study of ``spec`` (what ``saturate``/``tune`` and the web's
    capacity jobs start from): ``PerfHardware`` of its model, GPU, TP, memory share and profile,
    its ``num_gpu_blocks`` fixing the KV blocks; with fixed timing, ``FixedHardware`` of that
    step time and its ``num_gpu_blocks`` (there is no memory model to size them)."""
    blocks = spec.engine.get("num_gpu_blocks")
    tp = DEFAULT_TP if spec.tp is None else spec.tp
    util = spec.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if not spec.fixed_timing:
        return PerfHardware(
            model=spec.model or DEFAULT_MODEL,
            gpu=spec.gpu or DEFAULT_GPU,
            tensor_parallel_size=tp,
            gpu_memory_utilization=util,
            profile=spec.profile,
            num_gpu_blocks=blocks,
        )
    if spec.step_time_ms is not None and spec.linear_step_time:
        raise ConfigError("a constant step time and the linear step model exclude each other: give one")
    if spec.model is not None or spec.gpu is not None:
        raise ConfigError(
            "a model and GPU time the steps by the roofline; a fixed or linear step time replaces "
            "them: give one or the other"
        )
    if blocks is None:
        raise ConfigError("a fixed step-time model needs num_gpu_blocks (there is no memory model)")
    step: StepTimeModel = (
        ConstantStepTime(step_time_s=spec.step_time_ms / 1000.0)
        if spec.step_time_ms is not None
        else LinearStepTime()
    )
    return FixedHardware(step, int(blocks), gpus_per_replica=tp, gpu_memory_utilization=util)
