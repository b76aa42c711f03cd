"""The KV cache of a hybrid model: one block table per group over one pool, as vLLM 0.33's
``HybridKVCacheCoordinator`` runs it (``vllm/v1/core/kv_cache_coordinator.py``).

A request's ``blocks`` here is its list of per-group block tables (``KVCacheBlocks``' currency:
one list per group, block 0 the null block standing for a block freed or never needed). Each
allocation first frees the blocks the processed tokens left behind (``remove_skipped_blocks``:
out of a sliding window, before the current chunk; they go back to the pool tail first and are
replaced by the null block), then counts what every group needs
(``get_num_blocks_to_allocate``), then takes the hit's blocks and new ones group by group. Full
blocks are published per group under the block's content key and the group (vLLM's
``BlockHashWithGroupId``). A prefix hit is the coordinator's common length: the full-attention
groups' longest chain of cached blocks, then each other kind's own rule within it (a sliding
window needs the window's last blocks cached, chunked local attention the current chunk's),
until every kind agrees. A mamba group's table is one state block for the request's whole life
(``MambaManager`` with ``mamba_cache_mode`` "none": its block size is ``max_model_len``), taken
at the request's first allocation with the other groups' blocks and freed with them; with prefix
caching (mode "align") a state per block boundary instead (``kv_mamba_align``). Pure full-
attention models never come here: their one table runs through ``KVCacheManager``, unchanged.

Each group's share of the pool is counted as blocks change hands (``group_used``): every pool
call that moves blocks in or out of the free queue is made for one group, and the change in the
pool's free count is that group's. The groups' counts add up to the pool's blocks in use
(vLLM's ``kv_cache_usage`` before the division), which the engine records per step so a run can
say how much of the cache each kind of layer held (docs/engine.md).

This class subclasses ``KVCacheManager`` so the scheduler calls it through the same methods.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.engine import kv_mamba_align as _align
from servesim.engine.block_pool import BlockPool
from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_groups import KVCacheGroup, admission_cap, skipped_tokens
from servesim.engine.request import PREEMPTED, WAITING, Request
from servesim.errors import InternalError

#: Group ids are folded into content keys: ``key * _GROUP_SLOTS + group``.
_GROUP_SLOTS = _align.GROUP_SLOTS

Hit = _align.Hit


class HybridKVCacheManager(KVCacheManager):
    """Allocates, caches and frees a request's blocks in every KV cache group."""

    __slots__ = (
        "_align",
        "_caps",
        "_checkpoints",
        "_ckpt_blocks",
        "_junction",
        "_kinds",
        "_last_state",
        "_quiet",
        "_retired",
        "_split_limit",
        "_state",
        "_step_cached",
        "_tracked",
        "_windowed",
        "_windows",
        "group_used",
        "spec_groups",
    )

    aligned_split = _align.aligned_split
    _state_hit = _align.state_hit
    _checkpoint_valid = _align.checkpoint_valid
    _state_to_allocate = _align.state_to_allocate
    _remove_state = _align.remove_state
    _new_state = _align.new_state

    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        max_model_len: int,
        watermark: float,
        full_sequence_must_fit: bool,
        groups: Sequence[KVCacheGroup],
        max_in_flight_tokens: int,
        prefill_checkpoint_blocks: int = 0,
    ) -> None:
        super().__init__(pool, block_size, max_model_len, watermark, full_sequence_must_fit)
        if len(groups) > _GROUP_SLOTS:
            raise InternalError(f"{len(groups)} KV cache groups; at most {_GROUP_SLOTS}")
        self._kinds = [g.kind for g in groups]
        self._windows = [g.window or 0 for g in groups]
        self._windowed = [i for i, g in enumerate(groups) if g.kind in ("sliding_window", "chunked_local")]
        # Mamba groups without prefix caching (mode "none"): one state block per request whatever
        # its length (cap 1, always applied). With prefix caching (mode "align", ``_align``) a
        # mamba group's table is indexed by block like an attention one: the state after token
        # ``(i + 1) * B`` lives in block ``i``, and the request keeps only the running state and
        # the one it was copied from (``MambaManager`` in "align" mode).
        mamba = [g.kind == "mamba" for g in groups]
        align = pool.enable_caching and any(mamba)
        self._state = [m and not align for m in mamba]
        self._align = [m and align for m in mamba]
        # Align mode's per-request bookkeeping (the same for every mamba group, so kept once):
        # ``_num_retired_blocks`` (blocks below it were freed already) and
        # ``last_state_block_idx`` (the state block the running one was copied from).
        self._retired: dict[int, int] = {}
        self._last_state: dict[int, int] = {}
        # ``cached_blocks_this_step``: the content keys (with their group) mamba groups published
        # in the step being scheduled; a hit ending on one waits for the next step.
        self._step_cached: set[int] = set()
        # The scheduler's prefill chunk limit (max_num_scheduled_tokens, then the long-prefill
        # threshold), set by engine_setup for ``aligned_split``.
        self._split_limit = max_in_flight_tokens
        # ``MambaSpec.num_prefill_checkpoint_blocks`` (0 or 1): where the GDN prefill kernel can
        # export the state at the prompt's last block boundary from inside a chunk (FlashInfer),
        # the last prefill chunk is not cut there; a block is reserved for that state instead.
        # ``_checkpoints``: the requests whose allocation this step reserves one, and its index.
        self._ckpt_blocks = prefill_checkpoint_blocks if align else 0
        self._checkpoints: dict[int, int] = {}
        self._caps = [
            admission_cap(g.kind, g.window or 0, max_in_flight_tokens, max_model_len, block_size)
            for g in groups
        ]
        # The coordinator's spec groups: groups of one spec are looked up together, full first.
        specs: dict[KVCacheGroup, list[int]] = {}
        for i, g in enumerate(groups):
            specs.setdefault(g, []).append(i)
        self.spec_groups = sorted(specs.items(), key=lambda item: item[0].kind != "full")
        # vLLM's ``num_cached_block``: requests whose tables it tracks as running (set by a hit's
        # adoption or by caching a full block), with their hashed block count.
        self._tracked: dict[int, int] = {}
        # ``request.shared_prefix_boundary``: the longest single group's hit, when a
        # sliding-window group's was shorter (its last lookup's), whose window it then keeps.
        self._junction: dict[int, int] = {}
        # Blocks each group holds out of the free queue (held by a request, or shared by several):
        # the free count's changes, attributed to the group each pool call is made for. An
        # evictable cached block (ref 0) counts as free, as vLLM's usage counts it.
        self.group_used = [0] * len(groups)
        # A running request's quiet span (``_note_quiet``): its block tables (the list object, so
        # a free or a re-admission ends the span) and the computed-token, slot and cached-token
        # bounds below which ``allocate_running`` would neither free, allocate nor cache a block.
        self._quiet: dict[int, tuple[object, int, int, int]] = {}

    @property
    def num_groups(self) -> int:
        return len(self._kinds)

    def is_state_group(self, g: int) -> bool:
        """Whether group ``g`` is a mamba group without prefix caching (one state block per
        request)."""
        return self._state[g]

    def is_align_group(self, g: int) -> bool:
        """Whether group ``g`` is a mamba group with prefix caching (``mamba_cache_mode``
        "align": a state block per block boundary, at most two held at once)."""
        return self._align[g]

    @property
    def checkpoint_blocks(self) -> int:
        """Blocks reserved per mamba group for a prefill checkpoint (0 or 1; 0 without "align")."""
        return self._ckpt_blocks

    @property
    def mamba_align(self) -> bool:
        """Whether the scheduler cuts prefill chunks at block boundaries for the mamba groups."""
        return any(self._align)

    def set_split_limit(self, max_scheduled: int, threshold: int) -> None:
        """``_mamba_block_aligned_split``'s chunk limit: ``max_num_scheduled_tokens``, lowered to
        the (static) long-prefill threshold when one is set."""
        self._split_limit = min(max_scheduled, threshold) if threshold > 0 else max_scheduled

    def new_step_starts(self) -> None:
        """A new step is being scheduled: the mamba states published in the last one are ready."""
        if self._step_cached:
            self._step_cached.clear()

    def _cached(self, r: Request, i: int, ids: list[int]) -> tuple[int, ...] | None:
        """The cached blocks of ``r``'s block ``i`` in every group of ``ids``, or None."""
        key = self.block_key(r, i) * _GROUP_SLOTS
        get = self.pool.cached.get
        out = []
        for g in ids:
            b = get(key + g)
            if b is None:
                return None
            out.append(b)
        return tuple(out)

    def _full_hit(self, r: Request, limit: int, ids: list[int]) -> list[tuple[int, ...]]:
        out = []
        for i in range(limit // self.block_size):
            got = self._cached(r, i, ids)
            if got is None:
                break
            out.append(got)
        return out

    def _window_hit(self, r: Request, limit: int, ids: list[int], window: int) -> list[tuple[int, ...]]:
        """``SlidingWindowManager.find_longest_cache_hit``: from the right, the first run of
        ``ceil((window - 1) / B)`` cached blocks ends the hit (nulls before it); without one, the
        run that reaches block 0."""
        bs = self.block_size
        need = -(-(window - 1) // bs)
        m = limit // bs
        null = (0,) * len(ids)
        out: list[tuple[int, ...]] = [null] * m
        run = 0
        for i in range(m - 1, -1, -1):
            got = self._cached(r, i, ids)
            if got is None:
                run = 0
                continue
            out[i] = got
            run += 1
            if run >= need:
                del out[i + run :]
                return out
        del out[run:]
        return out

    def _chunk_hit(self, r: Request, limit: int, ids: list[int], chunk: int) -> list[tuple[int, ...]]:
        """``ChunkedLocalAttentionManager.find_longest_cache_hit``: blocks before the chunk
        holding token ``limit`` count as hit (nulls), then cached blocks up to the first miss."""
        bs = self.block_size
        start = (limit // chunk * chunk) // bs if limit > 0 else 0
        out: list[tuple[int, ...]] = [(0,) * len(ids)] * start
        for i in range(start, limit // bs):
            got = self._cached(r, i, ids)
            if got is None:
                break
            out.append(got)
        return out

    def lookup(self, r: Request) -> list:  # type: ignore[type-arg]
        """The coordinator's ``find_longest_cache_hit``: one tuple per hit block, one block (or
        the null block) per group."""
        self._junction.pop(r.idx, None)
        if not self.caching or (r.num_shared_blocks == 0 and r.num_preemptions == 0):
            return []
        length = r.prompt_len + r.num_output - 1
        longest = 0
        per: dict[int, list[tuple[int, ...]]] = {}
        simple = len(self.spec_groups) == 2 and self.spec_groups[0][0].kind == "full"
        while True:
            cur = length
            for spec, ids in self.spec_groups:
                if spec.kind == "full":
                    if id(spec) not in per:
                        per[id(spec)] = self._full_hit(r, cur, ids)
                    got = per[id(spec)]
                    cur = min(cur, len(got) * self.block_size)
                    longest = max(longest, cur)
                    continue
                if spec.kind == "sliding_window":
                    got = self._window_hit(r, cur, ids, spec.window or 0)
                elif spec.kind == "mamba":
                    got = self._state_hit(r, cur, ids)
                else:
                    got = self._chunk_hit(r, cur, ids, spec.window or 0)
                per[id(spec)] = got
                cur = len(got) * self.block_size
                longest = max(longest, cur)
            if cur >= length:
                break
            length = cur
            if simple:
                break
        if longest > length:  # a shared prefix a sliding-window group has not cached: pin it
            self._junction[r.idx] = longest
        n = length // self.block_size
        hit: list[list[int]] = [[] for _ in self._kinds]
        for spec, ids in self.spec_groups:
            got = per.get(id(spec), [])[:n] if spec.kind == "full" else per.get(id(spec), [])
            for j, g in enumerate(ids):
                hit[g] = [t[j] for t in got]
        return [tuple(col) for col in zip(*hit, strict=True)] if n else []

    def is_cached(self, r: Request, i: int) -> bool:
        """Whether the first group's cache holds ``r``'s block ``i`` (a router's view)."""
        return self.block_key(r, i) * _GROUP_SLOTS in self.pool.cached

    def _retained(self, r: Request, g: int) -> set[int] | None:
        """The blocks a sliding-window group publishes (``reachable_block_mask`` under vLLM's
        default ``prefix_cache_retention_interval`` 0): only the window's blocks ending at a
        boundary a later request can resume at, the prompt's last token and the shared-prefix
        junction its lookup found; None (all) for the other kinds, which cache densely."""
        bs = self.block_size
        if self._align[g]:  # ``MambaManager.reachable_block_mask``: the states at those boundaries
            return {b // bs - 1 for b in (r.prompt_len - 1, self._junction.get(r.idx, 0)) if b >= bs}
        if self._kinds[g] != "sliding_window":
            return None
        need = -(-(self._windows[g] - 1) // bs)
        keep: set[int] = set()
        for boundary in (r.prompt_len - 1, self._junction.get(r.idx, 0)):
            if boundary > 0:
                end = boundary // bs
                keep.update(range(max(0, end - need), end))
        return keep

    def cache_blocks(self, r: Request, num_tokens: int) -> None:
        """Publish, in every group, the blocks ``num_tokens`` tokens fill (null blocks skipped,
        and a sliding-window group's unreachable blocks: they stay unhashed)."""
        full = num_tokens // self.block_size
        start = self._tracked.get(r.idx, 0)
        if full <= start:
            return
        tables: list[list[int]] = r.blocks  # type: ignore[assignment]
        keys = [self.block_key(r, i) * _GROUP_SLOTS for i in range(start, full)]
        for g, table in enumerate(tables):
            if self._state[g]:
                continue  # a state block is never published ("none": no prefix caching)
            keep = self._retained(r, g)
            blocks = []
            gkeys = []
            for i in range(start, full):
                b = table[i]
                if b and (keep is None or i in keep):
                    blocks.append(b)
                    gkeys.append(keys[i - start] + g)
            self.pool.register(blocks, gkeys)
            if self._align[g]:
                self._step_cached.update(gkeys)
        self._tracked[r.idx] = full
        r.num_cached_blocks = full

    def _free_blocks(self, blocks: list[int], g: int) -> None:
        """``free_blocks(reversed(blocks))`` of group ``g``'s blocks: the unhashed ones to the
        queue's head, the tail first; the hashed ones, tail first, behind the cached blocks
        already queued. The group no longer holds those whose last holder this was."""
        pool = self.pool
        content = pool.content
        free = pool.num_free
        hashed = [b for b in blocks if content[b] is not None]
        if len(hashed) == len(blocks):
            pool.free(blocks, len(blocks), len(blocks))
        else:
            pool.free(hashed + [b for b in blocks if content[b] is None], len(hashed), len(hashed))
        self.group_used[g] -= pool.num_free - free

    # -- allocation -----------------------------------------------------------------------
    def _to_allocate(self, r: Request, g: int, num_tokens: int, hit: Hit, computed: int, cap: bool) -> int:
        """One group's ``get_num_blocks_to_allocate``."""
        bs = self.block_size
        if self._align[g]:
            return self._state_to_allocate(r, g, num_tokens, hit, cap)
        required = -(-num_tokens // bs)
        if (cap or self._state[g]) and 0 <= self._caps[g] < required:
            required = self._caps[g]
        held = len(r.blocks[g]) if r.blocks else 0  # type: ignore[arg-type]
        if r.idx in self._tracked:
            return required - held if required > held else 0
        skipped = skipped_tokens(self._kinds[g], self._windows[g], computed) // bs
        local = len(hit) + held
        new = required - (skipped if skipped > local else local)
        first = skipped - held if skipped > held else 0
        ref = self.pool.ref
        evictable = sum(1 for t in hit[first:] if t[g] and ref[t[g]] == 0)
        return (new if new > 0 else 0) + evictable

    def _remove_skipped(self, r: Request, computed: int) -> None:
        """``remove_skipped_blocks``: free each windowed group's blocks the next token no longer
        attends to, last first, stopping at a null block (those before it went earlier), and each
        align-mode mamba group's states before the current one."""
        if not r.blocks:
            return
        bs = self.block_size
        if self.mamba_align:
            retired = self._retired.get(r.idx, 0)
            for g, table in enumerate(r.blocks):
                if self._align[g]:
                    self._retired[r.idx] = retired  # each group starts from the same count
                    self._remove_state(r, g, table, computed)  # type: ignore[arg-type]
        for g in self._windowed:
            table = r.blocks[g]
            k = skipped_tokens(self._kinds[g], self._windows[g], computed) // bs
            if k <= 0 or (k <= len(table) and not table[k - 1]):  # type: ignore[arg-type,index]
                continue  # nothing skipped, or freed already
            k = min(k, len(table))  # type: ignore[arg-type]
            j = k
            while j > 0 and table[j - 1]:  # type: ignore[index]
                j -= 1
            if j == k:
                continue
            self._free_blocks(table[j:k], g)  # type: ignore[index]
            table[j:k] = [0] * (k - j)  # type: ignore[index]

    def _skipped(self, g: int, computed: int) -> int:
        """Group ``g``'s ``get_num_skipped_tokens``: an align-mode mamba group needs only the
        state after the last computed token (computed - 1 skipped)."""
        if self._align[g]:
            return computed - 1 if computed > 1 else 0
        return skipped_tokens(self._kinds[g], self._windows[g], computed)

    def _add_computed(self, r: Request, hit: Hit, computed: int) -> None:
        """``allocate_new_computed_blocks``: every group takes its hit (the blocks its window
        skips as null blocks), then blocks for the tokens loaded from elsewhere."""
        bs = self.block_size
        tables: list[list[int]] = [[] for _ in self._kinds]
        for g, table in enumerate(tables):
            skip = self._skipped(g, computed) // bs
            mine = [t[g] for t in hit[skip:]]
            free = self.pool.num_free
            self.pool.touch([b for b in mine if b])
            self.group_used[g] += free - self.pool.num_free  # the hit blocks that were evictable
            table.extend([0] * skip)
            table.extend(mine)
        r.blocks = tables  # type: ignore[assignment]
        self._tracked[r.idx] = len(hit)
        r.num_cached_blocks = len(hit)
        if computed > len(hit) * bs:  # external tokens: blocks for those inside each window
            for g, table in enumerate(tables):
                skip = self._skipped(g, computed) // bs
                if skip > len(table):
                    table.extend([0] * (skip - len(table)))
                more = -(-computed // bs) - len(table)
                if more > 0:
                    table.extend(self.pool.get_new_blocks(more))
                    self.group_used[g] += more

    def _allocate_new(self, r: Request, num_tokens: int) -> None:
        need = -(-num_tokens // self.block_size)
        if not r.blocks:
            r.blocks = [[] for _ in self._kinds]  # type: ignore[misc]
        for g, table in enumerate(r.blocks):
            if self._align[g]:
                if need > len(table) or r.idx in self._checkpoints:  # type: ignore[arg-type]
                    self._new_state(r, g, table, need)  # type: ignore[arg-type]
                continue
            more = (1 if self._state[g] and need > 1 else need) - len(table)  # type: ignore[arg-type]
            if more > 0:
                table.extend(self.pool.get_new_blocks(more))  # type: ignore[attr-defined]
                self.group_used[g] += more

    def allocate_running(self, r: Request, n: int) -> bool:
        """``allocate_slots`` for a running request: no hit, no watermark, no admission gate; each
        group needs ``required - held`` blocks (what ``get_num_blocks_to_allocate`` comes to when
        every skipped block lies inside the table, as a running request's always do)."""
        mml = self.max_model_len
        bs = self.block_size
        computed = r.num_computed if r.num_computed < mml else mml
        slots = computed + n + self.lookahead
        quiet = self._quiet.get(r.idx)
        if (
            quiet is not None
            and quiet[0] is r.blocks
            and computed < quiet[1]
            and (slots if slots < mml else mml) <= quiet[2]
        ):
            t = computed + n
            nt = r.prompt_len + r.num_output
            if not self.caching or (t if t < nt else nt) < quiet[3]:
                return True  # 15 decode steps in 16: nothing to free, allocate or cache
        self._remove_skipped(r, computed)
        required = -(-(slots if slots < mml else mml) // bs)
        tables: list[list[int]] = r.blocks  # type: ignore[assignment]
        state = self._state
        align = self._align
        need = 0
        for g, table in enumerate(tables):
            if align[g]:  # (computed + n: vLLM allocates no lookahead slots for a mamba group)
                need += self._state_to_allocate(r, g, computed + n, [], False)
                continue
            req = 1 if state[g] and required > 1 else required
            if req > len(table):
                need += req - len(table)
        if need:
            pool = self.pool
            if need > pool.num_free:
                return False
            used = self.group_used
            for g, table in enumerate(tables):
                if align[g]:
                    if required > len(table) or r.idx in self._checkpoints:
                        self._new_state(r, g, table, required)
                    continue
                req = 1 if state[g] and required > 1 else required
                if req > len(table):
                    used[g] += req - len(table)
                    table.extend(pool.get_new_blocks(req - len(table)))
        if self.caching:
            t = computed + n
            nt = r.prompt_len + r.num_output
            t = t if t < nt else nt
            if t // bs > self._tracked.get(r.idx, 0):
                self.cache_blocks(r, t)
        self._note_quiet(r, computed)
        return True

    def _note_quiet(self, r: Request, computed: int) -> None:
        """Record how far ``r`` can run before ``allocate_running`` has work again: the first
        computed count at which a windowed group skips another block (a sliding window's
        ``computed - window + 1`` reaching the next block, a chunk's next boundary), the slots
        its tables hold, and the token count whose block would be the next to cache. Below all
        three the call is a no-op (vLLM's ``allocate_slots`` finds 0 blocks to allocate, none to
        skip, none to cache), so it returns at once: 3.6 million calls were 70 % of a gpt-oss
        replay's time (benchmarks/published.py). The bounds err low, never high: a free or a
        re-admission replaces ``r.blocks`` (the span ends), and blocks allocated or cached
        elsewhere only make the real bounds higher."""
        bs = self.block_size
        until = self.max_model_len + 1
        for g in self._windowed:
            w = self._windows[g]
            if self._kinds[g] == "sliding_window":
                k = computed - w + 1
                nxt = ((k // bs if k > 0 else 0) + 1) * bs + w - 1
            else:  # chunked local: the next chunk boundary
                nxt = (computed // w + 1) * w
            if nxt < until:
                until = nxt
        if self.mamba_align:  # the next computed count at which a mamba state is left behind
            nxt = ((computed - 1) // bs + 1) * bs + 1 if computed > 1 else bs + 1
            if nxt < until:
                until = nxt
        tables: list[list[int]] = r.blocks  # type: ignore[assignment]
        held = self.max_model_len if tables else 0  # a mamba group's one state block holds any length
        for g, table in enumerate(tables):
            if not self._state[g]:
                held = min(held, len(table) * bs)
            elif not table:
                held = 0
        cached = (self._tracked.get(r.idx, 0) + 1) * bs
        self._quiet[r.idx] = (r.blocks, until, held, cached)

    def blocks_needed_running(self, r: Request, n: int) -> int:
        raise InternalError("the decode group's fast path does not run hybrid KV cache groups")

    def allocate_slots(
        self,
        r: Request,
        num_new_tokens: int,
        new_computed_blocks: list,  # type: ignore[type-arg]
        has_running: bool,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> bool:
        """vLLM's ``allocate_slots`` over the groups (see the module docstring)."""
        hit: Hit = new_computed_blocks
        bs = self.block_size
        mml = self.max_model_len
        pool = self.pool
        local = r.num_computed + len(hit) * bs
        computed = min(local + num_external_computed_tokens, mml)
        wm = self.watermark_blocks if has_running and r.status in (WAITING, PREEMPTED) else 0
        num_tokens = r.prompt_len + r.num_output
        groups = range(len(self._kinds))
        if self.full_sequence_must_fit and r.status in (WAITING, PREEMPTED):
            full = min(num_tokens, mml)
            need = sum(self._to_allocate(r, g, full, hit, computed, True) for g in groups)
            if need + wm > pool.num_free:
                return False
        slots = min(computed + num_new_tokens + self.lookahead, mml)
        self._remove_skipped(r, computed)
        total = local + num_external_computed_tokens
        need = sum(self._to_allocate(r, g, slots, hit, total, False) for g in groups)
        if need + wm > pool.num_free - reserved_blocks:
            return False
        if hit or num_external_computed_tokens:
            self._add_computed(r, hit, total)
        self._allocate_new(r, slots)
        if self.caching and not delay_cache_blocks:
            self.cache_blocks(r, min(computed + num_new_tokens, num_tokens))
        return True

    # -- freeing --------------------------------------------------------------------------
    def free(self, r: Request) -> None:
        """Every group's blocks back, group by group, each tail first (its null head left out)."""
        self._tracked.pop(r.idx, None)
        self._quiet.pop(r.idx, None)
        if self.mamba_align:
            self._retired.pop(r.idx, None)
            self._last_state.pop(r.idx, None)
            self._checkpoints.pop(r.idx, None)
        for g, table in enumerate(r.blocks or ()):
            j = 0
            while j < len(table) and not table[j]:  # type: ignore[arg-type,index]
                j += 1
            if j < len(table):  # type: ignore[arg-type]
                if self._align[g]:  # null blocks between the states: never pooled
                    self._free_blocks([b for b in table[j:] if b], g)  # type: ignore[index]
                else:
                    self._free_blocks(table[j:], g)  # type: ignore[index]
        r.blocks = []
        r.num_cached_blocks = r.num_live_blocks = 0

    def free_preempted(self, r: Request) -> None:
        """A preempted request's blocks are already published: freeing them keeps them cached."""
        self.free(r)

    @staticmethod
    def tables(r: Request) -> list[list[int]]:
        """``r``'s block table of each group (``r.blocks`` holds them for a hybrid model)."""
        return r.blocks  # type: ignore[return-value]

    def held_blocks(self, r: Request) -> list[int]:
        """The real blocks ``r`` holds, over all groups (for the invariant checks)."""
        return [b for table in r.blocks or () for b in table if b]  # type: ignore[attr-defined]


__all__ = ["HybridKVCacheManager"]
