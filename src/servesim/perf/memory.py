"""GPU memory: weights per GPU, the start-up reserve, and the KV-cache capacity vLLM derives.

vLLM sizes its KV cache at start-up (``gpu_worker.determine_available_memory``)::

    requested     = total_memory x gpu_memory_utilization            (per GPU)
    kv_cache      = requested - weights - non-KV reserve (profile run)
    num_gpu_blocks = kv_cache // (kv_bytes_per_token x block_size)    (block 0 is the null block)

``kv_bytes_per_token`` is *the* formula for KV bytes; every other part of servesim (KV
recovery, reports, transfer sizes) must call it rather than re-derive it.

The non-KV reserve is what vLLM's profile run measures besides the weights: non-torch memory
(CUDA, cuBLAS and NCCL workspaces), the dummy sampler run (``max_num_seqs`` rows of
``vocab_size`` logits, sorted for top-k/top-p, with penalty bin counts) and the forward pass at
``max_num_batched_tokens``. ``MemoryOverheads`` holds those per-unit costs; its defaults were
fitted to eight vLLM 0.15.1 H100 start-ups of five dense models (see docs/perf.md), where they
reproduce the logged KV capacity within 1 %. Outside that ground (MoE or multimodal models, other
GPUs) ``kv_capacity_caveats`` says so, and ``KVCapacity.caveats`` carries the notes to the user.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.engine.kv_groups import KVCacheGroup, blocks_for_one_sequence, mamba_state_blocks
from servesim.errors import shown
from servesim.perf.catalog import DTYPE_BYTES, Catalog, GPUSpec, ModelSpec, resolve_gpu, resolve_model
from servesim.perf.errors import MemoryFitError, PerfError
from servesim.perf.kv_layout import kv_groups, layer_kinds
from servesim.perf.mla import absorbed_params, latent_head_size
from servesim.perf.mla import attention_params as mla_attention_params

GiB = 1 << 30

KVDType = Literal["auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2"]

_KV_DTYPE_BYTES: dict[str, float] = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}


def kv_dtype_bytes(model: ModelSpec, kv_dtype: str = "auto") -> float:
    """Bytes per KV element: ``auto`` means the model's activation dtype (vLLM's default)."""
    if kv_dtype == "auto":
        return DTYPE_BYTES[model.dtype]
    try:
        return _KV_DTYPE_BYTES[kv_dtype]
    except KeyError:
        raise PerfError(
            f"unknown kv_dtype {shown(kv_dtype)}; use auto, {', '.join(_KV_DTYPE_BYTES)}"
        ) from None


def check_kv_cache_dtype(model: ModelSpec, gpu: GPUSpec, kv_dtype: str) -> None:
    """vLLM's own refusals of ``--kv-cache-dtype`` (``CacheConfig.cache_dtype``): an explicit
    16-bit KV cache must be the model's dtype, and ROCm stores fp8 KV as ``fp8_e4m3`` only."""
    kv_dtype_bytes(model, kv_dtype)  # an unknown name
    if kv_dtype in ("bfloat16", "float16") and kv_dtype != model.dtype:
        raise PerfError(
            f"kv_cache_dtype {kv_dtype} with {model.name}: an explicit 16-bit KV cache must be the "
            f"model's dtype ({model.dtype}), as vLLM requires; use auto"
        )
    if kv_dtype == "fp8_e5m2" and model.is_mla and gpu.vendor == "NVIDIA":
        raise PerfError(
            f"kv_cache_dtype fp8_e5m2 with {model.name}: none of vLLM 0.33's MLA attention backends on "
            "NVIDIA GPUs (FlashAttention-MLA, FlashMLA, FlashInfer-MLA, CUTLASS-MLA, Triton-MLA) "
            "stores an fp8_e5m2 latent cache; use fp8 (fp8_e4m3)"
        )
    if kv_dtype == "fp8_e5m2" and gpu.vendor == "AMD":
        raise PerfError(
            f"kv_cache_dtype fp8_e5m2 on {gpu.name}: vLLM on ROCm stores an fp8 KV cache as fp8_e4m3 "
            "only; use fp8"
        )


def check_tp(model: ModelSpec, tp: int) -> None:
    """vLLM's tensor-parallel constraints: attention heads split evenly, KV heads split or replicate."""
    if tp < 1:
        raise PerfError(f"tensor-parallel size must be >= 1, got {tp}")
    if model.num_attention_heads % tp:
        raise PerfError(
            f"{model.name}: {model.num_attention_heads} attention heads cannot be split over TP={tp} "
            "(vLLM requires num_attention_heads % tp == 0)"
        )
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        raise PerfError(
            f"{model.name}: {kv} KV heads cannot be split or replicated over TP={tp} "
            "(vLLM requires kv_heads % tp == 0 or tp % kv_heads == 0)"
        )


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads each TP rank stores: split when there are enough, replicated otherwise."""
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token(model: ModelSpec, tp: int = 1, kv_dtype: str = "auto") -> int:
    """KV-cache bytes one token occupies on one GPU: ``2 x layers x KV heads per rank x head_dim x bytes``.

    The single formula servesim uses for KV sizes (capacity, recovery, reports). ``2`` is key
    plus value; KV heads per rank are ``max(1, kv_heads // tp)`` because vLLM replicates KV heads
    when TP exceeds their number. Examples (bf16, TP=1): Llama-3.1-8B 131,072 B; Llama-3.1-70B
    327,680 B (81,920 per GPU at TP=4). MLA models cache ``layers x (kv_lora_rank +
    qk_rope_head_dim) x bytes`` on every GPU at any TP (``perf.mla``): DeepSeek-V3 70,272 B in bf16.
    """
    check_tp(model, tp)
    if model.is_mla:  # vLLM's MLAAttentionSpec: one latent head, no V, replicated on every rank
        return round(model.num_layers * latent_head_size(model) * kv_dtype_bytes(model, kv_dtype))
    per = (
        2
        * model.num_attention_layers
        * kv_heads_per_rank(model, tp)
        * model.head_dim
        * kv_dtype_bytes(model, kv_dtype)
    )
    return round(per)


#: vLLM's attention kernels' smallest block (FlashAttention and Triton: ``MultipleOf(16)``).
KERNEL_BLOCK_ALIGNMENT = 16


#: FlashInfer's GatedDeltaNet prefill exports checkpoint states on this token grid
#: (``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``).
GDN_CHECKPOINT_ALIGNMENT = 64
#: servesim's Hopper GPUs (compute capability 9.0: vLLM's GatedDeltaNet prefill runs on FlashInfer)
#: and Blackwell ones (10.x: FlashInfer only with a CUDA 13 runtime); the others run Triton or
#: AMD's kernels.
HOPPER = frozenset({"h100", "h100-pcie", "h200", "h20"})
BLACKWELL = frozenset({"b200", "gb200", "b300"})


def prefill_checkpoint_blocks(model: ModelSpec, gpu: GPUSpec, prefix_caching: bool) -> int:
    """vLLM 0.33's ``MambaSpec.num_prefill_checkpoint_blocks`` for ``model`` on ``gpu``: 1 where
    prefix caching runs its state layers in ``mamba_cache_mode`` "align" and the GatedDeltaNet
    prefill runs on FlashInfer (``_resolve_gdn_prefill_backend``: Hopper), which exports the
    prompt's last block-boundary state from inside a chunk; 0 elsewhere (Triton, AMD's kernels).
    On Blackwell FlashInfer is chosen only with a CUDA 13 runtime, which servesim cannot know:
    refused (``PerfError``) rather than guessed."""
    p = model.layer_pattern
    if not prefix_caching or p is None or p.state is None:
        return 0
    if gpu.name in HOPPER:
        return 1
    if gpu.name in BLACKWELL:
        raise PerfError(
            f"{model.name} on {gpu.name} with prefix caching: vLLM 0.33 runs its linear-attention "
            "prefill on FlashInfer (prefill checkpoints, 64-token block alignment) only with a "
            "CUDA 13 runtime there, which servesim cannot tell; not modelled: give "
            "--no-enable-prefix-caching, or a Hopper GPU"
        )
    return 0


def state_block_size(
    model: ModelSpec, tp: int, block_size: int, kv_dtype: str = "auto", checkpoints: int = 0
) -> int:
    """The attention block size vLLM runs a model with state layers at: the smallest multiple of
    ``max(16, block_size)`` whose attention page holds one layer's state
    (``Platform._align_hybrid_block_size``; the state's page is then padded to that page, so
    every group's block is the same size), that multiple also one of 64 tokens where the prefill
    exports checkpoints (``checkpoints``: ``prefill_checkpoint_blocks``; vLLM aligns the block to
    the kernel's checkpoint grid). ``block_size`` itself for any other model."""
    p = model.layer_pattern
    if p is None or p.state is None:
        return block_size
    if reason := p.state.check_tp(tp):
        raise PerfError(f"{model.name}: {reason} (vLLM splits it evenly over the ranks)")
    per_token = 2 * kv_heads_per_rank(model, tp) * model.head_dim * kv_dtype_bytes(model, kv_dtype)
    state = p.state.page_bytes(tp, model.dtype_bytes)  # mamba_cache_dtype "auto": the model's dtype
    align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    if checkpoints:
        align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    need = align * math.ceil(state / (align * per_token))
    need = KERNEL_BLOCK_ALIGNMENT * -(-need // KERNEL_BLOCK_ALIGNMENT)
    return max(block_size, need)


class WeightBreakdown(BaseModel):
    """Weight bytes held by one GPU, by part of the model."""

    model_config = ConfigDict(frozen=True)

    attention: int
    mlp: int
    experts: int
    shared_experts: int
    router: int
    embedding: int
    lm_head: int
    norms: int
    extra: int = Field(description="Parameters outside the text decoder (vision encoder), sharded.")
    rope_cache: int = Field(description="cos/sin table of max_position_embeddings rows, in dtype.")

    @property
    def total(self) -> int:
        return (
            self.attention
            + self.mlp
            + self.experts
            + self.shared_experts
            + self.router
            + self.embedding
            + self.lm_head
            + self.norms
            + self.extra
            + self.rope_cache
        )


def mixer_params_per_rank(model: ModelSpec, tp: int) -> int:
    """Every layer's token-mixer parameters on one rank: attention (``attention_params_per_rank``)
    in the attention layers, a GatedDeltaNet's projections split over the ranks in the state
    layers (``ModelSpec.state_params_per_layer``)."""
    return (
        model.num_attention_layers * attention_params_per_rank(model, tp)
        + model.num_state_layers * model.state_params_per_layer // tp
    )


def attention_params_per_rank(model: ModelSpec, tp: int) -> int:
    """Q/O split over ranks; K/V split, or replicated when there are fewer KV heads than ranks.
    MLA: the latent down-projections replicated, the up- and output projections split."""
    if model.is_mla:
        return mla_attention_params(model, tp)
    h = model.hidden_size
    q = model.q_dim // tp
    kv = kv_heads_per_rank(model, tp) * model.head_dim
    p = h * (q + 2 * kv) + q * h
    if model.attention_bias:
        p += q + 2 * kv
    return p


def weight_breakdown(model: ModelSpec, tp: int = 1, expert_shards: float | None = None) -> WeightBreakdown:
    """Weight bytes per GPU under tensor parallelism (vLLM's column/row/vocab-parallel layers).

    Linear layers and the (vocab-parallel) embedding and lm_head are split over the ranks; MoE
    experts are split tensor-parallel too (vLLM's default without expert parallelism); norms
    and routers are replicated. The RoPE cos/sin cache (``max_position_embeddings`` x head_dim
    in the model dtype) is a buffer every rank allocates at load time, so it counts here. MLA
    attention also holds ``W_UK``/``W_UV`` in the activation dtype beside ``kv_b_proj`` (counted
    in ``attention``). ``expert_shards``: what the routed experts are split over when that is not
    ``tp`` (data parallelism flattens the MoE layers over every GPU: ``perf.expert_parallel``).
    """
    check_tp(model, tp)
    d = model.dtype_bytes
    moe = model.num_moe_layers
    attention = mixer_params_per_rank(model, tp) * model.bytes_of("attention")
    if model.is_mla:  # W_UK / W_UV, split out of kv_b_proj in the activation dtype
        attention += model.num_layers * absorbed_params(model, tp) * d
    mlp = model.num_dense_layers * model.dense_mlp_params_per_layer / tp * model.bytes_of("mlp")
    shards = tp if expert_shards is None else expert_shards
    experts = moe * model.num_experts * model.expert_params / shards * model.bytes_of("experts")
    shared = moe * model.shared_expert_params_per_layer / tp * model.bytes_of("shared_experts")
    router = moe * model.router_params_per_layer * d
    embedding = math.ceil(model.vocab_size / tp) * model.hidden_size * d
    lm_head = (0 if model.tie_word_embeddings else math.ceil(model.vocab_size / tp) * model.hidden_size) * d
    return WeightBreakdown(
        attention=int(attention),
        mlp=int(mlp),
        experts=int(experts),
        shared_experts=int(shared),
        router=int(router),
        embedding=int(embedding),
        lm_head=int(lm_head),
        norms=int(model.norm_params * d),
        extra=int(model.extra_params / tp * d),
        rope_cache=int(model.max_position_embeddings * model.rope_dim * d),
    )


def weight_bytes_per_gpu(model: ModelSpec, tp: int = 1) -> int:
    return weight_breakdown(model, tp).total


class MemoryOverheads(BaseModel):
    """Per-unit costs of vLLM's non-KV start-up reserve (per GPU).

    Defaults: least-squares fit to eight vLLM 0.15.1 start-ups on H100 (Llama-2-7B, Qwen2.5-7B
    at two token budgets, Mistral-Nemo at TP 1 and 2, Yi-34B, Llama-3.1-70B at two token
    budgets); the residuals are within +-0.3 GiB, under 1 % of the KV capacity. See docs/perf.md.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_bytes: int = Field(
        int(0.844 * GiB), ge=0, description="Non-torch memory and persistent buffers (CUDA, cuBLAS, NCCL)."
    )
    sampler_bytes_per_logit: float = Field(
        48.2, ge=0, description="Dummy sampler run: bytes per (max_num_seqs x vocab) logit."
    )
    activation_bytes_per_token_hidden: float = Field(
        5.38, ge=0, description="Profile forward pass: bytes per (max_num_batched_tokens x hidden_size)."
    )
    cudagraph_bytes: int = Field(
        0,
        ge=0,
        description="CUDA-graph memory subtracted before sizing (0: vLLM 0.15 captures after sizing).",
    )


class ReserveBreakdown(BaseModel):
    model_config = ConfigDict(frozen=True)

    base: int
    sampler: int
    activations: int
    cudagraphs: int

    @property
    def total(self) -> int:
        return self.base + self.sampler + self.activations + self.cudagraphs


def reserve_breakdown(
    model: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    overheads: MemoryOverheads | None = None,
) -> ReserveBreakdown:
    o = overheads or MemoryOverheads()
    sampled_rows = min(max_num_seqs, max_num_batched_tokens)
    return ReserveBreakdown(
        base=o.base_bytes,
        sampler=int(o.sampler_bytes_per_logit * sampled_rows * model.vocab_size),
        activations=int(o.activation_bytes_per_token_hidden * max_num_batched_tokens * model.hidden_size),
        cudagraphs=o.cudagraph_bytes,
    )


#: GPUs whose start-up reserve servesim has checked against vLLM's logged KV capacity.
VALIDATED_GPUS = frozenset({"h100"})


def kv_capacity_caveats(model: ModelSpec, gpu: GPUSpec) -> list[str]:
    """Where this estimate lies outside what the memory model was checked on (docs/perf.md).

    Dense text models on H100 are within 1 % of vLLM 0.15.1's logged block counts. The one MoE
    and multimodal model measured, Llama-4-Scout FP8 at TP 2, came out 14 % high (about 1.7 GiB
    per GPU that vLLM keeps and the model does not explain), so such estimates are an upper bound.
    The start-up reserve (CUDA context, NCCL and library workspaces) was fitted on H100 only.
    """
    out: list[str] = []
    kinds = [k for k, on in (("MoE", model.is_moe), ("multimodal", model.extra_params > 0)) if on]
    if kinds:
        out.append(
            f"{model.name}: KV capacity of {' and '.join(kinds)} models is not validated; the one "
            "such model measured (Llama-4-Scout FP8 on 2 x H100, vLLM 0.15.1) has 14 % fewer blocks "
            "than servesim estimates: read the estimate as an upper bound, or pass the block count "
            "from vLLM's start-up log (--num-gpu-blocks)"
        )
    if gpu.name not in VALIDATED_GPUS:
        out.append(
            f"KV capacity on {gpu.name}: the start-up reserve (CUDA context, NCCL and library "
            f"workspaces) was fitted on H100 and is not measured on {gpu.name}"
        )
    return out


class KVCapacity(BaseModel):
    """The KV cache one replica gets: every number per GPU unless named otherwise."""

    model: str
    gpu: str
    tp: int
    gpu_memory_utilization: float
    block_size: int
    kv_dtype: str
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int | None
    total_memory_bytes: int
    requested_bytes: int = Field(description="total_memory x gpu_memory_utilization.")
    weight_bytes: int
    weights: WeightBreakdown
    reserve_bytes: int
    reserve: ReserveBreakdown
    kv_cache_bytes: int
    kv_bytes_per_token: int
    bytes_per_block: int
    num_gpu_blocks: int = Field(description="Blocks in the pool, including vLLM's reserved null block.")
    usable_blocks: int
    max_tokens: int = Field(description="Tokens the usable blocks hold (all sequences together).")
    max_concurrency: float | None = Field(
        description="Sequences of max_model_len that fit at once (vLLM's 'Maximum concurrency')."
    )
    kv_cache_groups: list[KVCacheGroup] | None = Field(
        None,
        description="Sliding-window / chunked-local models: vLLM's KV cache groups, one table each "
        "over the pool; a block is then one page of layers_per_block layers (None: one full group).",
    )
    layers_per_block: int | None = Field(None, description="Layers one pool block holds a page of.")
    caveats: list[str] = Field(
        default_factory=list,
        description="Where the estimate lies outside the runs the memory model was validated on.",
    )


def kv_capacity(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    *,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
    kv_dtype: str = "auto",
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 128,
    max_model_len: int | None = None,
    overheads: MemoryOverheads | None = None,
    catalog: Catalog | None = None,
    lora_bytes: int = 0,
    hybrid: bool = True,
    expert_shards: float | None = None,
    weights: WeightBreakdown | None = None,
    sampler: bool = True,
    prefix_caching: bool = False,
) -> KVCapacity:
    """KV blocks vLLM would allocate for ``model`` on ``tp`` x ``gpu`` (its start-up arithmetic).

    ``max_model_len`` None means the model's ``max_position_embeddings`` (vLLM's default).
    Raises ``MemoryFitError`` when the weights and reserve do not fit ``requested`` memory, or
    when the cache cannot hold one sequence of ``max_model_len`` tokens; the message gives the
    numbers and what to change. ``lora_bytes``: the LoRA adapter slots' buffers per GPU
    (``perf.lora``), allocated with the weights at load, so the cache gets that much less.
    ``expert_shards``: ``weight_breakdown``'s (one DP rank's GPU under data parallelism).
    ``weights`` / ``sampler``: one pipeline stage's (``perf.pipeline``): its weights, and whether
    it runs the dummy sampler (the last stage only); ``model`` is then the stage's layers.
    ``prefix_caching``: a model with state layers then runs them in ``mamba_cache_mode`` "align"
    (more state blocks per sequence, on Hopper a block size aligned to 64 tokens).
    """
    m = resolve_model(model, catalog)
    g = resolve_gpu(gpu, catalog)
    if not 0 < gpu_memory_utilization <= 1:
        raise PerfError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if block_size < 1 or max_num_batched_tokens < 1 or max_num_seqs < 1:
        raise PerfError("block_size, max_num_batched_tokens and max_num_seqs must be >= 1")
    check_tp(m, tp)
    requested = math.ceil(g.memory_bytes * gpu_memory_utilization)
    weights = weights or weight_breakdown(m, tp, expert_shards)
    reserve = reserve_breakdown(
        m, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, overheads=overheads
    )
    if not sampler:
        reserve = reserve.model_copy(update={"sampler": 0})
    kv_bytes = requested - weights.total - reserve.total - lora_bytes
    if kv_bytes <= 0:
        need = weights.total + reserve.total + lora_bytes
        min_tp = _min_tp(m, g, gpu_memory_utilization, reserve.total)
        hint = f"use TP >= {min_tp}" if min_tp else "use a GPU with more memory or a quantized checkpoint"
        raise MemoryFitError(
            f"{m.name} does not fit {g.name} at TP={tp}: weights need {weights.total / GiB:.2f} GiB per "
            f"GPU plus {reserve.total / GiB:.2f} GiB start-up reserve"
            + (f" plus {lora_bytes / GiB:.2f} GiB of LoRA slots" if lora_bytes else "")
            + f" = {need / GiB:.2f} GiB, but only "
            f"{requested / GiB:.2f} GiB is available ({g.memory_bytes / GiB:.2f} GiB x "
            f"gpu_memory_utilization {gpu_memory_utilization}); {hint}, or raise gpu_memory_utilization"
        )
    per_tok = kv_bytes_per_token(m, tp, kv_dtype)
    groups, layers = kv_groups(m, hybrid)
    ckpt = prefill_checkpoint_blocks(m, g, prefix_caching) if hybrid else 0
    block_size = state_block_size(m, tp, block_size, kv_dtype, ckpt)  # state layers: pages that hold a state
    # vLLM's get_kv_cache_config_from_groups: a block is one page of each layer of a group
    per_block = per_tok // m.num_attention_layers * layers * block_size if groups else per_tok * block_size
    blocks = kv_bytes // per_block
    usable = max(0, blocks - 1)
    mml = max_model_len if max_model_len is not None else m.max_position_embeddings
    need_blocks = -(-mml // block_size)
    states = mamba_state_blocks(prefix_caching, ckpt)
    if groups:  # vLLM's check_enough_kv_cache_memory: each layer's most, windowed layers capped
        need_blocks = _hybrid_need(
            m, groups, mml, block_size, max_num_batched_tokens, per_block, layers, states
        )
    if usable < need_blocks:
        fit_tokens = usable * block_size
        if groups:  # vLLM's estimate_max_model_len: the longest sequence whose need fits
            lo, hi = 0, mml
            while lo < hi:
                mid = (lo + hi + 1) // 2
                fits = (
                    _hybrid_need(
                        m, groups, mid, block_size, max_num_batched_tokens, per_block, layers, states
                    )
                    <= usable
                )
                lo, hi = (mid, hi) if fits else (lo, mid - 1)
            fit_tokens = lo
        raise MemoryFitError(
            f"{m.name} on {tp} x {g.name}: the KV cache gets {kv_bytes / GiB:.2f} GiB per GPU = {usable} "
            f"usable blocks of {block_size} tokens ({fit_tokens} tokens), but one sequence of "
            f"max_model_len {mml} needs {need_blocks} blocks ({need_blocks * per_block / GiB:.2f} GiB); "
            f"lower max_model_len to <= {fit_tokens}, raise gpu_memory_utilization, or add GPUs (TP)"
        )
    return KVCapacity(
        model=m.name,
        gpu=g.name,
        tp=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        kv_dtype=kv_dtype,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=mml,
        total_memory_bytes=g.memory_bytes,
        requested_bytes=requested,
        weight_bytes=weights.total,
        weights=weights,
        reserve_bytes=reserve.total,
        reserve=reserve,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=per_tok,
        bytes_per_block=per_block,
        num_gpu_blocks=int(blocks),
        usable_blocks=int(usable),
        max_tokens=int(usable * block_size),
        max_concurrency=usable / need_blocks if need_blocks else None,
        caveats=kv_capacity_caveats(m, g),
        kv_cache_groups=list(groups) if groups else None,
        layers_per_block=layers if groups else None,
    )


def _hybrid_need(
    model: ModelSpec,
    groups: tuple[KVCacheGroup, ...],
    mml: int,
    block_size: int,
    max_num_batched_tokens: int,
    per_block: int,
    layers: int,
    state_blocks: int = 1,
) -> int:
    """Pool blocks vLLM needs free for one sequence of ``mml`` tokens: the sum over layers of each
    layer's most (``max_memory_usage_bytes``: every block for full attention, the admission cap
    for a windowed layer, ``max_num_batched_tokens`` in flight), in blocks, rounded up."""
    page = per_block // layers
    need = 0
    for spec in layer_kinds(model):
        need += blocks_for_one_sequence([spec], mml, block_size, max_num_batched_tokens, state_blocks) * page
    return -(-need // per_block)


def _min_tp(model: ModelSpec, gpu: GPUSpec, util: float, reserve: int) -> int | None:
    """Smallest valid TP degree (<= 64) at which weights and reserve fit one GPU's share."""
    avail = gpu.memory_bytes * util
    for tp in range(2, 65):
        try:
            check_tp(model, tp)
        except PerfError:
            continue
        if weight_bytes_per_gpu(model, tp) + reserve < avail:
            return tp
    return None
