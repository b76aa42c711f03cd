"""One deployment's step-time model and KV blocks together: what every caller of the engine needs.

``simulate``/``cluster`` on the command line and the tuner all turn (model, GPU, TP, profile,
scheduler limits, memory share) into a ``StepTimeModel`` plus ``num_gpu_blocks``; this is the one
place that does it, so they cannot drift apart. Extrapolation warnings and the KV-capacity caveats
are collected as notes (the caller decides where they go: stderr, a report), never printed here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from servesim.engine.config import EngineConfig
from servesim.engine.kv_groups import KVCacheGroup, group_kinds
from servesim.engine.step_time import ConstantStepTime, LinearStepTime, StepTimeModel, resolve_drafter
from servesim.errors import ConfigError
from servesim.perf.catalog import resolve_gpu, resolve_model
from servesim.perf.kv_layout import hybrid_disabled, kv_groups
from servesim.perf.lora import lora_params_per_slot
from servesim.perf.memory import (
    check_kv_cache_dtype,
    kv_capacity,
    prefill_checkpoint_blocks,
    state_block_size,
)
from servesim.perf.pipeline import PipelineStepTime, build_pipeline_step_time, describe_split, pp_kv_capacity
from servesim.perf.precision import apply_quantization
from servesim.perf.profile import HardwareProfile
from servesim.perf.roofline import BUDGET_NOTE, RooflineStepTime, build_step_time_model
from servesim.perf.serve_defaults import apply_serve_defaults


@dataclass(frozen=True)
class DeploymentSetup:
    """``step_time``: the roofline model; ``num_gpu_blocks``: None when the caller fixed them."""

    step_time: RooflineStepTime | PipelineStepTime
    num_gpu_blocks: int | None
    notes: tuple[str, ...]
    #: vLLM's KV cache groups for the model (None: one full-attention group; ``perf.kv_layout``)
    kv_cache_groups: tuple[KVCacheGroup, ...] | None = None
    #: The block size vLLM runs at: the one asked for, raised for a model with state layers until
    #: an attention page holds a state (``perf.memory.state_block_size``); None: as asked
    block_size: int | None = None
    #: vLLM's ``MambaSpec.num_prefill_checkpoint_blocks`` (``perf.memory.prefill_checkpoint_blocks``)
    mamba_prefill_checkpoint_blocks: int = 0


def deployment_setup(
    model: str,
    gpu: str,
    tp: int = 1,
    profile: str | HardwareProfile | None = None,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    kv_dtype: str = "auto",
    quantization: str | None = None,
    size_kv_cache: bool = True,
    lora_slots: int = 0,
    lora_rank: int = 16,
    speculative_method: str | None = None,
    expert_shards: float | None = None,
    pp: int = 1,
    prefix_caching: bool = False,
) -> DeploymentSetup:
    """Step times and (with ``size_kv_cache``) KV blocks of ``model`` on ``tp`` x ``gpu`` as vLLM
    would size its cache at ``gpu_memory_utilization``, its weights as ``--quantization``
    ``quantization`` loads them (``perf.precision``); ``expert_shards``: the routed experts split
    over more GPUs than ``tp`` (one DP rank's GPU: ``perf.expert_parallel``). ``pp``:
    ``pipeline_parallel_size``, stages of ``tp`` GPUs each (``perf.pipeline``): each stage's step
    time, and the smallest stage's KV blocks. Raises ``PerfError`` subclasses (unknown names,
    weights that do not fit, a format vLLM refuses on the GPU) with the numbers."""
    if pp > 1 and expert_shards is not None:
        raise ConfigError(
            f"pipeline_parallel_size {pp} with data/expert parallelism is not modelled yet; drop one of them"
        )
    spec = apply_quantization(resolve_model(model), quantization, resolve_gpu(gpu), tp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = build_step_time_model(
            spec,
            gpu,
            tp,
            profile,
            kv_dtype=kv_dtype,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            lora_slots=lora_slots,
            lora_rank=lora_rank,
        )
    notes = [str(w.message) for w in caught]
    check_kv_cache_dtype(step.model, step.gpu, kv_dtype)
    off = hybrid_disabled(spec, speculative_method)
    if off is not None:
        notes.append(f"{spec.name}: sized and scheduled as full attention in every layer ({off})")
    groups, _ = kv_groups(spec, hybrid=off is None)
    ckpt = prefill_checkpoint_blocks(spec, resolve_gpu(gpu), prefix_caching) if off is None else 0
    raised = state_block_size(spec, tp, block_size, kv_dtype, ckpt)
    if raised != block_size:
        notes.append(
            f"{spec.name}: KV block size {raised} tokens, not {block_size}: vLLM raises it until one "
            "attention page holds a linear-attention layer's state (its state pages are padded to it)"
            + (
                ", a multiple of 64 tokens (FlashInfer's prefill checkpoint grid, with prefix caching)"
                if ckpt
                else ""
            )
        )
    run_block = raised if raised != block_size else None
    blocks = None
    # how vLLM sizes the KV cache, the same for one replica and for each pipeline stage
    sizing: dict[str, Any] = {
        "gpu_memory_utilization": gpu_memory_utilization,
        "block_size": block_size,
        "kv_dtype": kv_dtype,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "hybrid": off is None,
    }
    lora_bytes = lora_slots * lora_params_per_slot(spec, tp, lora_rank) * spec.dtype_bytes
    if pp > 1:
        pipe = build_pipeline_step_time(step, pp)
        if size_kv_cache:
            pcap = pp_kv_capacity(
                spec, gpu, tp, pp, lora_bytes_per_layer=lora_bytes / spec.num_layers, **sizing
            )
            blocks = pcap.num_gpu_blocks
            notes += pcap.caveats
        return DeploymentSetup(pipe, blocks, tuple(dict.fromkeys(notes)), groups, run_block)
    if size_kv_cache:
        cap = kv_capacity(
            spec,
            gpu,
            tp,
            lora_bytes=math.ceil(lora_bytes),
            expert_shards=expert_shards,
            prefix_caching=prefix_caching,
            **sizing,
        )
        blocks = cap.num_gpu_blocks
        notes += cap.caveats
    return DeploymentSetup(step, blocks, tuple(dict.fromkeys(notes)), groups, run_block, ckpt)


# ------------------------------------------------------------------ the default deployment
#: Every command's deployment unless the input or the flags say otherwise (one default for all).
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_GPU = "h100"
DEFAULT_TP = 1
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class ReplicaSetup:
    """What one replica runs with: its engine config (KV blocks filled in), its step-time model,
    and ``timed_as``, the one line every human-readable output starts with."""

    config: EngineConfig
    step_time: StepTimeModel
    timed_as: str
    notes: tuple[str, ...]
    model: str | None
    gpu: str | None
    tp: int


def replica_setup(
    config: EngineConfig | None = None,
    *,
    model: str | None = None,
    gpu: str | None = None,
    tp: int | None = None,
    gpu_memory_utilization: float | None = None,
    profile: str | HardwareProfile | None = None,
    max_model_len: int | None = None,
    num_gpu_blocks_given: bool = False,
    step_time_ms: float | None = None,
    linear: bool = False,
    budget_defaulted: bool = False,
    expert_shards: float | None = None,
) -> ReplicaSetup:
    """The one way a command turns its flags into a replica: the calibrated Llama-3.1-8B on one
    H100 unless ``model``/``gpu``/``tp`` say otherwise (``gpu``/``tp`` alone keep the default
    model, and ``timed_as`` says so); a constant (``step_time_ms``) or the linear step model
    only when asked. KV blocks come from the memory model at ``gpu_memory_utilization`` unless
    ``num_gpu_blocks_given`` (the config's count is kept). ``max_model_len``: the context the KV
    cache must hold (default: the config's). ``budget_defaulted``: the token budget is vllm serve's
    default, not the user's choice: that it reaches past the profile's calibrated step sizes is
    said in ``timed_as`` rather than warned about on every run. ``expert_shards``: see
    ``deployment_setup`` (None: the experts split over ``tp``, as without data parallelism).
    Raises ``ConfigError`` / ``PerfError`` subclasses."""
    if config is None:  # what vllm serve runs on this GPU (servesim.perf.serve_defaults)
        fixed = step_time_ms is not None or linear
        values, _ = apply_serve_defaults({}, None if fixed else (gpu or DEFAULT_GPU))
        config = EngineConfig(**values)
    cfg = config
    if step_time_ms is not None or linear:
        given = [f"--{k}" for k, v in (("model", model), ("gpu", gpu), ("tp", tp)) if v is not None]
        if step_time_ms is not None and linear:
            raise ConfigError("give --step-time-ms or --linear-step-time, not both")
        if given:
            raise ConfigError(
                f"give {'/'.join(given)} (roofline step times of a model on a GPU) or "
                "--step-time-ms / --linear-step-time, not both"
            )
        if step_time_ms is not None:
            if not (math.isfinite(step_time_ms) and 0 < step_time_ms <= 3_600_000):
                raise ConfigError(f"--step-time-ms must be in (0, 3600000] ms (got {step_time_ms!r})")
            step: StepTimeModel = ConstantStepTime(step_time_s=step_time_ms / 1000.0)
            timed = f"every engine step {step_time_ms:g} ms (constant step time, as asked)"
            if cfg.pipeline_parallel_size > 1:  # engine.pipeline_steps: each stage takes the step time
                timed = (
                    f"every pipeline stage {step_time_ms:g} ms per step, {cfg.pipeline_parallel_size} stages "
                    "(constant step time, as asked)"
                )
        else:
            step = LinearStepTime()
            timed = "servesim's linear step model (an uncalibrated stand-in, as asked)"
        usable = cfg.num_gpu_blocks - 1
        blocks = f"{cfg.num_gpu_blocks:,} KV blocks ({usable:,} usable: vLLM reserves one null block)"
        return ReplicaSetup(cfg, step, f"{timed}; {blocks}", (), None, None, tp or 1)
    name = model or DEFAULT_MODEL
    where = gpu or DEFAULT_GPU
    degree = DEFAULT_TP if tp is None else tp
    util = DEFAULT_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
    setup = deployment_setup(
        name,
        where,
        degree,
        profile,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        block_size=cfg.block_size,
        gpu_memory_utilization=util,
        max_model_len=max_model_len or cfg.max_model_len,
        kv_dtype=cfg.kv_cache_dtype,
        quantization=cfg.quantization,
        size_kv_cache=not num_gpu_blocks_given,
        lora_slots=cfg.max_loras if cfg.enable_lora else 0,
        lora_rank=cfg.max_lora_rank,
        speculative_method=None if cfg.speculative_config is None else cfg.speculative_config.method,
        expert_shards=expert_shards,
        pp=cfg.pipeline_parallel_size,
        prefix_caching=cfg.enable_prefix_caching,
    )
    if setup.num_gpu_blocks is not None:
        cfg = cfg.model_copy(update={"num_gpu_blocks": setup.num_gpu_blocks})
    cfg = cfg.model_copy(update={"kv_cache_groups": setup.kv_cache_groups})
    if setup.block_size is not None:  # state layers: vLLM's raised attention block size
        cfg = cfg.model_copy(update={"block_size": setup.block_size})
    if setup.mamba_prefill_checkpoint_blocks:  # state layers, prefix caching, Hopper
        cfg = cfg.model_copy(
            update={"mamba_prefill_checkpoint_blocks": setup.mamba_prefill_checkpoint_blocks}
        )
    cfg = EngineConfig.model_validate(cfg.model_dump())
    if cfg.speculative_config is not None:
        resolve_drafter(setup.step_time, cfg.speculative_config)  # a drafter that cannot run: say so now
    blocks = (
        f"{cfg.num_gpu_blocks:,} KV blocks as vLLM sizes them at gpu_memory_utilization {util:g}"
        if setup.num_gpu_blocks is not None
        else f"{cfg.num_gpu_blocks:,} KV blocks as given"
    ) + f" ({cfg.num_gpu_blocks - 1:,} usable: vLLM reserves one null block)"
    if cfg.kv_cache_groups:  # a sliding-window / chunked-local model: one block table per group
        kinds = group_kinds(cfg.kv_cache_groups)
        blocks += ", in KV cache groups " + ", ".join(f"{len(ids)} x {n}" for n, ids in kinds.items())
    prof = "" if profile is None else f", profile {profile if isinstance(profile, str) else profile.name}"
    if model is None and (gpu is not None or tp is not None):
        origin = " (no model given: the default model)"
    elif model is None:
        origin = " (the default deployment; --model/--gpu/--tp change it)"
    else:
        origin = ""
    notes = setup.notes
    beyond = [n for n in notes if n.startswith(BUDGET_NOTE)]
    if budget_defaulted and beyond:
        notes = tuple(n for n in notes if n not in beyond)
    if notes:
        kind = "roofline step times (extrapolated: see warnings)"
    elif budget_defaulted and beyond:
        kind = "calibrated roofline step times (steps above the calibrated sizes extrapolated)"
    else:
        kind = "calibrated roofline step times"
    kv = "" if cfg.kv_cache_dtype == "auto" else f", {cfg.kv_cache_dtype} KV cache"
    kv = ("" if cfg.quantization is None else f", --quantization {cfg.quantization}") + kv
    gpus = f"{degree} x {where}"
    if cfg.pipeline_parallel_size > 1:  # perf.pipeline: the stages, their layers
        gpus = f"{cfg.pipeline_parallel_size * degree} x {where} in " + describe_split(
            setup.step_time.model, degree, cfg.pipeline_parallel_size
        )
    timed = f"{name} on {gpus}{kv}, {kind}{prof}; {blocks}{origin}"
    return ReplicaSetup(cfg, setup.step_time, timed, notes, name, where, degree)


#: The name the interfaces' contract (SEAMS) uses for ``replica_setup``.
default_deployment = replica_setup
