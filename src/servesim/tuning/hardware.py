"""The hardware context of a run: what decides step times and KV blocks.

* ``PerfHardware`` (the default: ``llama-3.1-8b`` on ``h100``, TP 1, ``gpu_memory_utilization``
  0.9): ``servesim.perf`` builds the roofline step-time model for the model on ``TP`` GPUs and
  derives the KV blocks vLLM would allocate (weights, start-up reserve, block size, token budget,
  ``max_num_seqs``). Tensor parallelism and ``gpu_memory_utilization`` change both, so the tuner
  can search them. ``num_gpu_blocks`` overrides the memory model (e.g. a seed scenario that states
  its KV blocks).
* ``FixedHardware``: any ``StepTimeModel`` plus a KV block count, no catalog needed (tests, your
  own measurements). Its step times do not depend on TP or memory, so those two knobs are fixed
  for it (``varies`` is empty): TP is ``gpus_per_replica`` and ``gpu_memory_utilization`` is only
  echoed in the ``vllm serve`` line.

Both count KV blocks of a reference block size; a deployment with another ``block_size`` gets
the same token capacity in its own blocks (``1 + (blocks - 1) x ref // block_size``; block 0 is
vLLM's null block). ``PerfHardware`` without an override computes blocks for the block size
directly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from servesim.engine.config import EngineConfig
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.simulate import describe_model
from servesim.engine.step_time import StepTimeModel
from servesim.errors import ConfigError
from servesim.perf.setup import DEFAULT_GPU as DEFAULT_GPU  # one default deployment for every command
from servesim.perf.setup import DEFAULT_MODEL as DEFAULT_MODEL


class ResolvedHardware(NamedTuple):
    """What one deployment gets from the hardware: its step times and KV blocks per replica."""

    step_time: StepTimeModel
    num_gpu_blocks: int
    warnings: tuple[str, ...]


@runtime_checkable
class Hardware(Protocol):
    """Anything that turns deployment knobs into a step-time model and a KV block count."""

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

    def resolve(
        self,
        *,
        tensor_parallel_size: int,
        gpu_memory_utilization: float,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
    ) -> ResolvedHardware:
        """Step times and KV blocks for these knobs; ``ValueError`` (with the reason) when the
        combination cannot run (weights do not fit, TP does not divide the heads, ...)."""
        ...

    def describe(self) -> dict[str, Any]: ...


def kv_connector(
    hardware: Hardware, config: EngineConfig, tensor_parallel_size: int
) -> OffloadingConnector | None:
    """A fresh CPU-offload connector for one engine of this deployment (None without
    ``kv_offloading_size``): sized in the model's KV bytes and timed on the GPU's host link, so
    only ``PerfHardware`` can give one. Each engine needs its own (the tier is the engine's)."""
    if config.kv_offloading_size is None:
        return None
    if not isinstance(hardware, PerfHardware):
        raise ConfigError(
            "kv_offloading_size needs a model on a GPU (the CPU tier is sized in the model's KV bytes and "
            "timed on the GPU's host link): use PerfHardware (--model/--gpu), not a fixed step time"
        )
    from servesim.perf import load_catalog
    from servesim.perf.offload import offloading_connector

    cat = load_catalog()
    return offloading_connector(
        config, cat.model(hardware.model), cat.gpu(hardware.gpu), tensor_parallel_size, hardware.kv_dtype
    )


def scale_blocks(num_gpu_blocks: int, ref_block_size: int, block_size: int) -> int:
    """The same KV token capacity in blocks of ``block_size`` (block 0 stays the null block)."""
    return 1 + (num_gpu_blocks - 1) * ref_block_size // block_size


class PerfHardware(BaseModel):
    """Model x GPU x TP through ``servesim.perf`` (roofline step times, vLLM's KV sizing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(DEFAULT_MODEL, description="Catalog model name (servesim perf models).")
    gpu: str = Field(DEFAULT_GPU, description="Catalog GPU name.")
    tensor_parallel_size: int = Field(1, ge=1, description="Default TP degree (searchable).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Default memory share (searchable).")
    profile: str | None = Field(None, description="Calibration profile name or JSON path; None = the GPU's.")
    kv_dtype: str = Field("auto", description="KV-cache dtype (vLLM --kv-cache-dtype).")
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

    def resolve(
        self,
        *,
        tensor_parallel_size: int,
        gpu_memory_utilization: float,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
    ) -> ResolvedHardware:
        step, blocks, notes = _perf_resolve(
            self.model,
            self.gpu,
            tensor_parallel_size,
            gpu_memory_utilization,
            self.profile,
            self.kv_dtype,
            block_size,
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len,
            self.num_gpu_blocks is not None,
        )
        if self.num_gpu_blocks is not None:
            blocks = scale_blocks(self.num_gpu_blocks, self.kv_block_size, block_size)
        return ResolvedHardware(step, blocks, notes)

    def describe(self) -> dict[str, Any]:
        return {"kind": "perf", **self.model_dump(mode="json")}


@functools.lru_cache(maxsize=256)
def _perf_resolve(
    model: str,
    gpu: str,
    tp: int,
    util: float,
    profile: str | None,
    kv_dtype: str,
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    blocks_given: bool,
) -> tuple[StepTimeModel, int, tuple[str, ...]]:
    # Imported here: the tuner works without the catalog (FixedHardware), and the perf package is
    # only paid for when used.
    from servesim.perf import deployment_setup

    setup = deployment_setup(
        model,
        gpu,
        tp,
        profile,
        kv_dtype=kv_dtype,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        size_kv_cache=not blocks_given,
    )
    step, blocks, notes = setup.step_time, setup.num_gpu_blocks or 0, setup.notes
    return step, blocks, notes


@functools.lru_cache(maxsize=32)
def _hf_id(model: str) -> str:
    try:
        from servesim.perf import load_catalog

        spec = load_catalog().model(model)
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

    def resolve(
        self,
        *,
        tensor_parallel_size: int,
        gpu_memory_utilization: float,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
    ) -> ResolvedHardware:
        if tensor_parallel_size != self.gpus_per_replica:
            raise ConfigError(
                f"the fixed hardware model has one step-time model for {self.gpus_per_replica} GPU(s) per "
                f"replica; tensor_parallel_size {tensor_parallel_size} cannot be simulated (use PerfHardware "
                "to vary TP)"
            )
        return ResolvedHardware(
            self.step_time, scale_blocks(self.num_gpu_blocks, self.block_size, block_size), self.notes
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "fixed",
            "step_time_model": describe_model(self.step_time),
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size,
            "gpus_per_replica": self.gpus_per_replica,
        }
