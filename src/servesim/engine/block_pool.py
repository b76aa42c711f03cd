"""The KV block pool: vLLM's free-block queue and prefix-cache hash table, over flat arrays.

vLLM keeps free blocks in one doubly linked list: allocation pops the head; a freed block is
*prepended* when it has no hash (reused first) and *appended* when it has one (an evictable
prefix-cache entry, so eviction is LRU by release time); a prefix hit on a free block pulls it
out of the middle. Since only unhashed blocks go to the head and only hashed ones to the tail,
the list is always [unhashed...][hashed, least recently released first...]. Here:

* ``_blank`` is a stack of free blocks no lookup can hit (the top is the head of vLLM's list);
* the *LRU* holds the hashed free blocks in release order. Its blocks are of two kinds:
  - *live* (``content[b]`` is its content key): in the hash table, a lookup can hit it;
  - *dead*: blocks vLLM keeps hashed but that no lookup can ever hit again (content unique to a
    request that finished). They keep their place in the eviction order, which decides when the
    live blocks behind them are evicted, but they are interchangeable, so only their *number*
    at each place matters.
  The live blocks form vLLM's doubly linked list (``_next``/``_prev`` arrays indexed by block id,
  the null block 0 -- never handed out -- the sentinel: ``_next[0]`` is the head, ``_prev[0]``
  the tail); ``dead_before[b]`` counts the dead blocks queued just ahead of live block ``b`` and
  ``dead_tail`` those behind the last one; the dead blocks' ids wait in ``_dead``. A request's
  dead blocks therefore move in bulk, whatever their number.

Dead blocks with no live block ahead of them are popped before any live block, exactly like
blank ones, so they *are* blank: the LRU never starts with dead blocks (they join ``_blank``),
and without a live block queued it holds none. Without shared content every free block is
blank and allocation is one slice of a list.

Per block, the queue and the reference counts are array cells (C integers in the compiled
core): only publishing, looking up and evicting content keys touch a dictionary. Keys given
by ``hash_ids`` are filed one entry per hash id (``hashed``: the blocks of its consecutive keys,
``register_hashed``), so a 512-token id costs one entry and no key object per 16-token block. Reference
counts mean something only for live blocks; every other held block has exactly one owner.
Which physical block id goes where never changes an observable result: blocks are
interchangeable until they carry content.
"""

from __future__ import annotations

from array import array

from servesim.errors import InternalError


def _zeros(n: int) -> array[int]:
    return array("i", bytes(4 * n))


class BlockPool:
    """Blocks ``1 .. num_gpu_blocks-1`` (block 0 is vLLM's reserved null block)."""

    __slots__ = (
        "_blank",
        "_dead",
        "_dups",
        "_next",
        "_prev",
        "cached",
        "content",
        "dead_before",
        "dead_tail",
        "enable_caching",
        "hashed",
        "num_free",
        "num_gpu_blocks",
        "num_live_queued",
        "ref",
        "slot",
    )

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self._blank = list(range(num_gpu_blocks - 1, 0, -1))  # head (block 1) on top
        self._next = _zeros(num_gpu_blocks)  # the live blocks of the LRU, linked through block 0
        self._prev = _zeros(num_gpu_blocks)
        self.num_live_queued = 0
        self.dead_before = _zeros(num_gpu_blocks)  # live queued block -> dead blocks just ahead
        self.dead_tail = 0  # dead blocks queued behind the last live one
        self._dead: list[int] = []  # the dead blocks' ids (any order: they are interchangeable)
        self.num_free = num_gpu_blocks - 1  # vLLM counts evictable cached blocks as free
        self.ref = _zeros(num_gpu_blocks)  # live block -> requests holding it
        self.content: list[int | None] = [None] * num_gpu_blocks  # live block -> its content key
        # content key -> first live block registered with it; duplicates (same content computed
        # twice before either was registered) in _dups, in registration order, as vLLM keeps them.
        self.cached: dict[int, int] = {}
        self._dups: dict[int, list[int]] = {}
        # Keys filed per hash id (register_hashed): base -> [block or 0 for each of its ``per``
        # keys base + 4*k, then how many are non-zero]; a live block filed there has the base as
        # its ``content`` and k + 1 as its ``slot`` (0: its content is a key of ``cached``).
        # Duplicates wait in _dups under their full key.
        self.hashed: dict[int, list[int]] = {}
        self.slot = _zeros(num_gpu_blocks)

    @property
    def usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - self.num_free / (self.num_gpu_blocks - 1)

    # ------------------------------------------------------------------ the LRU
    def _append_live(self, b: int) -> None:
        """Queue live block ``b`` at the tail, behind the dead blocks queued since the last one."""
        tail = self._prev[0]
        self._next[tail] = b
        self._prev[b] = tail
        self._next[b] = 0
        self._prev[0] = b
        self.dead_before[b] = self.dead_tail
        self.dead_tail = 0
        self.num_live_queued += 1

    def _remove_live(self, b: int) -> None:
        """Pull queued live block ``b`` out of the LRU (a prefix hit); the dead blocks ahead of
        it stay where they were, now ahead of its successor."""
        p = self._prev[b]
        s = self._next[b]
        self._next[p] = s
        self._prev[s] = p
        if s:
            self.dead_before[s] += self.dead_before[b]
        else:
            self.dead_tail += self.dead_before[b]
        self.num_live_queued -= 1
        if p == 0:  # b was the head: whatever dead blocks its successor had ahead now lead
            self._take_leading_dead(self._blank, -1)

    def _take_leading_dead(self, out: list[int], need: int) -> int:
        """Move the dead blocks ahead of the first live one (all of them without one) to
        ``out``: at most ``need`` (all if negative), the rest to the blank stack. Returns how many
        went to ``out``."""
        h = self._next[0]
        if h:
            k = self.dead_before[h]
            self.dead_before[h] = 0
        else:
            k = self.dead_tail
            self.dead_tail = 0
        if not k:
            return 0
        dead = self._dead
        m = len(dead) - k
        if 0 <= need < k:
            self._blank.extend(dead[m + need :])
            out.extend(dead[m : m + need])
            k = need
        else:
            out.extend(dead[m:])
        del dead[m:]
        return k

    # ------------------------------------------------------------------ allocation
    def get_new_blocks(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head of the free queue, evicting cached blocks it reaches."""
        if n <= 0:
            return []
        blank = self._blank
        self.num_free -= n
        have = len(blank)
        if n <= have:
            out = blank[have - n :]
            del blank[have - n :]
            out.reverse()
            return out
        if blank:
            out = blank[::-1]
            blank.clear()
        else:
            out = []
        need = n - have
        content = self.content
        cached = self.cached
        hashed = self.hashed
        dups = self._dups
        prev: object = None  # the hash id of the last block evicted, and its entry
        rec: list[int] = []
        dec = 0  # blocks evicted from ``rec`` since its count was last written
        while need:
            b = self._next[0]  # the head: live, as no dead block leads
            if b == 0:
                raise RuntimeError(f"{n} blocks taken from the free queue, {n - need} were free")
            h = content[b]  # evict its content key
            content[b] = None
            k = self.slot[b]
            if k and not dups:  # filed under hash id h (register_hashed): often the last one's
                self.slot[b] = 0
                if h is not prev:
                    if dec:  # the last id's count, written once for its run of evictions
                        self._uncount(prev, rec, dec)
                        dec = 0
                    rec = hashed[h]  # type: ignore[index]  # a live block has a key
                    prev = h
                out.append(rec[k - 1])  # b itself (the table's int object: none is built)
                rec[k - 1] = 0
                dec += 1
            else:
                if dec:  # (never: a duplicate is not dropped once no duplicates are left)
                    self._uncount(prev, rec, dec)
                    dec = 0
                    prev = None
                if k:
                    self._evict_hashed(b, h)  # type: ignore[arg-type]  # a live block has a key
                elif dups and h in dups:
                    self._evict_duplicate(b, h)
                else:
                    del cached[h]  # type: ignore[arg-type]  # a live block has a key
                out.append(b)
            s = self._next[b]
            self._next[0] = s
            self._prev[s] = 0
            self.num_live_queued -= 1
            need -= 1
            # dead blocks now at the head are taken too (checked here: most often there are none)
            if self.dead_before[s] if s else self.dead_tail:
                if need:
                    need -= self._take_leading_dead(out, need)
                else:
                    self._take_leading_dead(blank, -1)
        if dec:
            self._uncount(prev, rec, dec)
        return out

    def _uncount(self, base: object, rec: list[int], n: int) -> None:
        """``n`` blocks of hash id ``base``'s entry ``rec`` were evicted: drop the entry with
        its last block."""
        last = len(rec) - 1
        c = rec[last] - n
        if c:
            rec[last] = c
        else:
            del self.hashed[base]  # type: ignore[arg-type]  # an evicted block's key

    def _evict_duplicate(self, b: int, h: int) -> None:
        """Drop evicted block ``b`` (content ``h``) from the table when other blocks carry the
        same content: the next registered one takes its place."""
        cached = self.cached
        dups = self._dups[h]
        if cached[h] == b:
            cached[h] = dups.pop(0)
        else:
            dups.remove(b)
        if not dups:
            del self._dups[h]

    def _evict_hashed(self, b: int, base: int) -> None:
        """Drop evicted block ``b`` filed under hash-id ``base`` (``register_hashed``)."""
        k = self.slot[b] - 1
        self.slot[b] = 0
        rec = self.hashed[base]
        dups = self._dups
        if dups:
            key = base + 4 * k
            same = dups.get(key)
            if same is not None:  # other blocks carry the same content: the next one takes over
                if rec[k] == b:
                    rec[k] = same.pop(0)
                else:
                    same.remove(b)
                if not same:
                    del dups[key]
                return
        rec[k] = 0
        last = len(rec) - 1
        rec[last] -= 1
        if not rec[last]:
            del self.hashed[base]

    # ------------------------------------------------------------------ prefix cache
    def register_hashed(self, blocks: list[int], lo: int, hi: int, bases: list[int], per: int) -> None:
        """``register`` for ``blocks[lo:hi]``, block ``i`` keyed ``bases[i // per] + 4 * (i % per)``
        (``hash_id_bases``), filed in ``hashed`` under its base: one table entry per base, no
        key built. The same table, hits and evictions as ``register`` with those keys.

        An id not in the table yet (the common case: most ids are new) takes its blocks as one
        slice, counted once: no per-block test of its entries, which cannot be duplicates."""
        if hi > len(blocks):  # the slices below would cut short where an index would fail
            raise InternalError(f"blocks up to {hi} published, {len(blocks)} held")
        content = self.content
        hashed = self.hashed
        i = lo
        while i < hi:
            j = i // per
            first = j * per
            end = first + per
            if end > hi:
                end = hi
            base = bases[j]
            got = hashed.get(base)
            if got is None:
                if i == first and end - first == per:
                    rec = blocks[first:end]  # the list's own int objects, filed as they are
                    rec.append(per)
                else:
                    rec = [0] * (per + 1)
                    rec[i - first : end - first] = blocks[i:end]
                    rec[per] = end - i
                hashed[base] = rec
                for t in range(i, end):
                    b = blocks[t]
                    content[b] = base
                    self.slot[b] = t - first + 1
                    self.ref[b] = 1
                i = end
                continue
            rec = got
            for t in range(i, end):
                held = blocks[t]
                b = held
                k = t - first
                content[b] = base
                self.slot[b] = k + 1
                self.ref[b] = 1
                if rec[k]:
                    self._dups.setdefault(base + 4 * k, []).append(held)
                else:
                    rec[k] = held
                    rec[per] += 1
            i = end

    def register(self, blocks: list[int], keys: list[int]) -> None:
        """Publish held blocks (one holder each) in the prefix cache under their content keys,
        in order: a key already in the table keeps its first block, the new one waits in
        ``_dups``. (An indexed loop: the compiled core runs it in C.)"""
        content = self.content
        cached = self.cached
        if len(blocks) != len(keys):
            raise InternalError(f"{len(blocks)} blocks for {len(keys)} keys")
        for i in range(len(blocks)):
            b = blocks[i]
            h = keys[i]
            content[b] = h
            self.ref[b] = 1
            if h in cached:
                self._dups.setdefault(h, []).append(b)
            else:
                cached[h] = b

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on prefix-hit (live) blocks, pulling free ones out of the queue."""
        for b in blocks:
            c = self.ref[b]
            if c == 0:
                self._remove_live(b)
                self.num_free -= 1
            self.ref[b] = c + 1

    def num_evictable_among(self, blocks: list[int]) -> int:
        n = 0
        for b in blocks:
            if self.ref[b] == 0:
                n += 1
        return n

    # ------------------------------------------------------------------ freeing
    def free(self, blocks: list[int], num_live: int, num_hashed: int) -> None:
        """Release a request's blocks, tail first, as ``free_blocks(reversed(blocks))`` does.

        ``blocks[:num_live]`` are live (ref-counted, hashed), ``blocks[num_live:num_hashed]`` are
        hashed with content no lookup can hit again, the rest are unhashed (the partial tail).
        """
        if not num_live and not self.num_live_queued:  # nothing live here nor queued: all blank
            self._blank.extend(blocks)
            self.num_free += len(blocks)
            return
        if num_hashed < len(blocks):
            self._blank.extend(blocks[num_hashed:])  # prepended, the tail block first
        if num_live < num_hashed:
            if self.num_live_queued:  # queued behind live blocks: they count for eviction
                self._dead.extend(blocks[num_live:num_hashed])
                self.dead_tail += num_hashed - num_live
            else:  # nothing live ahead of them: as good as blank
                self._blank.extend(blocks[num_live:num_hashed])
        freed = 0
        for i in range(num_live - 1, -1, -1):  # tail first
            b = blocks[i]
            c = self.ref[b] - 1
            self.ref[b] = c
            if c == 0:  # _append_live(b), inlined
                tail = self._prev[0]
                self._next[tail] = b
                self._prev[b] = tail
                self._next[b] = 0
                self._prev[0] = b
                self.dead_before[b] = self.dead_tail
                self.dead_tail = 0
                freed += 1
        self.num_live_queued += freed
        self.num_free += freed + len(blocks) - num_live

    # ------------------------------------------------------------------ invariants
    def live_queue(self) -> list[int]:
        """The LRU's live blocks, head (next evicted) first."""
        out: list[int] = []
        b = self._next[0]
        while b:
            out.append(b)
            b = self._next[b]
        return out

    def check(self, held: dict[int, int]) -> None:
        """Assert the pool's invariants given ``held``: block -> number of holders."""
        blank = self._blank
        live = self.live_queue()
        if not (len(live) == self.num_live_queued):
            raise InternalError(f"{self.num_live_queued} live counted, {len(live)} linked")
        prev = 0
        for b in live:
            if not (self._prev[b] == prev):
                raise InternalError(f"LRU block {b} is linked back to {self._prev[b]}, not {prev}")
            if self.content[b] is None:
                raise InternalError(f"dead block {b} linked in the LRU")
            if not (self.ref[b] == 0):
                raise InternalError(f"live free block {b} has ref {self.ref[b]}")
            prev = b
        if not (self._prev[0] == prev):
            raise InternalError("the LRU's tail is not its last block")
        dead = sum(self.dead_before[b] for b in live) + self.dead_tail
        if not (dead == len(self._dead)):
            raise InternalError(f"{dead} dead blocks counted in the LRU, {len(self._dead)} held there")
        if live:
            if not (self.dead_before[live[0]] == 0):
                raise InternalError("the LRU starts with dead blocks")
        else:
            if self._dead:
                raise InternalError("dead blocks queued with no live block: they are blank")
        free = blank + live + self._dead
        if not (len(free) == self.num_free):
            raise InternalError(f"free count {self.num_free} but {len(free)} blocks queued")
        if not (len(set(free)) == len(free)):
            raise InternalError("a free block is queued twice")
        if set(free) & held.keys():
            raise InternalError("a block is both free and held")
        if not (0 not in free and 0 not in held):
            raise InternalError("the null block was handed out")
        if not (len(free) + len(held) == self.num_gpu_blocks - 1):
            raise InternalError("blocks lost or invented")
        for b in blank + self._dead:
            if self.content[b] is not None:
                raise InternalError(f"blank or dead block {b} carries content")
        for b, n in held.items():
            if self.content[b] is not None:
                if not (self.ref[b] == n):
                    raise InternalError(f"live block {b}: ref {self.ref[b]} but {n} holders")
            else:
                if not (n == 1):
                    raise InternalError(f"block {b} without a hash has {n} holders")
        registered = 0
        for h, b in self.cached.items():
            if not (self.content[b] == h):
                raise InternalError(f"hash table points at block {b} which no longer has it")
            registered += 1
        for base, rec in self.hashed.items():
            filled = 0
            for k in range(len(rec) - 1):
                b = rec[k]
                if b:
                    if not (self.content[b] == base and self.slot[b] == k + 1):
                        raise InternalError(f"hash-id table points at block {b} which no longer has it")
                    filled += 1
            if not (filled == rec[-1] and filled):
                raise InternalError(f"hash id {base}: {filled} blocks filed, {rec[-1]} counted")
            registered += filled
        for h, bs in self._dups.items():
            if not bs:
                raise InternalError(f"duplicates of {h} without a block")
            for b in bs:
                k = self.slot[b]
                if k:
                    filed = self.content[b]
                    first = None if filed is None else self.hashed.get(filed)
                    if filed is None or first is None or filed + 4 * (k - 1) != h or not first[k - 1]:
                        raise InternalError(f"duplicates of {h} without a first block")
                elif not (h in self.cached and self.content[b] == h):
                    raise InternalError(f"duplicates of {h} without a first block")
            registered += len(bs)
        for b in range(self.num_gpu_blocks):
            if self.slot[b] and self.content[b] is None:
                raise InternalError(f"block {b} without content is filed under a hash id")
        carrying = sum(1 for c in self.content if c is not None)
        if not (registered == carrying):
            raise InternalError(f"{carrying} blocks carry content, {registered} are in the table")
