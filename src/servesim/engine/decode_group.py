"""Fast path: running requests in steady decode, advanced lazily instead of one by one.

A request that decodes gets exactly one token per step until something happens to it (it
finishes, is preempted, or a step cannot serve every decode). Its state at step ``k`` is then
``computed = c0 + (k - s0)`` and ``outputs = o0 + (k - s0)`` from the values (c0, o0) recorded
when it joined at step ``s0``. The group keeps only aggregates that a step needs in O(1):

* how many members cross a block boundary at step ``k`` (they need a new block): a member
  needs one when ``computed % block_size == 0``, i.e. when ``k ≡ s0 - c0 (mod block_size)``,
  so members are counted in ``block_size`` buckets;
* the sum of members' context lengths (for the step-time model);
* when each member finishes (a heap keyed by finish step, then admission order = running order).

Blocks a member needs are popped from the pool in the step that needs them (so the free count,
evictions and LRU order are exactly vLLM's) into ``limbo``; they are handed to the member when
it is materialised. Which physical block goes to which request does not matter: blocks are
interchangeable until they carry content, and member blocks only ever carry content unique to
their request. The naive engine (``fast=False``) never uses this class; a property test checks
that both paths give identical results.
"""

from __future__ import annotations

import heapq

from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.request import Request

SEQ_BITS = 40  # admission numbers stay below 2**40


class DecodeGroup:
    __slots__ = ("block_size", "buckets", "ctx_base", "finish_heap", "kv", "limbo", "max_model_len", "n")

    def __init__(self, kv: KVCacheManager, max_model_len: int) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.max_model_len = max_model_len
        self.n = 0
        # Sum over members of (c0 - s0): in step k the members' context lengths (tokens attended,
        # the new one included) sum to ctx_base + n*(k+1).
        self.ctx_base = 0
        self.buckets = [0] * self.block_size
        # (finish step, admission order) packed in one int, so heap comparisons stay on ints;
        # then the step the member joined (an entry is stale once the member left) and the member.
        self.finish_heap: list[tuple[int, int, Request]] = []
        self.limbo: list[int] = []

    def add(self, r: Request, step: int) -> None:
        """Join with state exact as of the start of ``step`` (r needs exactly one token)."""
        c0 = r.num_computed
        r.sync_step = step
        self.buckets[(step - c0) % self.block_size] += 1
        self.n += 1
        self.ctx_base += c0 - step
        limit = min(r.max_tokens, self.max_model_len - r.prompt_len)
        finish_step = step + (limit - r.num_output) - 1
        heapq.heappush(self.finish_heap, ((finish_step << SEQ_BITS) | r.admit_seq, step, r))

    def materialize(self, r: Request, step: int, last_token_time: float) -> None:
        """Leave the group with state exact as of the start of ``step``."""
        s0 = r.sync_step
        c0 = r.num_computed
        d = step - s0
        self.buckets[(s0 - c0) % self.block_size] -= 1
        self.n -= 1
        self.ctx_base -= c0 - s0
        r.sync_step = -1
        if d > 0:
            r.num_computed = c0 + d
            r.num_output += d
            r.segments[-1] += d
            r.last_token = last_token_time
        bs = self.block_size
        missing = -(-r.num_computed // bs) - len(r.blocks)
        if missing > 0:
            limbo = self.limbo
            r.blocks.extend(limbo[-missing:])
            del limbo[-missing:]
        if r.num_computed // bs > r.num_cached_blocks and self.kv.caching:
            self.kv.cache_blocks(r, r.num_computed)

    def next_finish_step(self) -> int:
        """The earliest step in which a member produces its last token (drops stale entries)."""
        heap = self.finish_heap
        while heap:
            key, s0, r = heap[0]
            if r.sync_step == s0:
                return key >> SEQ_BITS
            heapq.heappop(heap)
        return 1 << 62

    def take_finishing(self, step: int, t_end: float) -> list[Request]:
        """Members whose last token is produced by ``step`` (ending at ``t_end``), out of the
        group with their state as of that step's end, in running order."""
        heap = self.finish_heap
        out: list[Request] = []
        bound = (step + 1) << SEQ_BITS
        while heap and heap[0][0] < bound:
            _key, s0, r = heapq.heappop(heap)
            if r.sync_step == s0:  # else a stale entry of a member that left the group
                out.append(r)
        for r in out:
            self.materialize(r, step + 1, t_end)
        return out

    def compact(self) -> None:
        """Drop stale heap entries once the group is empty (keeps the heap small)."""
        if self.n == 0:
            self.finish_heap.clear()
