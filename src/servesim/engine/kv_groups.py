"""KV cache groups: vLLM 0.33's layout of a hybrid model's layers, and each group's rules.

A model whose layers do not all keep every token's KV (sliding-window attention: gpt-oss,
Gemma 3; chunked local attention: Llama 4) gets one block table per *group* of layers from vLLM's
KV cache planning (``vllm/v1/core/kv_cache_planning.py``, ``_get_kv_cache_groups_uniform_page_size``):
the layers are bucketed by spec in the order they first appear, every group holds the same
number of layers (the smallest bucket's, or the largest when it is under 1.5 times the smallest)
and a bucket of ``n`` layers becomes ``ceil(n / group_size)`` groups. All groups draw blocks of
the same page size from one pool, so a token block costs one block per group, and a block of
the pool is ``group_size`` layers' pages. A group's kind decides which of its blocks a request
still needs (``skipped_tokens``: the blocks wholly out of the window or before the current
chunk are freed), what a prefix-cache hit means for it, and how many blocks the admission gate
reserves for it (``admission_cap``). The rules are those of ``single_type_kv_cache_manager.py``
(``SlidingWindowManager``, ``ChunkedLocalAttentionManager``) and ``kv_cache_interface.py``.

A ``mamba`` group holds layers that keep a recurrent state instead of KV (vLLM's ``MambaSpec``:
Mamba, GatedDeltaNet linear attention). vLLM pads the state's page to the attention page (raising
the attention block size until a page holds the state), so a state is one block of the same pool.
Without prefix caching (``mamba_cache_mode`` "none", the only mode modelled: see
``EngineConfig``) the group's block size is ``max_model_len``, so ``MambaManager`` gives a request
``ceil(tokens / max_model_len)`` = one block for its whole life, and frees it with the others when
the request finishes or is preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import ConfigError

GroupKind = Literal["full", "sliding_window", "chunked_local", "mamba"]


class KVCacheGroup(BaseModel):
    """One KV cache group: its attention kind and, for a windowed kind, the window (sliding
    window) or chunk (chunked local attention) in tokens; a ``mamba`` group's layers keep one
    state block per request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: GroupKind
    window: int | None = Field(None, ge=1, description="Sliding window / attention chunk, in tokens.")

    @model_validator(mode="after")
    def _check(self) -> KVCacheGroup:
        if (self.kind in ("full", "mamba")) != (self.window is None):
            need = "takes no window" if self.kind in ("full", "mamba") else "needs a window (tokens)"
            raise ConfigError(f"kv_cache_groups: a {self.kind} group {need}")
        return self

    def label(self) -> str:
        return self.kind if self.window is None else f"{self.kind}({self.window})"


def skipped_tokens(kind: str, window: int, computed: int) -> int:
    """Leading tokens the next token no longer attends to (``get_num_skipped_tokens``): before
    the sliding window (``computed - window + 1``) or before the current chunk."""
    if kind == "sliding_window":
        n = computed - window + 1
        return n if n > 0 else 0
    if kind == "chunked_local":
        return computed // window * window
    return 0


def admission_cap(
    kind: str, window: int, max_in_flight_tokens: int, max_model_len: int, block_size: int
) -> int:
    """Most blocks the full-sequence admission gate reserves for one request in a windowed group
    (``max_admission_blocks_per_request``): the window (sliding: ``window - 1``; chunked: one
    chunk) plus the tokens that may be in flight, never past ``max_model_len`` (a sliding window
    one block more: it may start inside a block); a mamba group's one state block (its block size
    is ``max_model_len``: ``MambaSpec.max_memory_usage_bytes`` is one page); -1 for full."""
    if kind == "sliding_window":
        # + 1 block: the window need not start at a block boundary (vLLM's own comment)
        return -(-min(window - 1 + max_in_flight_tokens, max_model_len) // block_size) + 1
    if kind == "chunked_local":
        return -(-min(window + max_in_flight_tokens, max_model_len) // block_size)
    if kind == "mamba":
        return 1
    return -1


def plan_groups(layers: Sequence[KVCacheGroup]) -> tuple[list[KVCacheGroup], int]:
    """vLLM's groups for a model whose layer ``i`` is of kind ``layers[i]`` (equal page sizes),
    and the layers per group (``group_size``). One kind for all layers: one group of them all."""
    buckets: dict[KVCacheGroup, int] = {}
    for spec in layers:
        buckets[spec] = buckets.get(spec, 0) + 1
    if not buckets:
        raise ConfigError("kv_cache_groups: a model needs at least one attention layer")
    if len(buckets) == 1:
        ((spec, n),) = buckets.items()
        return [spec], n
    small = min(buckets.values())
    large = max(buckets.values())
    size = large if large < small * 1.5 else small
    groups: list[KVCacheGroup] = []
    for spec, n in buckets.items():
        groups.extend([spec] * -(-n // size))
    return groups, size


def group_kinds(groups: Sequence[KVCacheGroup]) -> dict[str, list[int]]:
    """Each kind of group (its label: ``full``, ``sliding_window(128)``) -> the indices of the
    groups of that kind, kinds in the order their first group comes (vLLM's group order). Groups
    of one kind hold the same tables (the coordinator runs them as one spec), so a run's figures
    and the start-up line speak of kinds."""
    out: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        out.setdefault(g.label(), []).append(i)
    return out


def is_hybrid(groups: Sequence[KVCacheGroup] | None) -> bool:
    """Whether a layout needs the group-aware manager (any windowed or mamba group); a single
    full group is every other model's one block table."""
    return bool(groups) and any(g.kind != "full" for g in groups)  # type: ignore[union-attr]


def has_mamba(groups: Sequence[KVCacheGroup] | None) -> bool:
    """Whether a layout has a mamba group (state layers: what prefix caching refuses)."""
    return bool(groups) and any(g.kind == "mamba" for g in groups)  # type: ignore[union-attr]


def blocks_for_one_sequence(
    groups: Sequence[KVCacheGroup],
    max_model_len: int,
    block_size: int,
    max_in_flight_tokens: int,
    state_blocks: int = 1,
) -> int:
    """Blocks one sequence of ``max_model_len`` tokens may hold at once over all groups (what
    vLLM checks the pool holds at start-up, ``max_memory_usage_bytes``): every block for a full
    group, the admission cap for a windowed one, ``state_blocks`` for a mamba one (1 without
    prefix caching; with it, ``mamba_cache_mode`` "align", 2 plus the prefill checkpoint
    blocks: ``mamba_state_blocks``)."""
    full = -(-max_model_len // block_size)
    total = 0
    for g in groups:
        if g.kind == "mamba":
            total += state_blocks
            continue
        cap = admission_cap(g.kind, g.window or 0, max_in_flight_tokens, max_model_len, block_size)
        total += full if cap < 0 else cap
    return total


def mamba_state_blocks(prefix_caching: bool, prefill_checkpoint_blocks: int) -> int:
    """``MambaSpec.max_memory_usage_bytes`` in pages: one state block without prefix caching
    (mode "none"); with it (mode "align") the running state, the one it is copied from and the
    prefill checkpoint blocks."""
    return 2 + prefill_checkpoint_blocks if prefix_caching else 1


__all__ = [
    "GroupKind",
    "KVCacheGroup",
    "admission_cap",
    "blocks_for_one_sequence",
    "group_kinds",
    "has_mamba",
    "is_hybrid",
    "mamba_state_blocks",
    "plan_groups",
    "skipped_tokens",
]
