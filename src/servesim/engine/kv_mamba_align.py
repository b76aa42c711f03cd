"""The mamba groups' "align" mode (``mamba_cache_mode`` "align", vLLM's default for a hybrid model
with prefix caching): the block-aligned prefill split, the state hit, and the state blocks'
allocation and freeing, as ``Scheduler._mamba_block_aligned_split`` and ``MambaManager`` run them.

Why a module of its own: these are ``HybridKVCacheManager``'s methods for one layer kind in one
mode (bound to it in its class body), kept apart so that the coordinator's module stays about the
groups every hybrid model has; they run only when mamba groups and prefix caching meet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import Request

if TYPE_CHECKING:
    from servesim.engine.kv_hybrid import HybridKVCacheManager

#: Group ids are folded into content keys: ``key * GROUP_SLOTS + group`` (``kv_hybrid``'s).
GROUP_SLOTS = 64

Hit = list[tuple[int, ...]]


def aligned_split(m: HybridKVCacheManager, r: Request, n: int, start: int) -> int:
    """vLLM's ``Scheduler._mamba_block_aligned_split`` for a chunk of ``n`` tokens from token
    ``start`` (computed ones and the prefix hit): a prefill chunk that does not finish the
    prefill ends at a block boundary (the worker writes the mamba state only at a chunk's
    end, and block ``i`` must hold the state after ``(i + 1) * B`` tokens), unless a block is
    wider than the chunk limit, when it advances within the block; it never runs past the
    next block boundary when it starts inside a block, past the last block boundary before
    the request's last token (the state a resend of the prompt hits), nor past a shared
    prefix junction the lookup found (its state is cached for the siblings). Returns the
    tokens to schedule, 0 when no aligned chunk fits. Without EAGLE, hash lookahead, prefix
    match units finer than a block or prefill checkpoint blocks (all refused beside mamba
    groups), vLLM's other stops never apply."""
    num_tokens = r.prompt_len + r.num_output
    prefill_end = r.prompt_len if r.prompt_len > num_tokens - 1 else num_tokens - 1
    if start >= prefill_end:
        return n
    bs = m.block_size
    last_cache = (num_tokens - 1) // bs * bs
    end = start + n
    internal = m._ckpt_blocks and end >= prefill_end and checkpoint_valid(m, start, end, prefill_end)
    if internal:  # the backend exports the prompt's checkpoint within this, the last, chunk
        last_cache = 0
    if end < prefill_end:
        aligned = end // bs * bs
        if aligned > start or bs <= m._split_limit:
            end = aligned
    stop = end
    if start % bs and not internal:
        nxt = (start // bs + 1) * bs
        if start < nxt < stop:
            stop = nxt
    if start < last_cache < stop:
        stop = last_cache
    junction = m._junction.get(r.idx, 0)
    if start < junction < end:
        floored = start + (junction - start) // bs * bs
        if start < floored < stop:
            stop = floored
    return stop - start if stop > start else 0


# -- prefix cache ---------------------------------------------------------------------


def state_hit(m: HybridKVCacheManager, r: Request, limit: int, ids: list[int]) -> list[tuple[int, ...]]:
    """``MambaManager.find_longest_cache_hit`` ("align"): from the right, the first block
    whose state every group of ``ids`` has cached ends the hit; the blocks before it are
    null blocks (a state block holds everything before it)."""
    null = (0,) * len(ids)
    for i in range(limit // m.block_size - 1, -1, -1):
        got = m._cached(r, i, ids)
        if got is not None:
            return [null] * i + [got]
    return []


def checkpoint_valid(m: HybridKVCacheManager, start: int, end: int, prefill_end: int) -> bool:
    """``is_mamba_prefill_checkpoint_valid`` for a query ``[start, end)`` and the checkpoint
    at the last block boundary before ``prefill_end`` (prefix match unit and checkpoint
    alignment both the block size): a block-aligned query that crosses it by a block."""
    bs = m.block_size
    ckpt = (prefill_end - 1) // bs * bs if prefill_end > 1 else 0
    return (
        start % bs == 0
        and -(-end // bs) - 2 > (start - 1) // bs
        and start + bs <= ckpt
        and start < ckpt < end
        and (ckpt - start) % bs == 0
    )


def state_to_allocate(
    m: HybridKVCacheManager, r: Request, g: int, num_tokens: int, hit: Hit, cap: bool
) -> int:
    """``MambaManager.get_num_blocks_to_allocate`` in "align" mode: one new state block when
    the tokens reach a block the table lacks (never more: only the block the state is copied
    into is new), plus the hit's evictable blocks. A hit ending on a state published in this
    very step cannot be used yet (the step that writes it has not run): more blocks than the
    pool holds, so the request waits."""
    if hit:
        last = hit[-1][g]
        if last and m.block_key(r, len(hit) - 1) * GROUP_SLOTS + g in m._step_cached:
            return m.pool.num_gpu_blocks + 1
    table: list[int] = r.blocks[g] if r.blocks else []  # type: ignore[assignment]
    new = -(-num_tokens // m.block_size) - len(hit) - len(table)
    ref = m.pool.ref
    evictable = sum(1 for t in hit if t[g] and ref[t[g]] == 0)
    ckpt = 0
    if m._ckpt_blocks:  # ``_needs_internal_checkpoint`` (this chunk ends the prefill)
        num = r.prompt_len + r.num_output
        prefill_end = r.prompt_len if r.prompt_len > num - 1 else num - 1
        idx = -(-num_tokens // m.block_size) - 2
        total = r.num_computed + len(hit) * m.block_size  # (no external tokens beside mamba)
        if (
            num_tokens >= prefill_end
            and idx >= 0
            and (idx >= len(table) or not table[idx])
            and checkpoint_valid(m, total, num_tokens, num_tokens)
        ):
            ckpt = 1
        if not cap:  # the step's own allocation, not the admission gate's full-sequence count
            if ckpt:
                m._checkpoints[r.idx] = idx
            else:
                m._checkpoints.pop(r.idx, None)
    return ((1 + ckpt if new > 1 + ckpt else new) if new > 0 else 0) + evictable


def remove_state(m: HybridKVCacheManager, r: Request, g: int, table: list[int], computed: int) -> None:
    """``MambaManager.remove_skipped_blocks`` in "align" mode: the states before the one
    after the last computed token are no longer needed (``get_num_skipped_tokens`` =
    computed - 1): free those not freed yet (``_num_retired_blocks`` on), last first, null
    blocks passed over; then the state the running one was copied from."""
    bs = m.block_size
    if computed - 1 > 0:
        k = (computed - 1) // bs
        if k > len(table):
            k = len(table)
        first = m._retired.get(r.idx, 0)
        if first < k:
            freed = [b for b in table[first:k] if b]
            if freed:
                m._free_blocks(freed, g)
                table[first:k] = [0] * (k - first)
            m._retired[r.idx] = k  # (set per group; all mamba groups agree)
    idx = m._last_state.get(r.idx)
    if idx is not None and idx < -(-computed // bs) - 1 and table[idx]:
        m._free_blocks([table[idx]], g)
        table[idx] = 0


def new_state(m: HybridKVCacheManager, r: Request, g: int, table: list[int], need: int) -> None:
    """``MambaManager.allocate_new_blocks`` in "align" mode, when the tokens reach block
    ``need - 1`` the table lacks: the state so far (the table's last block) is the one the
    new state is copied from (``last_state_block_idx``), the blocks in between are null
    blocks, and one new block holds the running state."""
    ckpt = 1 if r.idx in m._checkpoints else 0
    if len(table) > 0:
        m._last_state[r.idx] = len(table) - 1
    if len(table) < need - 1:  # (a checkpoint block, where reserved, takes the last slot)
        table.extend([0] * (need - 1 - ckpt - len(table)))
    more = need - len(table)
    if more > 0:
        table.extend(m.pool.get_new_blocks(more))
        m.group_used[g] += more
