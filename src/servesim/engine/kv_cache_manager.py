"""PagedAttention bookkeeping per request: slots, prefix-cache lookups and block content keys.

Mirrors ``vllm/v1/core/kv_cache_manager.py`` + ``single_type_kv_cache_manager.py`` for one
full-attention group. Blocks are identified by the content they hold: vLLM chains a hash over
the token ids of each full block; a trace has no token ids, so a block's key is derived from
what the trace says about its tokens:

* inside a ``prefix_group``'s shared prefix: (group, block index) -- equal for every member;
* covered by ``hash_ids``: a chain over the ids covering the block (equal ids at equal
  positions mean equal tokens, as in Mooncake traces);
* anything else (unique prompt tokens, generated tokens): (request, block index) -- unique, so
  only the request itself can hit it again, after a preemption. Generated tokens are modelled
  as distinct per request (sampling), so two identical prompts share only their prompt blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.engine.block_pool import BlockPool
from servesim.engine.request import PREEMPTED, WAITING, Request
from servesim.errors import InternalError

_MASK32 = (1 << 32) - 1
_MASK60 = (1 << 60) - 1


def unique_key(req_idx: int, block: int) -> int:
    return (((req_idx << 32) | block) << 2) | 1


def group_key(group: int, block: int) -> int:
    return (((group << 32) | block) << 2) | 2


def hash_id_bases(
    hash_ids: list[int], hash_block_size: int, block_size: int, prompt_len: int, lookahead: int = 0
) -> tuple[list[int], int, int]:
    """Content keys of the full prompt blocks that ``hash_ids`` fully describes, chained, in
    compact form: ``(bases, per, n)``, the key of block ``i < n`` being
    ``bases[i // per] + 4 * (i % per)`` (``hash_id_keys`` lists them).

    A key identifies the ids up to the block's last one and the block's place among them. When
    blocks tile the hash blocks (``hash_block_size`` a multiple of ``block_size``: Mooncake's 512
    and vLLM's 16) the ``per`` keys inside one hash block are consecutive: one hash, and one base,
    per id, whose keys the block pool files under that base (``BlockPool.register_hashed``).
    Otherwise every block has its own base (``per`` 1).

    With ``lookahead`` L > 0 (vLLM's ``num_hash_lookahead_tokens``: EAGLE/MTP with prefix
    caching) a block's hash also covers the L tokens after it, so a block is described only when
    the ids cover those too, and its key chains the ids up to the one holding its last lookahead
    token: the last block of one id depends on the next id, so every block has its own base."""
    covered = min(prompt_len, len(hash_ids) * hash_block_size)
    n = max(0, covered - lookahead) // block_size
    if hash_block_size % block_size == 0 and not lookahead:
        per = hash_block_size // block_size
        out: list[int] = []
        chain = 0
        for j in range(-(-n // per)):
            chain = hash((chain, hash_ids[j]))
            # keys are (x << 2) | 3: the low bits tell them from group and unique keys
            out.append((((chain & _MASK60) * per) << 2) | 3)
        return out, per, n
    keys: list[int] = []
    prev = 0
    for i in range(n):
        first = i * block_size
        last = first + block_size - 1 + lookahead
        ids = tuple(hash_ids[first // hash_block_size : last // hash_block_size + 1])
        prev = hash((prev, ids, first % hash_block_size)) & _MASK60
        keys.append((prev << 2) | 3)
    return keys, 1, n


def hash_id_keys(
    hash_ids: list[int], hash_block_size: int, block_size: int, prompt_len: int, lookahead: int = 0
) -> list[int]:
    """Every content key ``hash_id_bases`` describes, one per full block (for tests and tools)."""
    bases, per, n = hash_id_bases(hash_ids, hash_block_size, block_size, prompt_len, lookahead)
    return [bases[i // per] + 4 * (i % per) for i in range(n)]


def shared_id_prefixes(
    hash_ids: Sequence[Sequence[int] | None], prompt_len: Sequence[int], hash_block_size: int
) -> list[int]:
    """For each request, how many of its leading ``hash_ids`` some other request starts with too.

    A block's content key chains over every id up to it, so only blocks inside such a common
    prefix can ever be hit by another request; the rest hold content unique to the request (only
    the request itself can hit it again, after a preemption) and are keyed like unique prompt
    tokens, which spares hashing, publishing and evicting them one by one. Ids past the end of
    the prompt describe no token: not counted.
    """
    # Level by level, as a trie is walked: the requests that share their first j ids form a
    # group, which the (j+1)-th id splits; a part of two or more shares j+1 ids, and only its
    # requests with ids left take part in the next level (the work is the shared prefixes, not
    # every id). The parts are keyed by the id alone: no chained hash to build per request.
    n = len(hash_ids)
    if len(prompt_len) != n:
        raise InternalError(f"{n} hash_ids lists for {len(prompt_len)} prompts")
    out = [0] * n
    width = [0] * n  # ids describing tokens of the prompt
    alive: list[int] = []
    for i in range(n):
        ids = hash_ids[i]
        if ids is not None:
            w = min(len(ids), -(-prompt_len[i] // hash_block_size))
            if w > 0:
                width[i] = w
                alive.append(i)
    groups = [alive] if len(alive) >= 2 else []
    j = 0
    while groups:
        deeper: list[list[int]] = []
        j += 1  # the prefix length the parts of this level share
        for g in groups:
            parts: dict[int, list[int]] = {}
            for i in g:
                x = hash_ids[i][j - 1]  # type: ignore[index]  # alive: ids not None
                part = parts.get(x)
                if part is None:
                    parts[x] = [i]
                else:
                    part.append(i)
            for part in parts.values():
                if len(part) >= 2:
                    going: list[int] = []
                    for i in part:
                        out[i] = j
                        if j < width[i]:
                            going.append(i)
                    if len(going) >= 2:
                        deeper.append(going)
        groups = deeper
    return out


class KVCacheManager:
    """Allocates, caches and frees the KV blocks of requests in one block pool."""

    __slots__ = (
        "block_size",
        "caching",
        "full_sequence_must_fit",
        "hash_lookahead",
        "lookahead",
        "max_model_len",
        "pool",
        "watermark_blocks",
    )

    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        max_model_len: int,
        watermark: float,
        full_sequence_must_fit: bool = True,
    ) -> None:
        self.pool = pool
        self.full_sequence_must_fit = full_sequence_must_fit
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.caching = pool.enable_caching
        self.watermark_blocks = int(watermark * pool.num_gpu_blocks)
        # vLLM's num_lookahead_tokens: slots a drafter with its own KV writes past the scheduled
        # tokens (speculative decoding; 0 otherwise).
        self.lookahead = 0
        # vLLM's num_hash_lookahead_tokens: with an EAGLE/MTP drafter and prefix caching each
        # block's hash covers the next token too (the drafter's KV at the block's last position
        # reads it), so a block is shared only if that token is, and is hashed only once it exists.
        self.hash_lookahead = 0

    # -- content keys ---------------------------------------------------------------------
    def block_key(self, r: Request, i: int) -> int:
        """Content key of the request's full block ``i`` (tokens [i*B, (i+1)*B))."""
        hk = r.hash_keys
        if hk is not None and i < r.num_shared_blocks:
            per = r.hash_per
            return hk[i // per] + 4 * (i % per)
        if r.group >= 0 and (i + 1) * self.block_size + self.hash_lookahead <= r.prefix_len:
            return group_key(r.group, i)
        return unique_key(r.idx, i)

    def init_request(self, r: Request) -> None:
        """Derive ``r``'s block content keys for this replica's block size, and how many of its
        leading blocks hold content other requests may share."""
        if r.hash_ids is not None and r.hash_block_size:
            r.hash_keys, r.hash_per, r.num_shared_blocks = hash_id_bases(
                r.hash_ids, r.hash_block_size, self.block_size, r.prompt_len, self.hash_lookahead
            )
        elif r.group >= 0:
            shared = r.prefix_len - self.hash_lookahead
            r.num_shared_blocks = shared // self.block_size if shared > 0 else 0

    def is_cached(self, r: Request, i: int) -> bool:
        """Whether the prefix cache holds the content of ``r``'s full block ``i``."""
        hk = r.hash_keys
        if hk is not None and i < r.num_shared_blocks:
            per = r.hash_per
            rec = self.pool.hashed.get(hk[i // per])
            return rec is not None and rec[i % per] != 0
        return self.block_key(r, i) in self.pool.cached

    # -- prefix cache ---------------------------------------------------------------------
    def lookup(self, r: Request) -> list[int]:
        """Longest chain of cached full blocks, capped so the last token is always computed.

        Blocks keyed by ``hash_ids`` are looked up one hash id at a time (``BlockPool.hashed``:
        the blocks of one id's ``per`` keys), the others one key at a time."""
        if not self.caching or (r.num_shared_blocks == 0 and r.num_preemptions == 0):
            return []  # all blocks unique to a request that never ran: nothing can hit
        n = (r.prompt_len + r.num_output - 1) // self.block_size
        hit: list[int] = []
        hk = r.hash_keys
        if hk is not None:
            m = r.num_shared_blocks
            if m > n:
                m = n
            if m > 0:
                hashed = self.pool.hashed
                per = r.hash_per
                for j in range(-(-m // per)):
                    rec = hashed.get(hk[j])
                    if rec is None:
                        return hit
                    lim = m - j * per
                    if lim > per:
                        lim = per
                    if rec[per] == per:  # every key of the id cached
                        hit.extend(rec[:lim])
                        continue
                    for k in range(lim):
                        hb = rec[k]
                        if not hb:
                            return hit
                        hit.append(hb)
            if r.num_preemptions == 0:
                return hit  # the blocks past the hash_ids are the request's own: never published
        get = self.pool.cached.get
        for i in range(len(hit), n):
            b = get(self.block_key(r, i))
            if b is None:
                break
            hit.append(b)
        return hit

    def cache_blocks(self, r: Request, num_tokens: int) -> None:
        """Mark every block that ``num_tokens`` tokens fill as hashed (vLLM does it at schedule
        time). Blocks with shareable content are published in the hash table right away; blocks
        only this request could hit are published only if it is preempted (``free_preempted``).
        With a hash lookahead a block is hashed only once the tokens after it exist."""
        if self.hash_lookahead:
            known = r.prompt_len + r.num_output - self.hash_lookahead
            if num_tokens > known:
                num_tokens = known
        full = num_tokens // self.block_size
        start = r.num_cached_blocks
        if full <= start:
            return
        shared = r.num_shared_blocks
        if start < shared:
            end = full if full < shared else shared
            hk = r.hash_keys  # shared blocks are keyed by hash_ids or else by the prefix group
            if hk is not None:
                self.pool.register_hashed(r.blocks, start, end, hk, r.hash_per)
            else:
                self.pool.register(r.blocks[start:end], [group_key(r.group, i) for i in range(start, end)])
            r.num_live_blocks = end
        r.num_cached_blocks = full

    # -- allocation -----------------------------------------------------------------------
    def blocks_needed_running(self, r: Request, n: int) -> int:
        need = -(-min(r.num_computed + n, self.max_model_len) // self.block_size) - len(r.blocks)
        return need if need > 0 else 0

    def allocate_running(self, r: Request, n: int) -> bool:
        """``allocate_slots`` for a request already in the running list (no prefix lookup)."""
        need = -(-min(r.num_computed + n + self.lookahead, self.max_model_len) // self.block_size) - len(
            r.blocks
        )
        if need > 0:
            pool = self.pool
            if need > pool.num_free:
                return False
            r.blocks.extend(pool.get_new_blocks(need))
        if self.caching:
            t = r.num_computed + n
            nt = r.prompt_len + r.num_output
            self.cache_blocks(r, t if t < nt else nt)
        return True

    def admission_room(self, r: Request, hit: list[int], num_held: int, has_running: bool) -> int:
        """Free blocks a waiting request may take in ``allocate_slots``; negative: none.

        ``hit`` are the cached blocks it takes from the prefix cache: those sitting in the free
        queue are revived, so they do not count; while others run, the watermark is kept back.
        With ``scheduler_reserve_full_isl`` the whole sequence must fit beyond the ``num_held``
        blocks it starts from (a gate that reserves nothing): when it does not, -1.
        """
        pool = self.pool
        room = pool.num_free
        if hit:
            room -= pool.num_evictable_among(hit)
        if has_running and r.status in (WAITING, PREEMPTED):
            room -= self.watermark_blocks
        if room < 0:
            return -1
        if self.full_sequence_must_fit:
            mml = self.max_model_len
            num_tokens = r.prompt_len + r.num_output
            beyond = -(-(num_tokens if num_tokens < mml else mml) // self.block_size) - num_held
            if (beyond if beyond > 0 else 0) > room:
                return -1
        return room

    def allocate_slots(
        self,
        r: Request,
        num_new_tokens: int,
        new_computed_blocks: list[int],
        has_running: bool,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> bool:
        """vLLM's ``allocate_slots`` for a request admitted from a queue; False if it does not fit.

        Blocks for its computed tokens (``r.num_computed``: those of a request that already holds
        blocks, its KV loaded; ``new_computed_blocks``: a fresh request's prefix hit, revived;
        ``num_external_computed_tokens``: tokens a KV connector loads, or KV migrated in from a
        lost replica) and for ``num_new_tokens`` to compute, plus the drafter's lookahead. With
        ``scheduler_reserve_full_isl`` (vLLM's default) the whole sequence must fit in free
        blocks, but that check is only a gate: it reserves nothing, so later steps can still run
        out of blocks and preempt (the reference's Example C). An asynchronous load
        (``delay_cache_blocks``: vLLM's P/D and offload loads) allocates no lookahead, must leave
        ``reserved_blocks`` free for the prefills in flight, and hashes its blocks only when the
        load has finished (the scheduler's ``_update_waiting_for_remote_kv``).
        """
        hit = new_computed_blocks
        num_hit = len(hit)
        held = len(r.blocks)
        room = self.admission_room(r, hit, held + num_hit, has_running)
        if room < 0:
            return False
        pool = self.pool
        bs = self.block_size
        mml = self.max_model_len
        computed = r.num_computed + num_hit * bs + num_external_computed_tokens
        if computed > mml:
            computed = mml
        total = computed + num_new_tokens
        slots = total if delay_cache_blocks else total + self.lookahead
        more = -(-(slots if slots < mml else mml) // bs) - held - num_hit
        if (more if more > 0 else 0) > room - reserved_blocks:
            return False
        if num_hit:
            pool.touch(hit)
            r.blocks = hit
            r.num_cached_blocks = r.num_live_blocks = num_hit
            if more > 0:
                hit.extend(pool.get_new_blocks(more))
        elif held:
            if more > 0:
                r.blocks.extend(pool.get_new_blocks(more))
        else:
            r.blocks = pool.get_new_blocks(more)
            r.num_cached_blocks = r.num_live_blocks = 0
        if self.caching and not delay_cache_blocks:
            num_tokens = r.prompt_len + r.num_output
            self.cache_blocks(r, total if total < num_tokens else num_tokens)
        return True

    def free(self, r: Request) -> None:
        """Return a finished request's blocks, tail first, so its prefix is evicted last."""
        if r.blocks:
            self.pool.free(r.blocks, r.num_live_blocks, r.num_cached_blocks)
        r.blocks = []
        r.num_cached_blocks = r.num_live_blocks = 0

    def aligned_split(self, r: Request, n: int, start: int) -> int:
        """The tokens of a chunk of ``n`` from token ``start`` that the mamba groups' block
        alignment lets run (``HybridKVCacheManager``); one table: all of them (never called)."""
        return n

    def new_step_starts(self) -> None:
        """A step is being scheduled (``HybridKVCacheManager`` forgets the states published in the
        last one); one table: nothing to do (never called)."""

    def free_preempted(self, r: Request) -> None:
        """Free a preempted request's blocks, publishing its hashed blocks first: it will look
        them up when it is re-admitted (whatever has not been evicted by then is reused)."""
        if self.caching:
            lo, hi = r.num_live_blocks, r.num_cached_blocks
            hk = r.hash_keys
            if hk is not None and lo < r.num_shared_blocks:
                mid = hi if hi < r.num_shared_blocks else r.num_shared_blocks
                self.pool.register_hashed(r.blocks, lo, mid, hk, r.hash_per)
                lo = mid
            if lo < hi:
                self.pool.register(r.blocks[lo:hi], [self.block_key(r, i) for i in range(lo, hi)])
            r.num_live_blocks = hi
        self.free(r)
