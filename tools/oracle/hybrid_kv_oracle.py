#!/usr/bin/env python3
"""vLLM 0.33's own KV cache planning of a sliding-window / chunked-local model: groups and blocks.

Run with the oracle's Python (``~/.cache/vllm-oracle-venv/bin/python``; tools/oracle/README.md).
Reads a JSON list on stdin, one item per case::

    {"config": {...HF config.json...}, "tp": 2, "block_size": 16, "available_memory": 48500000000,
     "max_model_len": 32768, "max_num_batched_tokens": 8192}

and writes one JSON line per case: ``groups`` (kind and window of each KV cache group, in vLLM's
order), ``layers_per_group``, ``page_size_bytes`` (one layer's block), ``bytes_per_block`` and
``num_blocks`` from ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups``
(vllm/v1/core/kv_cache_planning.py), and ``fits``: whether ``check_enough_kv_cache_memory``
accepts that memory for one ``max_model_len`` sequence. vLLM's ``ModelConfig`` reads the config
(KV heads per rank, head size, layers); each layer's spec is the one its model's attention layer
asks for: gpt-oss (``gpt_oss.py``: even layers slide), Gemma 3 (``gemma3.py``: ``layer_types``),
Llama 4 (``llama4.py``: RoPE layers, ``no_rope_layers[i] != 0``, attend in chunks); any other model
without a sliding window attends in full on every layer. Nothing is
loaded but the config: no weights, no tokenizer, no GPU.

Qwen3-Next (``qwen3_next.py``): its ``linear_attention`` layers are GatedDeltaNet layers whose KV
cache spec is a ``MambaSpec`` (``MambaBase.get_kv_cache_spec``). vLLM's model module needs GPU
kernels to import, so the architecture is registered here as a class with only the two
classmethods vLLM's planning calls (``get_mamba_state_shape_from_config`` /
``..._dtype_from_config``, the same calls to vLLM's ``MambaStateShapeCalculator`` /
``MambaStateDtypeCalculator`` as ``qwen3_next.py``); everything else is vLLM's: the config
handling (prefix caching off: ``mamba_cache_mode`` "none", ``mamba_block_size`` =
``max_model_len``), ``Platform._align_hybrid_block_size`` with the FlashAttention backend (the
attention block size raised until a page holds a state, the state's page padded to it), and the
planning. Such a case also reports ``block_size``, the raised one.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

#: The text-only model vLLM runs for a multimodal wrapper's decoder.
TEXT_MODELS = {"gemma3_text": "Gemma3ForCausalLM", "llama4_text": "Llama4ForCausalLM"}


def register_state_models() -> None:
    """Qwen3-Next's state-shape classmethods under its architecture name (see the module doc)."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import IsHybrid

    class Qwen3NextStateOnly(torch.nn.Module, IsHybrid):
        is_hybrid = True

        def embed_input_ids(self, input_ids):  # never run: the planning only reads the class
            raise NotImplementedError

        def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
            raise NotImplementedError

        def compute_logits(self, hidden_states):
            raise NotImplementedError

        @classmethod
        def get_mamba_state_dtype_from_config(cls, vllm_config):
            return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
                vllm_config.model_config.dtype,
                vllm_config.cache_config.mamba_cache_dtype,
                vllm_config.cache_config.mamba_ssm_cache_dtype,
            )

        @classmethod
        def get_mamba_state_shape_from_config(cls, vllm_config):
            hf = vllm_config.model_config.hf_text_config
            num_spec = (
                vllm_config.speculative_config.num_speculative_tokens if vllm_config.speculative_config else 0
            )
            return MambaStateShapeCalculator.gated_delta_net_state_shape(
                vllm_config.parallel_config.tensor_parallel_size,
                hf.linear_num_key_heads,
                hf.linear_num_value_heads,
                hf.linear_key_head_dim,
                hf.linear_value_head_dim,
                hf.linear_conv_kernel_dim,
                num_spec,
            )

    ModelRegistry.register_model("Qwen3NextForCausalLM", Qwen3NextStateOnly)


def layer_kinds(text: Any, layers: int) -> list[tuple[str, int | None]]:
    """Each layer's (kind, window) as vLLM's model code builds its attention layer."""
    model_type = getattr(text, "model_type", "")
    if model_type == "qwen3_next":  # GatedDeltaNet (a MambaSpec) where layer_types says linear
        return [
            ("mamba", None) if t == "linear_attention" else ("full", None) for t in text.layer_types[:layers]
        ]
    if model_type == "gpt_oss":
        return [
            ("sliding_window", text.sliding_window) if i % 2 == 0 else ("full", None) for i in range(layers)
        ]
    if model_type.startswith("gemma3"):
        return [
            ("sliding_window", text.sliding_window) if t == "sliding_attention" else ("full", None)
            for t in text.layer_types[:layers]
        ]
    if model_type.startswith("llama4"):
        chunk = text.attention_chunk_size
        return [
            ("chunked_local", chunk) if chunk and text.no_rope_layers[i] != 0 else ("full", None)
            for i in range(layers)
        ]
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        raise SystemExit(f"no layer rule for model_type {model_type!r}, which has a sliding window")
    return [("full", None)] * layers  # a full-attention model: every layer one group


def size(item: dict[str, Any]) -> dict[str, Any]:
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import (
        check_enough_kv_cache_memory,
        get_kv_cache_config_from_groups,
        get_kv_cache_groups,
    )
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
    )

    register_state_models()

    config = {k: v for k, v in item["config"].items() if k != "quantization_config"}
    if "text_config" in config:  # a multimodal wrapper: the KV cache is its text decoder's
        text = {k: v for k, v in config["text_config"].items() if k != "quantization_config"}
        text.setdefault("torch_dtype", config.get("torch_dtype", "bfloat16"))
        text["architectures"] = [TEXT_MODELS[text["model_type"]]]
        config = text
    mml = int(item["max_model_len"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        model_config = ModelConfig(model=tmp, skip_tokenizer_init=True, max_model_len=mml)
        parallel = ParallelConfig(tensor_parallel_size=int(item["tp"]))
        vllm_config = VllmConfig(
            model_config=model_config,
            # a model with state layers: prefix caching off, the mamba_cache_mode servesim models
            cache_config=CacheConfig(
                block_size=int(item["block_size"]),
                **({"enable_prefix_caching": False} if model_config.is_hybrid else {}),
            ),
            parallel_config=parallel,
            scheduler_config=SchedulerConfig(
                max_num_batched_tokens=int(item["max_num_batched_tokens"]),
                max_model_len=mml,
                is_encoder_decoder=False,
            ),
            device_config=DeviceConfig(device="cpu"),
        )
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False  # a GPU's default
    cache = vllm_config.cache_config
    if model_config.is_hybrid:  # the attention block raised until a page holds a state
        from vllm.platforms.interface import Platform
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

        Platform._align_hybrid_block_size(vllm_config, FlashAttentionBackend)
        model_cls, _ = ModelRegistry.resolve_model_cls(model_config.architecture, model_config=model_config)
    block_size = cache.block_size
    layers = model_config.get_num_layers(parallel)
    common = dict(
        block_size=block_size,
        num_kv_heads=model_config.get_num_kv_heads(parallel),
        head_size=model_config.get_head_size(),
        dtype=kv_cache_dtype_str_to_dtype("auto", model_config),
    )
    specs = {}
    for i, (kind, window) in enumerate(layer_kinds(model_config.hf_text_config, layers)):
        if kind == "mamba":  # MambaBase.get_kv_cache_spec
            specs[f"model.layers.{i}.linear_attn"] = MambaSpec(
                shapes=tuple(model_cls.get_mamba_state_shape_from_config(vllm_config)),
                dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config),
                block_size=cache.mamba_block_size,
                page_size_padded=cache.mamba_page_size_padded,
                mamba_cache_mode=cache.mamba_cache_mode,
            )
            continue
        if kind == "sliding_window":
            spec = SlidingWindowSpec(**common, sliding_window=window)
        elif kind == "chunked_local":
            spec = ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        else:
            spec = FullAttentionSpec(**common)
        specs[f"model.layers.{i}.self_attn.attn"] = spec
    names = [layout.name for layout in get_supported_kv_cache_layouts([TritonAttentionBackend])]
    resolve_kv_cache_layout(vllm_config, [names], list(specs.values()))
    groups = get_kv_cache_groups(vllm_config, dict(specs))
    planned = get_kv_cache_config_from_groups(vllm_config, groups, int(item["available_memory"]))
    try:
        check_enough_kv_cache_memory(vllm_config, dict(specs), int(item["available_memory"]))
        fits = True
    except ValueError:
        fits = False
    page = next(iter(specs.values())).page_size_bytes
    out_groups = []
    for g in planned.kv_cache_groups:
        s = g.kv_cache_spec
        if isinstance(s, MambaSpec):
            out_groups.append({"kind": "mamba"})
        elif isinstance(s, SlidingWindowSpec):
            out_groups.append({"kind": "sliding_window", "window": s.sliding_window})
        elif isinstance(s, ChunkedLocalAttentionSpec):
            out_groups.append({"kind": "chunked_local", "window": s.attention_chunk_size})
        else:
            out_groups.append({"kind": "full"})
    return {
        "groups": out_groups,
        "layers_per_group": max(len(g.layer_names) for g in planned.kv_cache_groups),
        "page_size_bytes": page,
        "bytes_per_block": page * max(len(g.layer_names) for g in planned.kv_cache_groups),
        "num_blocks": planned.num_blocks,
        "fits": fits,
        "block_size": block_size,
        "mamba_cache_mode": cache.mamba_cache_mode,
    }


def main() -> int:
    for item in json.load(sys.stdin):
        sys.stdout.write(json.dumps(size(item)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
