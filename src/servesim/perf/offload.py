"""Sizing and timing vLLM's CPU KV-offload tier (``--kv-offloading-size``) for one deployment.

The engine simulates the OffloadingConnector (``servesim.engine.kv_connector``) but cannot know
bytes: this module turns GiB into CPU chunks as vLLM's ``CPUOffloadingSpec`` does and times the
copies over the GPU's host link from the catalog.

vLLM (``vllm/v1/kv_offload/cpu/spec.py``): ``cpu_bytes_to_use = kv_offloading_size * 2**30``
(summed over TP ranks); a chunk holds ``blocks_per_chunk`` blocks of every rank, its size rounded
up to the page size (4096 B); ``num_chunks = cpu_bytes_to_use // aligned_chunk_bytes``. Each rank
copies its own shard over its own link, in parallel, so a transfer of ``n`` blocks takes
``overhead + n * kv_bytes_per_block_per_rank / pcie_bandwidth``.
"""

from __future__ import annotations

from servesim.engine.config import EngineConfig
from servesim.engine.kv_connector import HostLinkTiming, OffloadingConnector
from servesim.errors import ConfigError
from servesim.perf.catalog import GPUSpec, ModelSpec
from servesim.perf.memory import kv_bytes_per_token

PAGE_BYTES = 4096  # vLLM's BLOCK_SIZE_ALIGNMENT: mmap.PAGESIZE
GiB = 1 << 30

#: Host memory a CPU tier may take, per GPU, GiB: servesim's assumption (the catalog has no
#: host-memory field). An 8-GPU HGX/DGX H100 or H200 node carries 2 TiB of system memory, 256 GiB
#: per GPU; the tier is bounded by that times the replica's TP (``--kv-offloading-size`` is summed
#: over the TP ranks). The one place the bound is stated.
HOST_MEMORY_GIB_PER_GPU = 256.0

#: What a GiB of host memory costs per hour, $: servesim's stated assumption, the one place it is
#: stated (the memory share of a cloud instance's price: memory-optimised instances add roughly
#: 0.004-0.006 $/GiB-hour over compute-optimised ones of the same vCPUs). It enters the tuner's
#: plan only next to a GPU price the user gives, never alone.
HOST_MEMORY_USD_PER_GIB_HOUR = 0.005


def host_memory_gib(tensor_parallel_size: int) -> float:
    """The most ``--kv-offloading-size`` one replica of ``tensor_parallel_size`` GPUs may set."""
    return HOST_MEMORY_GIB_PER_GPU * tensor_parallel_size


def check_offloading_size(size_gib: float | None, tensor_parallel_size: int) -> None:
    """``ConfigError`` naming ``kv_offloading_size`` and the limit when a replica's CPU tier asks
    for more host memory than its GPUs' share of the node (the one check: resolve and tune)."""
    if size_gib is None:
        return
    limit = host_memory_gib(tensor_parallel_size)
    if size_gib > limit:
        raise ConfigError(
            f"kv_offloading_size {size_gib:g} GiB exceeds the host memory assumed for "
            f"{tensor_parallel_size} GPU(s): at most {limit:g} GiB ({HOST_MEMORY_GIB_PER_GPU:g} GiB per "
            "GPU, servesim.perf.offload.HOST_MEMORY_GIB_PER_GPU)"
        )


def cpu_chunks(
    config: EngineConfig,
    model: ModelSpec,
    tp: int = 1,
    kv_dtype: str | None = None,
    blocks_per_chunk: int = 1,
) -> int:
    """CPU offload chunks that ``config.kv_offloading_size`` GiB hold (0 without offload);
    ``kv_dtype`` None: the config's ``kv_cache_dtype`` (the tier stores blocks as the GPU does)."""
    if config.kv_offloading_size is None:
        return 0
    per_block = kv_bytes_per_token(model, tp, kv_dtype or config.kv_cache_dtype) * config.block_size
    chunk = per_block * tp * blocks_per_chunk
    aligned = -(-chunk // PAGE_BYTES) * PAGE_BYTES
    return int(config.kv_offloading_size * GiB) // aligned


def offloading_connector(
    config: EngineConfig,
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    kv_dtype: str | None = None,
    blocks_per_chunk: int = 1,
) -> OffloadingConnector | None:
    """The engine's CPU offload connector for this deployment, or None when offload is off
    (``kv_dtype`` None: the config's ``kv_cache_dtype``)."""
    if config.kv_offloading_size is None:
        return None
    kv_dtype = kv_dtype or config.kv_cache_dtype
    per_block = kv_bytes_per_token(model, tp, kv_dtype) * config.block_size
    timing = HostLinkTiming(per_block, gpu.pcie_bandwidth, gpu.host_link_overhead_s)
    return OffloadingConnector(
        cpu_chunks(config, model, tp, kv_dtype, blocks_per_chunk),
        timing,
        config.block_size,
        blocks_per_chunk,
        config.enable_prefix_caching,
    )
