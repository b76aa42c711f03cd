"""The one set of defaults: what ``vllm serve MODEL`` runs on the chosen GPU.

vLLM fills the batch limits it was not given from a table keyed by the GPU's memory and the entry
point (``get_batch_defaults`` / ``_set_default_max_num_seqs_and_batched_tokens_args`` in
``vllm/engine/arg_utils.py``, 0.33; docs/vllm-scheduling.md §1). For the OpenAI API server:

* a GPU of at least 70 GiB that is not an A100 (H100, H200, B200, MI300X): ``max_num_seqs`` 1024 and
  ``max_num_batched_tokens`` 8192 (16384 from 160 GiB);
* any other GPU: 256 and 2048.

Each limit the user left unset gets its default on its own, then vLLM's clamps apply to the
defaulted ones only: the token budget is at least ``max_model_len`` with chunked prefill off and at
most ``max_num_seqs`` × ``max_model_len``; ``max_num_seqs`` is at most the token budget. A run timed
without a GPU (``--step-time-ms``, ``--linear-step-time``, a fixed step-time model) gets the "any
other GPU" row. Every other engine setting keeps vLLM's dataclass default (``EngineConfig``). Every
command, web tab, the dashboard, the emulator, the demo and the tuner's baseline start here, and
results say which defaults were applied.
"""

from __future__ import annotations

from typing import Any

#: (max_num_seqs, max_num_batched_tokens) of ``vllm serve`` on a GPU below 70 GiB or an A100.
SMALL_GPU_DEFAULTS = (256, 2048)


def vllm_serve_defaults(gpu: str | None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of ``vllm serve`` on this GPU (catalog name; None:
    no GPU, the small-GPU row)."""
    if gpu is None:
        return SMALL_GPU_DEFAULTS
    try:
        from servesim.perf.catalog import load_catalog

        spec = load_catalog().gpu(gpu)
    except (ImportError, ValueError):
        return SMALL_GPU_DEFAULTS
    gib = spec.memory_bytes / 2**30
    if gib >= 70 and "a100" not in spec.name.lower():
        return 1024, (16384 if gib >= 160 else 8192)
    return SMALL_GPU_DEFAULTS


def apply_serve_defaults(
    given: dict[str, Any], gpu: str | None, max_model_len: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``given`` (vLLM keys the user set) with ``vllm serve``'s batch defaults for ``gpu`` filled
    in where unset, and the defaults that were applied (``{key: value}``, for the result to say)."""
    mns, mbt = vllm_serve_defaults(gpu)
    values = dict(given)
    applied: dict[str, Any] = {}
    seqs_unset = values.get("max_num_seqs") is None
    if seqs_unset:
        values["max_num_seqs"] = mns
    if values.get("max_num_batched_tokens") is None:
        budget = mbt
        if max_model_len is not None:
            if values.get("enable_chunked_prefill") is False:
                budget = max(budget, max_model_len)
            budget = min(budget, int(values["max_num_seqs"]) * max_model_len)
        values["max_num_batched_tokens"] = budget
    if seqs_unset:
        values["max_num_seqs"] = applied["max_num_seqs"] = min(
            int(values["max_num_seqs"]), int(values["max_num_batched_tokens"])
        )
    if given.get("max_num_batched_tokens") is None:
        applied["max_num_batched_tokens"] = values["max_num_batched_tokens"]
    return values, applied


def vllm_default_block_size(model: str | None, gpu: str | None, kv_dtype: str = "auto") -> int | None:
    """The KV block size ``vllm serve`` picks without ``--block-size`` when it is not 16: an MLA
    model's attention backend fixes it (FlashMLA's 64 for an fp8 cache on Hopper, FlashInfer-MLA's
    32 on Blackwell; ``servesim.perf.mla.default_block_size``). None: 16, or a name that does not
    resolve (the deployment's own checks then say why)."""
    if model is None or gpu is None:
        return None
    from servesim.perf.catalog import load_catalog, resolve_model
    from servesim.perf.mla import default_block_size

    try:
        catalog = load_catalog()
        spec, card = resolve_model(model, catalog), catalog.gpu(gpu)
    except (ImportError, ValueError):
        return None
    if not spec.is_mla:
        return None
    size, _ = default_block_size(card, kv_dtype)
    return None if size == 16 else size


__all__ = ["SMALL_GPU_DEFAULTS", "apply_serve_defaults", "vllm_default_block_size", "vllm_serve_defaults"]
