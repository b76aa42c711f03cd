"""One accelerator as the perf models see it: datasheet throughput, memory and links, each sourced.

Split from ``perf.catalog`` (which re-exports it) so that the catalog module stays about models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError

#: Default per-job overhead of a GPU<->host KV copy (servesim's estimate, not a vendor figure): a
#: cudaMemcpyAsync batch launch is a few microseconds and vLLM's worker polls completion once per
#: step; 20 us per job. Override per GPU with ``host_link_overhead_s`` in a catalog entry.
HOST_LINK_OVERHEAD_S = 20e-6


class GPUSpec(BaseModel):
    """One accelerator: peak dense throughput, memory, bandwidths. Every number has a source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    vendor: str
    description: str
    memory_bytes: int = Field(gt=0, description="Device memory as the framework sees it (total_memory).")
    hbm_bandwidth: float = Field(gt=0, description="Peak memory bandwidth, bytes/s.")
    bf16_flops: float = Field(gt=0, description="Peak dense BF16/FP16 tensor FLOP/s (no sparsity).")
    fp8_flops: float | None = Field(None, gt=0, description="Peak dense FP8 tensor FLOP/s (None: no FP8).")
    fp4_flops: float | None = Field(
        None, gt=0, description="Peak dense FP4 (NVFP4/MXFP4) tensor FLOP/s (None: no FP4 tensor cores)."
    )
    interconnect: Literal["nvlink", "pcie", "infinity-fabric"]
    interconnect_bandwidth: float = Field(
        gt=0, description="GPU-to-GPU bandwidth per GPU, one direction, bytes/s."
    )
    pcie_bandwidth: float = Field(gt=0, description="Host link bandwidth, one direction, bytes/s.")
    host_link_overhead_s: float = Field(
        HOST_LINK_OVERHEAD_S,
        ge=0,
        le=1.0,
        description="Fixed cost of one GPU<->host KV transfer job (launch + DMA set-up + completion "
        "poll), seconds; the CPU offload tier's copies take this plus bytes / pcie_bandwidth.",
    )
    sources: dict[str, str] = Field(description="Field name -> where the number comes from.")

    @model_validator(mode="after")
    def _check_sources(self) -> GPUSpec:
        needed = ["memory_bytes", "hbm_bandwidth", "bf16_flops", "interconnect_bandwidth", "pcie_bandwidth"]
        needed += [f for f in ("fp8_flops", "fp4_flops") if getattr(self, f) is not None]
        if self.fp4_flops is not None and self.fp8_flops is None:
            raise InputError("fp4_flops without fp8_flops: every GPU with FP4 tensor cores has FP8 ones")
        missing = [f for f in needed if not self.sources.get(f)]
        if missing:
            raise InputError(f"sources missing for: {', '.join(missing)}")
        return self

    def peak_flops(self, weight_dtype: str | None) -> float:
        """Dense tensor peak for GEMMs whose weights are stored as ``weight_dtype``.

        The rules are vLLM 0.33's kernel choices (``servesim.perf.precision`` says which and why):
        FP8 (and INT8, W8A8) GEMMs run at the FP8 rate where the GPU has one (elsewhere vLLM's
        Marlin FP8 kernel is weight-only: BF16 rate); NVFP4 at the FP4 rate on GPUs with FP4
        tensor cores, else weight-only Marlin W4A16 at the BF16 rate; MXFP4 and INT4 kernels keep
        16-bit activations (W4A16) and run at the BF16 rate.
        """
        if weight_dtype in ("fp8", "fp8_block", "int8") and self.fp8_flops is not None:
            return self.fp8_flops
        if weight_dtype == "nvfp4" and self.fp4_flops is not None and self.vendor == "NVIDIA":
            return self.fp4_flops
        return self.bf16_flops
