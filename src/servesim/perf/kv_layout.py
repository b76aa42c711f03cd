"""A model's KV cache groups and what one pool block costs, as vLLM 0.33 plans them.

A model with sliding-window or chunked-local layers (``ModelSpec.layer_pattern``) runs vLLM's
hybrid KV cache manager: its layers are planned into groups (``engine.kv_groups.plan_groups``),
every group draws blocks from one pool, and a pool block is one page of ``group_size`` layers
(``get_kv_cache_config_from_groups``: ``num_blocks = memory // (group_size x page)``), not of
every layer. vLLM turns the hybrid manager off -- every layer then keeps every token, sized and
scheduled as full attention -- for chunked local attention with an EAGLE-family drafter
(``VllmConfig``'s ``need_disable_hybrid_kv_cache_manager``; its connectors, the CPU offload and
NIXL ones, support the hybrid manager, so with them it stays on, and servesim refuses the pair);
``hybrid_disabled`` says when. Layers with a recurrent state whose shape servesim knows (Qwen3-Next's
GatedDeltaNet) are vLLM's ``MambaSpec`` layers: ``mamba`` groups, one state block per request, the
attention block size raised until a page holds a state (``perf.memory.state_block_size``); other
Mamba and linear-attention layers stay refused (``perf.layer_pattern``).
"""

from __future__ import annotations

from servesim.engine.kv_groups import KVCacheGroup, plan_groups
from servesim.perf.catalog import ModelSpec

#: vLLM's ``SpeculativeConfig.use_eagle()`` methods (drafters that read the target's hidden states).
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


def layer_kinds(model: ModelSpec) -> list[KVCacheGroup]:
    """Each decoder layer's kind, in an order with the right first kind (the groups' order):
    the windowed layers first, except Qwen's ``max_window_layers`` (full layers first); state
    layers first (Qwen3-Next's layer 0 is a GatedDeltaNet layer)."""
    p = model.layer_pattern
    full = KVCacheGroup(kind="full")
    if p is not None and p.state is not None:
        return [KVCacheGroup(kind="mamba")] * p.layers + [full] * (model.num_layers - p.layers)
    if p is None or p.kind not in ("sliding_window", "chunked_local") or p.window is None:
        return [full] * model.num_layers
    windowed = [KVCacheGroup(kind=p.kind, window=p.window)] * p.layers
    rest = [full] * (model.num_layers - p.layers)
    return rest + windowed if p.field == "use_sliding_window" else windowed + rest


def hybrid_disabled(model: ModelSpec, speculative_method: str | None) -> str | None:
    """Why vLLM runs this model without the hybrid manager, or None when it runs it."""
    p = model.layer_pattern
    if p is None or p.kind not in ("sliding_window", "chunked_local"):
        return None
    if p.kind == "chunked_local" and speculative_method in EAGLE_METHODS:
        return "vLLM turns the hybrid KV cache manager off for chunked local attention with EAGLE"
    return None


def kv_groups(model: ModelSpec, hybrid: bool = True) -> tuple[tuple[KVCacheGroup, ...] | None, int]:
    """The engine's ``kv_cache_groups`` (None: one full-attention group) and the layers one pool
    block holds a page of. ``hybrid`` False: vLLM's manager off, every layer full attention."""
    kinds = layer_kinds(model)
    if not hybrid or all(k.kind == "full" for k in kinds):
        return None, model.num_layers
    groups, size = plan_groups(kinds)
    return tuple(groups), size


__all__ = ["EAGLE_METHODS", "hybrid_disabled", "kv_groups", "layer_kinds"]
