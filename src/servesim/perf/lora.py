"""LoRA adapter weights per GPU slot, as vLLM 0.33 allocates them: what a LoRA step reads and
computes beyond the base model.

Why: with ``--enable-lora`` every wrapped linear layer also runs vLLM's punica kernels, a
*shrink* (x @ A, down to the rank) and an *expand* (@ B, back up) per slice, on the adapter of
each token. vLLM sizes each layer's buffers for ``max_loras`` slots at ``max_lora_rank``
(``vllm/lora/layers/base_linear.py``, ``create_lora_weights``: ``lora_a_stacked`` is
``(max_loras, 1, max_lora_rank, input_size)`` per slice, ``lora_b_stacked``
``(max_loras, 1, output_size, max_lora_rank)``; a smaller adapter is zero-padded to the rank, so
the kernels run at ``max_lora_rank``). ``input_size``/``output_size`` are the rank's shard: a
column-parallel layer (``qkv_proj``: slices q, k, v; ``gate_up_proj``: gate, up) splits its
output, a row-parallel one (``o_proj``, ``down_proj``) its input.

Counted: the attention projections of every layer and the dense MLP of the dense layers (the
modules vLLM wraps in a decoder: ``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``; an
adapter that targets fewer reads less). Not counted: MoE experts' LoRA (``FusedMoEWithLoRA``),
MLA's latent projections (their q/k/v shapes are taken as plain attention's), the LM head and
embeddings (vLLM wraps them only with ``lora_extra_vocab``/``--enable-lora`` on those modules).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.perf.catalog import GPUSpec, ModelSpec
from servesim.perf.memory import kv_heads_per_rank

#: How fast a worker reads an adapter's checkpoint from disk into host memory, bytes/s: servesim's
#: stated assumption (one NVMe drive's sequential read, 2-7 GB/s, less safetensors' parsing and
#: vLLM's per-module tensor handling), the one place it is. vLLM reads the whole adapter in every
#: TP worker (``LRUCacheWorkerLoRAManager._load_adapter``: ``LoRAModel.from_local_checkpoint``
#: with ``device="cpu"``), so a read takes the full adapter's bytes whatever the TP.
ADAPTER_READ_BYTES_PER_S = 2.0e9


def lora_params_per_slot(model: ModelSpec, tp: int, rank: int) -> int:
    """A and B parameters of one adapter slot on one GPU of ``tp`` (every layer)."""
    h = model.hidden_size
    q = model.q_dim // tp
    kv = kv_heads_per_rank(model, tp) * model.head_dim
    # qkv_proj: three slices, A (rank x h) each, B (out_slice x rank); o_proj: A (rank x q), B (h x rank)
    attention = rank * (3 * h + q + 2 * kv) + rank * (q + h)
    inter = model.intermediate_size // tp
    gated = model.mlp_matrices == 3
    # gate_up_proj: two slices (one without a gate); down_proj: A (rank x inter), B (h x rank)
    up_slices = 2 if gated else 1
    mlp = rank * (up_slices * h + up_slices * inter) + rank * (inter + h)
    return model.num_layers * attention + model.num_dense_layers * mlp


@dataclass(frozen=True)
class AdapterLoadTimes:
    """What bringing one adapter to the GPU costs a step, seconds: copying it into a GPU slot
    (``to_gpu_s``, each TP rank its shard over its host link, in parallel) and, when the host's
    LoRA cache (``--max-cpu-loras``) no longer holds it, reading it from disk first (``read_s``)."""

    to_gpu_s: float
    read_s: float


def adapter_load_times(model: ModelSpec, gpu: GPUSpec, tp: int, rank: int) -> AdapterLoadTimes:
    """vLLM 0.33 activates an adapter in the step whose batch first needs it
    (``LoRAModelRunnerMixin.set_active_loras`` before the forward pass; ``activate_adapter``
    copies every module's A and B into the slot: ``set_lora``), so that step lasts this much
    longer. Sized at ``max_lora_rank`` (an adapter's own rank is not in a trace: an upper bound)
    in the model's dtype; the copy is timed as the CPU offload tier's copies are (the host link's
    per-transfer overhead plus bytes / ``pcie_bandwidth``)."""
    per_gpu = lora_params_per_slot(model, tp, rank) * model.dtype_bytes
    whole = lora_params_per_slot(model, 1, rank) * model.dtype_bytes
    return AdapterLoadTimes(
        to_gpu_s=gpu.host_link_overhead_s + per_gpu / gpu.pcie_bandwidth,
        read_s=whole / ADAPTER_READ_BYTES_PER_S,
    )


__all__ = ["ADAPTER_READ_BYTES_PER_S", "AdapterLoadTimes", "adapter_load_times", "lora_params_per_slot"]
