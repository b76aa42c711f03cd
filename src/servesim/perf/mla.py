"""Multi-head latent attention (MLA: DeepSeek-V2/V3/R1, Kimi-K2): sizes vLLM 0.33 gives it.

MLA caches one latent vector per token and layer instead of K and V per head: the compressed KV
(``kv_lora_rank``) and the shared rotary key (``qk_rope_head_dim``). vLLM builds every MLA layer's
``MLAAttentionSpec`` with ``num_kv_heads=1``, ``head_size = kv_lora_rank + qk_rope_head_dim``,
``head_size_v = 0`` and ``max_tp_shards=1`` (``MLAAttention.get_kv_cache_spec`` in
``vllm/model_executor/layers/attention/mla_attention.py``): the one latent head is replicated on
every tensor-parallel rank, not split, so a page is ``block_size x 1 x head_size x dtype bytes``
on each GPU whatever the TP degree.

The projections (``DeepseekV2MLAAttention``): ``q_a_proj`` (hidden -> q_lora_rank) and
``kv_a_proj_with_mqa`` (hidden -> kv_lora_rank + rope) are fused and replicated on every rank;
``q_b_proj`` (q_lora_rank -> heads x (nope + rope)), ``kv_b_proj`` (kv_lora_rank -> heads x
(nope + v)) and ``o_proj`` (heads x v -> hidden) are split over the ranks. After loading, vLLM
also keeps ``kv_b_proj`` split into ``W_UK`` / ``W_UV`` in the activation dtype for the absorbed
decode path (``MLAAttention.process_weights_after_loading``), on top of ``kv_b_proj`` itself,
which the prefill path still uses.

Compute: a decode runs *absorbed* attention: the query's no-rope part goes through ``W_UK`` into
the latent space, scores are taken against the cached latent (``kv_lora_rank + rope`` wide) and
the latent-space output goes through ``W_UV``; per token that is ``heads x kv_lora_rank x
(nope + v)`` multiply-adds, exactly ``kv_b_proj``'s, so the per-token GEMM count is the same for
decodes and prefills. A prefill runs the *MLA prefill path*: K/V are decompressed through
``kv_b_proj`` (the chunk's own tokens and, for a prefix already cached, every cached token) and
attention runs per head with q/k ``nope + rope`` and v ``v_head_dim`` wide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.perf.catalog import GPUSpec, ModelSpec


def latent_head_size(model: ModelSpec) -> int:
    """vLLM's MLA ``head_size``: ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3)."""
    return int(model.kv_lora_rank or 0) + int(model.qk_rope_head_dim or 0)


def _heads(model: ModelSpec, tp: int) -> int:
    return model.num_attention_heads // tp


def replicated_attention_params(model: ModelSpec) -> int:
    """Per layer, on every rank: the fused ``q_a_proj`` + ``kv_a_proj_with_mqa`` (or, without a
    query LoRA, only ``kv_a_proj_with_mqa``; ``q_proj`` is then split like ``q_b_proj``)."""
    q_a = model.hidden_size * model.q_lora_rank if model.q_lora_rank else 0
    return q_a + model.hidden_size * latent_head_size(model)


def split_attention_params(model: ModelSpec, tp: int) -> int:
    """Per layer and rank: ``q_b_proj`` (or ``q_proj``), ``kv_b_proj`` and ``o_proj``."""
    heads = _heads(model, tp)
    q_in = model.q_lora_rank or model.hidden_size
    v = int(model.v_head_dim or 0)
    q_b = q_in * heads * model.head_dim
    kv_b = int(model.kv_lora_rank or 0) * heads * (int(model.qk_nope_head_dim or 0) + v)
    o = heads * v * model.hidden_size
    return q_b + kv_b + o


def attention_params(model: ModelSpec, tp: int = 1) -> int:
    """One MLA layer's projection parameters on one of ``tp`` ranks (``tp=1``: the whole layer)."""
    return replicated_attention_params(model) + split_attention_params(model, tp)


def absorbed_params(model: ModelSpec, tp: int = 1) -> int:
    """``W_UK`` + ``W_UV`` per layer and rank (``kv_lora_rank x heads x (nope + v)``): kept in the
    activation dtype beside ``kv_b_proj``, and what a decode multiplies by instead of it."""
    nope_v = int(model.qk_nope_head_dim or 0) + int(model.v_head_dim or 0)
    return int(model.kv_lora_rank or 0) * _heads(model, tp) * nope_v


def decode_pair_flops(model: ModelSpec, tp: int) -> float:
    """FLOPs per (query, cached token) pair of absorbed decode attention, per layer and rank:
    scores over the latent + rope (``kv_lora_rank + rope``) and the value sum over the latent
    (``kv_lora_rank``), for each of the rank's heads."""
    lora = int(model.kv_lora_rank or 0)
    return 2.0 * _heads(model, tp) * (latent_head_size(model) + lora)


def prefill_pair_flops(model: ModelSpec, tp: int) -> float:
    """FLOPs per (query, key) pair of the MLA prefill path, per layer and rank: q.k over
    ``nope + rope`` (``head_dim``) and p.v over ``v_head_dim``, for each of the rank's heads."""
    return 2.0 * _heads(model, tp) * (model.head_dim + int(model.v_head_dim or 0))


def context_decompress_flops(model: ModelSpec, tp: int) -> float:
    """FLOPs per cached context token a prefill chunk attends to, per layer and rank: its latent
    goes back through ``kv_b_proj`` to per-head K (nope) and V (vLLM's chunked-context prefill)."""
    return 2.0 * absorbed_params(model, tp)


#: MLA backends of vLLM 0.33 on NVIDIA GPUs, by compute capability major, in the platform's
#: priority order (``_get_backend_priorities`` in vllm/platforms/cuda.py), with the KV-cache
#: dtypes each stores and the block sizes each takes (``supported_kv_cache_dtypes``,
#: ``get_supported_kernel_block_sizes``; 16 stands for "any multiple of 16").
_QUANT = ("fp8", "fp8_e4m3")
_BACKENDS: dict[int, tuple[tuple[str, tuple[str, ...], int], ...]] = {
    9: (("FLASH_ATTN_MLA", (), 16), ("FLASHMLA", _QUANT, 64), ("TRITON_MLA", _QUANT, 16)),
    10: (
        ("FLASHINFER_MLA", _QUANT, 32),
        ("CUTLASS_MLA", _QUANT, 128),
        ("FLASHMLA", _QUANT, 64),
        ("TRITON_MLA", _QUANT, 16),
    ),
}
#: servesim's GPUs by compute capability major (others run TRITON_MLA, any multiple of 16).
_CAPABILITY = {"h100": 9, "h100-pcie": 9, "h200": 9, "b200": 10}


def default_block_size(gpu: GPUSpec, kv_dtype: str) -> tuple[int, str]:
    """(block size, backend) vLLM 0.33 picks for an MLA model when ``--block-size`` is not given:
    the first backend in priority order that stores ``kv_dtype``, at 16 if it takes 16, else its
    smallest size (``AttentionBackend.get_preferred_block_size``). Auto and 16-bit caches are
    taken by every backend."""
    quantized = kv_dtype.startswith("fp8")
    for name, quant, size in _BACKENDS.get(_CAPABILITY.get(gpu.name, 0), ()):
        if not quantized or kv_dtype in quant:
            return size, name
    return 16, "TRITON_MLA"
