"""The KV block pool: vLLM's free-block queue and prefix-cache hash table, in compact form.

vLLM keeps free blocks in one doubly linked list: allocation pops the head; a freed block is
*prepended* when it has no hash (reused first) and *appended* when it has one (an evictable
prefix-cache entry, so eviction is LRU by release time); a prefix hit on a free block pulls
it out of the middle. Because only unhashed blocks ever go to the head and only hashed ones to
the tail, that list is always [unhashed blocks...][hashed blocks in LRU order...]. Here the two
parts are a stack (``_blank``, top = head) and an ordered dict (``_evictable``, first = LRU),
which gives the same allocation and eviction order with O(1) operations.

Invariants (checked by ``check``): every block except the null block 0 is either free (blank or
evictable, ref count 0) or held (ref count > 0); a hash maps to blocks that carry that hash;
evictable blocks all carry a hash.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """Blocks ``1 .. num_gpu_blocks-1`` (block 0 is vLLM's reserved null block)."""

    __slots__ = (
        "_blank",
        "_dups",
        "_evictable",
        "block_hash",
        "cached",
        "enable_caching",
        "num_gpu_blocks",
        "ref",
    )

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.ref = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        # Stack of unhashed free blocks; the last element is the queue head. Initially 1..N-1.
        self._blank = list(range(num_gpu_blocks - 1, 0, -1))
        # Hashed free blocks (ref count 0), least recently released first.
        self._evictable: OrderedDict[int, None] = OrderedDict()
        # hash -> first block registered with it; later duplicates (same content computed twice
        # before either was registered) in _dups, in registration order, as vLLM keeps them.
        self.cached: dict[int, int] = {}
        self._dups: dict[int, list[int]] = {}

    @property
    def usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    @property
    def num_free(self) -> int:
        """Free blocks as vLLM counts them: evictable cached blocks count as free."""
        return len(self._blank) + len(self._evictable)

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - self.num_free / self.usable_blocks

    def get_new_blocks(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head of the free queue (evicting cached ones it reaches)."""
        blank = self._blank
        if n <= len(blank):
            if n == 1:
                out = [blank.pop()]
            else:
                out = blank[-n:]
                out.reverse()
                del blank[-n:]
        else:
            out = blank[::-1]
            blank.clear()
            evictable = self._evictable
            for _ in range(n - len(out)):
                b, _none = evictable.popitem(last=False)
                self._evict(b)
                out.append(b)
        ref = self.ref
        for b in out:
            ref[b] = 1
        return out

    def _evict(self, b: int) -> None:
        h = self.block_hash[b]
        if h is None:
            return
        self.block_hash[b] = None
        cached = self.cached
        if cached.get(h) == b:
            dups = self._dups.get(h)
            if dups:
                cached[h] = dups.pop(0)
                if not dups:
                    del self._dups[h]
            else:
                del cached[h]
        else:
            dups = self._dups[h]
            dups.remove(b)
            if not dups:
                del self._dups[h]

    def free_blocks(self, blocks_tail_first: list[int]) -> None:
        """Release one reference to each block, given in eviction-priority order (tail first)."""
        ref = self.ref
        block_hash = self.block_hash
        caching = self.enable_caching
        to_head: list[int] = []
        evictable = self._evictable
        for b in blocks_tail_first:
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                if not caching or block_hash[b] is None:
                    to_head.append(b)
                else:
                    evictable[b] = None
        if to_head:
            # Prepending [x1, x2, ...] makes x1 the new head: push in reverse onto the stack.
            to_head.reverse()
            self._blank.extend(to_head)

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on prefix-hit blocks, pulling free ones out of the queue."""
        ref = self.ref
        evictable = self._evictable
        for b in blocks:
            if ref[b] == 0:
                del evictable[b]
            ref[b] += 1

    def register(self, b: int, h: int) -> None:
        """Publish a full block in the prefix cache under content hash ``h``."""
        self.block_hash[b] = h
        cached = self.cached
        if h in cached:
            self._dups.setdefault(h, []).append(b)
        else:
            cached[h] = b

    def num_evictable_among(self, blocks: list[int]) -> int:
        ref = self.ref
        return sum(1 for b in blocks if ref[b] == 0)

    def check(self) -> None:
        """Assert the pool's invariants (debug mode and end of every simulation)."""
        n = self.num_gpu_blocks
        blank = set(self._blank)
        ev = set(self._evictable)
        assert len(blank) == len(self._blank), "a blank block is queued twice"
        assert not (blank & ev), "a block is both blank and evictable"
        assert 0 not in blank and 0 not in ev, "the null block is in the free queue"
        for b in range(1, n):
            free = b in blank or b in ev
            assert (self.ref[b] == 0) == free, f"block {b}: ref {self.ref[b]} but free={free}"
            assert self.ref[b] >= 0, f"block {b}: negative ref count"
        for b in ev:
            assert self.block_hash[b] is not None, f"evictable block {b} has no hash"
        for h, b in self.cached.items():
            assert self.block_hash[b] == h, f"hash table points at block {b} which no longer has it"
        for h, bs in self._dups.items():
            for b in bs:
                assert self.block_hash[b] == h
