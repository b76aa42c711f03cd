"""The KV block pool: vLLM's free-block queue and prefix-cache hash table, with bulk moves.

vLLM keeps free blocks in one doubly linked list: allocation pops the head; a freed block is
*prepended* when it has no hash (reused first) and *appended* when it has one (an evictable
prefix-cache entry, so eviction is LRU by release time); a prefix hit on a free block pulls it
out of the middle. Since only unhashed blocks go to the head and only hashed ones to the tail,
the list is always [unhashed...][hashed, least recently released first...]. Here:

* ``_blank`` is a stack of free blocks no lookup can hit (the top is the head of vLLM's list);
* ``_lru`` holds the hashed free blocks in LRU order, as entries of two kinds:
  - a *live* block (key = block id): its hash is in the table and a lookup can hit it;
  - a *dead run* (key < 0, value = block ids, the next to evict last): blocks vLLM keeps hashed
    but that no lookup can ever hit again (content unique to a request that finished). They
    keep their place in the eviction order, which decides when live blocks behind them are
    evicted, but move in bulk.

A dead run with no live block ahead of it is popped before any live block, exactly like a
blank block, so it *is* one: the LRU never starts with a dead run (such runs join
``_blank``). Without shared content (no live block anywhere) every free block is blank and
allocation is one slice of a list.

Reference counts exist only for live blocks (``ref``); every other held block has exactly one
owner. Which physical block id goes where never changes an observable result: blocks are
interchangeable until they carry content.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """Blocks ``1 .. num_gpu_blocks-1`` (block 0 is vLLM's reserved null block)."""

    __slots__ = (
        "_blank",
        "_dups",
        "_lru",
        "_next_run",
        "block_hash",
        "cached",
        "enable_caching",
        "num_free",
        "num_gpu_blocks",
        "ref",
    )

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self._blank = list(range(num_gpu_blocks - 1, 0, -1))  # head (block 1) on top
        self._lru: OrderedDict[int, list[int] | None] = OrderedDict()
        self._next_run = -1
        self.num_free = num_gpu_blocks - 1  # vLLM counts evictable cached blocks as free
        self.ref: dict[int, int] = {}  # live block -> requests holding it
        self.block_hash: dict[int, int] = {}  # live block -> its content hash
        # hash -> first live block registered with it; duplicates (same content computed twice
        # before either was registered) in _dups, in registration order, as vLLM keeps them.
        self.cached: dict[int, int] = {}
        self._dups: dict[int, list[int]] = {}

    @property
    def usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - self.num_free / (self.num_gpu_blocks - 1)

    # ------------------------------------------------------------------ allocation
    def get_new_blocks(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head of the free queue, evicting cached blocks it reaches."""
        if n <= 0:
            return []
        blank = self._blank
        self.num_free -= n
        if n <= len(blank):
            out = blank[-n:]
            del blank[-n:]
            out.reverse()
            return out
        if blank:
            out = blank[::-1]
            blank.clear()
        else:
            out = []
        need = n - len(out)
        lru = self._lru
        block_hash = self.block_hash
        ref = self.ref
        cached = self.cached
        while need:
            key, run = lru.popitem(False)  # the head (positional: a cheaper call)
            if run is None:  # a live cached block: evict its hash
                h = block_hash.pop(key)
                del ref[key]
                if cached[h] == key and h not in self._dups:
                    del cached[h]
                else:
                    self._evict_duplicate(key, h)
                out.append(key)
                need -= 1
            elif len(run) <= need:  # a whole dead run (stored last-to-evict first)
                run.reverse()
                out.extend(run)
                need -= len(run)
            else:
                take = run[-need:]
                del run[-need:]
                take.reverse()
                out.extend(take)
                need = 0
                # The rest of the run is now the head of the free queue: dead blocks carry no
                # content anyone can hit, so they can simply become blank blocks there.
                blank.extend(run)
        self._blank_leading_dead_runs()
        return out

    def _blank_leading_dead_runs(self) -> None:
        """Keep the invariant that the LRU starts with a live block (or is empty)."""
        lru = self._lru
        while lru:
            key = next(iter(lru))
            if key >= 0:
                return
            self._blank.extend(lru.pop(key))  # type: ignore[arg-type]  # dead runs hold lists

    def _evict_duplicate(self, b: int, h: int) -> None:
        """Drop evicted block ``b`` (hash ``h``, already unhashed) from the table when other
        blocks carry the same content: the next registered one takes its place."""
        cached = self.cached
        if cached[h] == b:
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

    # ------------------------------------------------------------------ prefix cache
    def register(self, blocks: list[int], keys: list[int]) -> None:
        """Publish held blocks (one holder each) in the prefix cache under their content keys,
        in order: a key already in the table keeps its first block, the new one waits in
        ``_dups``. (An indexed loop: the compiled core runs it in C.)"""
        block_hash = self.block_hash
        ref = self.ref
        cached = self.cached
        if len(blocks) != len(keys):
            raise ValueError(f"{len(blocks)} blocks for {len(keys)} keys")
        for i in range(len(blocks)):
            b = blocks[i]
            h = keys[i]
            block_hash[b] = h
            ref[b] = 1
            if h in cached:
                self._dups.setdefault(h, []).append(b)
            else:
                cached[h] = b

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on prefix-hit (live) blocks, pulling free ones out of the queue."""
        ref = self.ref
        lru = self._lru
        head_taken = False
        for b in blocks:
            c = ref[b]
            if c == 0:
                if not head_taken and next(iter(lru)) == b:
                    head_taken = True
                del lru[b]
                self.num_free -= 1
            ref[b] = c + 1
        if head_taken:
            self._blank_leading_dead_runs()

    def num_evictable_among(self, blocks: list[int]) -> int:
        ref = self.ref
        n = 0
        for b in blocks:
            if ref[b] == 0:
                n += 1
        return n

    # ------------------------------------------------------------------ freeing
    def free(self, blocks: list[int], num_live: int, num_hashed: int) -> None:
        """Release a request's blocks, tail first, as ``free_blocks(reversed(blocks))`` does.

        ``blocks[:num_live]`` are live (ref-counted, hashed), ``blocks[num_live:num_hashed]`` are
        hashed with content no lookup can hit again, the rest are unhashed (the partial tail).
        """
        lru = self._lru
        if not num_live and not lru:  # none of these is live and none is queued ahead: all blank
            self._blank.extend(blocks)
            self.num_free += len(blocks)
            return
        if num_hashed < len(blocks):
            self._blank.extend(blocks[num_hashed:])  # prepended, the tail block first
        if num_live < num_hashed:
            if lru:
                # Tail first into the LRU: blocks[num_hashed-1] is evicted first, i.e. it goes
                # last in the stored run.
                lru[self._next_run] = blocks[num_live:num_hashed]
                self._next_run -= 1
            else:  # nothing live ahead of it: the run is as good as blank
                self._blank.extend(blocks[num_live:num_hashed])
        freed = len(blocks) - num_live
        if num_live:
            ref = self.ref
            for i in range(num_live - 1, -1, -1):  # tail first
                b = blocks[i]
                c = ref[b] - 1
                ref[b] = c
                if c == 0:
                    lru[b] = None
                    freed += 1
        self.num_free += freed

    # ------------------------------------------------------------------ invariants
    def check(self, held: dict[int, int]) -> None:
        """Assert the pool's invariants given ``held``: block -> number of holders."""
        blank = self._blank
        in_lru: list[int] = []
        assert not self._lru or next(iter(self._lru)) >= 0, "the LRU starts with a dead run"
        for key, run in self._lru.items():
            if run is None:
                in_lru.append(key)
                assert self.ref.get(key) == 0, f"live free block {key} has ref {self.ref.get(key)}"
            else:
                assert key < 0 and run, "malformed dead run"
                in_lru.extend(reversed(run))
        free = blank + in_lru
        assert len(free) == self.num_free, f"free count {self.num_free} but {len(free)} blocks queued"
        assert len(set(free)) == len(free), "a free block is queued twice"
        assert not set(free) & held.keys(), "a block is both free and held"
        assert 0 not in free and 0 not in held, "the null block was handed out"
        assert len(free) + len(held) == self.num_gpu_blocks - 1, "blocks lost or invented"
        for b, n in held.items():
            if b in self.ref:
                assert self.ref[b] == n, f"live block {b}: ref {self.ref[b]} but {n} holders"
            else:
                assert n == 1, f"block {b} without a hash has {n} holders"
        for h, b in self.cached.items():
            assert self.block_hash.get(b) == h, f"hash table points at block {b} which no longer has it"
        for h, bs in self._dups.items():
            for b in bs:
                assert self.block_hash.get(b) == h
        assert self.block_hash.keys() == self.ref.keys()
