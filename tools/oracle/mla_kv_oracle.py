#!/usr/bin/env python3
"""vLLM 0.33's own KV-cache sizing of an MLA model: page size and ``num_gpu_blocks``.

Run with the oracle's Python (``~/.cache/vllm-oracle-venv/bin/python``; tools/oracle/README.md).
Reads a JSON list on stdin, one item per case::

    {"config": {...HF config.json...}, "tp": 8, "kv_cache_dtype": "auto", "block_size": 16,
     "available_memory": 48500000000}

and writes one JSON line per case: ``use_mla``, ``head_size``, ``num_kv_heads`` (per rank),
``num_layers``, ``page_size_bytes`` (one layer's block), ``bytes_per_block`` (all layers) and
``num_blocks``. Everything comes from vLLM: ``ModelConfig`` reads the config (``use_mla``,
``get_head_size``, ``get_num_kv_heads``, ``get_num_layers``), each layer's spec is built with the
arguments ``MLAAttention.get_kv_cache_spec`` passes (vllm/model_executor/layers/attention/
mla_attention.py), and the blocks come from ``get_kv_cache_groups`` and
``get_kv_cache_config_from_groups`` (vllm/v1/core/kv_cache_planning.py) for the given memory.
Nothing is loaded but the config: no weights, no tokenizer, no GPU.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def size(item: dict[str, Any]) -> dict[str, Any]:
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, VllmConfig
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, get_kv_quant_mode

    # The weights' quantization_config is left out: it does not enter KV sizing ("auto" is the
    # model's torch_dtype), and checking it imports quantization libraries the oracle lacks.
    config = {k: v for k, v in item["config"].items() if k != "quantization_config"}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        model_config = ModelConfig(
            model=tmp, skip_tokenizer_init=True, max_model_len=int(item.get("max_model_len", 4096))
        )
    parallel = ParallelConfig(tensor_parallel_size=int(item["tp"]))
    cache_dtype = item["kv_cache_dtype"]
    cache = CacheConfig(block_size=int(item["block_size"]), cache_dtype=cache_dtype)
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=cache,
        parallel_config=parallel,
        device_config=DeviceConfig(device="cpu"),
    )
    block_size = vllm_config.cache_config.block_size
    layers = model_config.get_num_layers(parallel)
    spec = MLAAttentionSpec(
        block_size=block_size,
        num_kv_heads=model_config.get_num_kv_heads(parallel),
        max_tp_shards=1,
        head_size=model_config.get_head_size(),
        dtype=kv_cache_dtype_str_to_dtype(cache_dtype, model_config),
        cache_dtype_str=cache_dtype,
        kv_quant_mode=get_kv_quant_mode(cache_dtype),
    )
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(layers)}
    # The engine core resolves the layout before planning; Triton-MLA runs on every platform and
    # a single uniform group's bytes per block do not depend on the layout.
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([TritonMLABackend])]
    resolve_kv_cache_layout(vllm_config, [layouts], list(specs.values()))
    groups = get_kv_cache_groups(vllm_config, specs)
    config = get_kv_cache_config_from_groups(vllm_config, groups, int(item["available_memory"]))
    return {
        "use_mla": bool(model_config.use_mla),
        "block_size": block_size,
        "head_size": model_config.get_head_size(),
        "num_kv_heads": model_config.get_num_kv_heads(parallel),
        "num_layers": layers,
        "page_size_bytes": spec.page_size_bytes,
        "bytes_per_block": spec.page_size_bytes * layers,
        "num_blocks": config.num_blocks,
    }


def main() -> int:
    for item in json.load(sys.stdin):
        sys.stdout.write(json.dumps(size(item)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
