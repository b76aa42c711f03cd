"""How an ``Engine`` is set up, once per engine: which path it may take, its drafter's timing,
and its block pool, KV-cache manager and scheduler. Kept out of the compiled step code
(``engine.py``): it runs once, and the engine's module stays one that reads as its loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.adapter_cache import AdapterCache
from servesim.engine.block_pool import BlockPool
from servesim.engine.config import EngineConfig
from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_connector_base import KVConnector
from servesim.engine.kv_hybrid import HybridKVCacheManager
from servesim.engine.scheduler import Scheduler
from servesim.engine.speculative import AcceptanceModel
from servesim.engine.step_time import DraftTimeModel, StepTimeModel, resolve_drafter
from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.engine.trace_arrays import TraceArrays


def fast_path_allowed(config: EngineConfig, kv_connector: KVConnector | None) -> bool:
    """Whether the decode group and its stretches may run; refuses what cannot run at all."""
    if config.kv_offloading_size is not None and kv_connector is None:
        raise ConfigError(
            f"kv_offloading_size {config.kv_offloading_size} GiB needs the model's KV bytes per block "
            "and the GPU's host link to size and time the CPU tier: build the connector with "
            "servesim.perf.offload.offloading_connector(config, model, gpu, tp) and pass it as "
            "kv_connector"
        )
    if config.hybrid:
        return False  # the decode group assumes one block table that never frees a block
    if config.speculative_config is not None:
        if kv_connector is not None:
            raise ConfigError("speculative decoding with KV offloading is not modelled yet")
        return False  # the decode group assumes one token per step
    if config.async_scheduling and kv_connector is not None:
        raise ConfigError("async_scheduling with a KV connector is not modelled yet")
    return not config.async_scheduling  # the group: sync steps only


def drafter(config: EngineConfig, step_time: StepTimeModel) -> tuple[DraftTimeModel | None, float, int]:
    """The drafter's passes: timed by the step-time model's own drafter (perf's roofline) when
    it has one (returned first), else as ``draft_fraction`` of the target's decode step per pass
    (second); third, speculation's k (0: off)."""
    spec = config.speculative_config
    if spec is None:
        return None, 0.0, 0
    model = resolve_drafter(step_time, spec)
    return model, spec.draft_fraction() if model is None else 0.0, spec.num_speculative_tokens


def adapter_cache(config: EngineConfig, step_time: StepTimeModel) -> AdapterCache | None:
    """With LoRA and a step-time model that times adapter loads (perf's roofline:
    ``adapter_load_times``), the replica's adapter caches (``engine.adapter_cache``); else None:
    a fixed or linear step time has no GPU, host link or disk to time them on."""
    times_of = getattr(step_time, "adapter_load_times", None)
    if not config.enable_lora or times_of is None:
        return None
    times = times_of()
    if times is None:
        return None
    host = config.max_cpu_loras if config.max_cpu_loras is not None else config.max_loras
    return AdapterCache(config.max_loras, host, times.to_gpu_s, times.read_s)


def replica(
    config: EngineConfig, t: TraceArrays, fast: bool, connector: KVConnector | None
) -> tuple[int, BlockPool, KVCacheManager, Scheduler]:
    """The replica's context limit, block pool, KV-cache manager and scheduler."""
    if config.max_model_len is not None:
        mml = config.max_model_len
    else:
        mml = t.max_context + 1
        config.check_max_model_len(mml)
    if t.lora_names and not config.enable_lora:
        shown_names = ", ".join(t.lora_names[:3]) + (", ..." if len(t.lora_names) > 3 else "")
        raise ConfigError(
            f"the trace's lora column names {len(t.lora_names)} LoRA adapter(s) ({shown_names}) but "
            "enable_lora is off (vLLM would refuse those requests); give --enable-lora"
        )
    pool = BlockPool(config.num_gpu_blocks, config.enable_prefix_caching)
    kv: KVCacheManager
    if config.hybrid and connector is not None:
        raise ConfigError(
            "a KV connector (P/D, offload) with sliding-window, chunked-local or Mamba KV cache groups "
            "is not modelled yet"
        )
    if config.hybrid and config.kv_cache_groups:
        # vLLM's max_in_flight_tokens: one batch in flight (sync scheduling, the only one here)
        kv = HybridKVCacheManager(
            pool,
            config.block_size,
            mml,
            config.watermark,
            config.scheduler_reserve_full_isl,
            config.kv_cache_groups,
            config.max_num_batched_tokens,
            config.mamba_prefill_checkpoint_blocks,
        )
        mst = config.max_num_scheduled_tokens
        # the aligned split's chunk limit: vLLM's max_num_scheduled_tokens, long-prefill threshold
        kv.set_split_limit(
            mst if mst is not None else config.max_num_batched_tokens, config.long_prefill_token_threshold
        )
    else:
        kv = KVCacheManager(pool, config.block_size, mml, config.watermark, config.scheduler_reserve_full_isl)
    scheduler = Scheduler(config, kv, mml, fast, connector)
    spec = config.speculative_config
    if spec is not None and t.spec_accept_rate is not None:  # the trace's own acceptance
        scheduler.acceptance = AcceptanceModel(spec.rates(), spec.acceptance_seed, t.spec_accept_rate)
    return mml, pool, kv, scheduler
