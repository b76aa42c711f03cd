"""The block pool against a literal model of vLLM's ``BlockPool``: one free list of block ids,
allocation from its head, unhashed frees prepended, hashed frees appended tail first, prefix hits
pulled out of the middle, one hash table with duplicates.

The pool stores this differently (a blank stack, the live blocks linked through arrays, dead
blocks only counted), and hands out other block ids, so the comparison is on what a scheduler can
observe: how many blocks are free, which content keys a lookup finds, and how long each prefix
hit is. Runs on whichever core is installed (``make unit`` runs it on the pure one too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.block_pool import BlockPool


class VllmFreeQueue:
    """vLLM's block pool, transcribed as plainly as possible (``vllm/v1/core/block_pool.py``)."""

    def __init__(self, num_gpu_blocks: int) -> None:
        self.queue = list(range(1, num_gpu_blocks))  # the free list, head first
        self.ref: dict[int, int] = {}
        self.key: dict[int, int] = {}  # block -> content key (hashed blocks only)
        self.table: dict[int, list[int]] = {}  # content key -> blocks, first registered first

    @property
    def num_free(self) -> int:
        return len(self.queue)

    def get_new_blocks(self, n: int) -> list[int]:
        out = self.queue[:n]
        del self.queue[:n]
        for b in out:
            h = self.key.pop(b, None)
            if h is not None:  # _maybe_evict_cached_block
                self.table[h].remove(b)
                if not self.table[h]:
                    del self.table[h]
            self.ref[b] = 1
        return out

    def register(self, blocks: list[int], keys: list[int]) -> None:
        for b, h in zip(blocks, keys, strict=True):
            self.key[b] = h
            self.table.setdefault(h, []).append(b)

    def lookup(self, keys: list[int]) -> list[int]:
        hit = []
        for h in keys:
            if h not in self.table:
                break
            hit.append(self.table[h][0])
        return hit

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref.get(b, 0) == 0:
                self.queue.remove(b)
            self.ref[b] = self.ref.get(b, 0) + 1

    def free(self, blocks: list[int]) -> None:
        for b in reversed(blocks):  # free_blocks(reversed(req_blocks))
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in self.key:
                    self.queue.append(b)
                else:
                    self.queue.insert(0, b)


@dataclass
class Holder:
    """A request holding blocks in both pools: its first ``live`` blocks are published under
    shareable keys, the next ``dead`` under keys unique to it (nobody ever looks them up)."""

    ours: list[int]
    theirs: list[int]
    live: int = 0
    dead: int = 0
    keys: list[int] = field(default_factory=list)


def pool_keys(pool: BlockPool) -> set[int]:
    return set(pool.cached)


def model_shared_keys(model: VllmFreeQueue) -> set[int]:
    return {h for h in model.table if h >= 0}


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    ops = []
    for _ in range(draw(st.integers(5, 60))):
        ops.append(
            (
                draw(st.sampled_from(["admit", "admit", "hit", "release", "release"])),
                draw(st.integers(0, 7)),  # blocks to allocate
                draw(st.integers(0, 4)),  # chain length / live blocks
                draw(st.integers(0, 3)),  # which chain of shared content
            )
        )
    return ops


@settings(max_examples=300)
@given(num_gpu_blocks=st.integers(2, 24), ops=operations(), seed=st.integers(0, 10**6))
def test_pool_observes_like_vllms_free_queue(
    num_gpu_blocks: int, ops: list[tuple[str, int, int, int]], seed: int
) -> None:
    pool = BlockPool(num_gpu_blocks, True)
    model = VllmFreeQueue(num_gpu_blocks)
    holders: list[Holder] = []
    unique = -1  # the model's keys for dead blocks: negative, never looked up
    for i, (op, n, k, chain) in enumerate(ops):
        keys = [chain * 100 + j for j in range(k)]  # chains share their leading keys
        if op == "release" and holders:
            h = holders.pop((seed + i) % len(holders))
            pool.free(h.ours, h.live, h.live + h.dead)
            model.free(h.theirs)
        elif op in ("admit", "hit"):
            hit_ours = pool_hit(pool, keys) if op == "hit" else []
            hit_theirs = model.lookup(keys) if op == "hit" else []
            assert len(hit_ours) == len(hit_theirs), f"step {i}: prefix hit differs"
            revive = pool.num_evictable_among(hit_ours)
            if n > pool.num_free - revive:
                continue
            pool.touch(hit_ours)
            model.touch(hit_theirs)
            ours = hit_ours + pool.get_new_blocks(n)
            theirs = hit_theirs + model.get_new_blocks(n)
            h = Holder(ours, theirs, live=len(hit_ours))
            # Publish some of the new blocks with the chain's next keys, then some as dead.
            fresh = min(n, max(0, k - len(hit_ours)))
            if fresh:
                new_keys = keys[len(hit_ours) : len(hit_ours) + fresh]
                pool.register(ours[h.live : h.live + fresh], new_keys)
                model.register(theirs[h.live : h.live + fresh], new_keys)
                h.live += fresh
            h.dead = (n - fresh) // 2
            if h.dead:  # hashed in vLLM; the pool never publishes them (kv_cache_manager)
                model.register(theirs[h.live : h.live + h.dead], [unique - j for j in range(h.dead)])
                unique -= h.dead
            holders.append(h)
        assert pool.num_free == model.num_free, f"step {i}: free blocks differ"
        assert pool_keys(pool) == model_shared_keys(model), f"step {i}: cached content differs"
        held: dict[int, int] = {}
        for h in holders:
            for b in h.ours:
                held[b] = held.get(b, 0) + 1
        pool.check(held)


def pool_hit(pool: BlockPool, keys: list[int]) -> list[int]:
    hit = []
    for h in keys:
        b = pool.cached.get(h)
        if b is None:
            break
        hit.append(b)
    return hit


def test_dead_blocks_ahead_of_a_live_one_delay_its_eviction() -> None:
    """Hand-worked: a request's dead blocks queued between two live ones are popped before the
    later live block, exactly as vLLM's single free list pops them."""
    pool = BlockPool(11, True)  # blocks 1..10
    a = pool.get_new_blocks(2)
    pool.register(a, [101, 102])
    pool.free(a, 2, 2)  # LRU: a[1] (key 102), a[0] (key 101)
    b = pool.get_new_blocks(3)
    pool.register(b[:1], [201])
    pool.free(b, 1, 3)  # b[1:3] dead, queued behind a's blocks, then b[0] (key 201)
    assert pool.num_free == 10 and set(pool.cached) == {101, 102, 201}
    pool.check({})
    taken = pool.get_new_blocks(7)  # the 5 blank blocks, then 102 and 101 are evicted
    assert set(pool.cached) == {201}
    taken += pool.get_new_blocks(2)  # the two dead blocks: 201 survives them
    assert set(pool.cached) == {201} and pool.num_free == 1
    taken += pool.get_new_blocks(1)
    assert not pool.cached and pool.num_free == 0
    assert sorted(taken) == list(range(1, 11))
    pool.check(dict.fromkeys(taken, 1))


def test_a_prefix_hit_in_the_middle_keeps_the_dead_blocks_ahead_of_it_in_place() -> None:
    pool = BlockPool(9, True)  # blocks 1..8
    x = pool.get_new_blocks(1)
    pool.register(x, [1])
    y = pool.get_new_blocks(3)
    pool.register(y[:1], [2])
    z = pool.get_new_blocks(2)
    pool.register(z[:1], [3])
    pool.free(x, 1, 1)
    pool.free(y, 1, 3)  # LRU: x, 2 dead, y[0]
    pool.free(z, 1, 2)  # then 1 dead, z[0]; 2 blank blocks ahead of all
    pool.touch([pool.cached[2]])  # a hit on y[0]: its dead blocks now sit ahead of z's
    assert pool.num_free == 7
    pool.check({y[0]: 1})
    pool.get_new_blocks(3)  # 2 blank, then x evicted
    assert set(pool.cached) == {2, 3}
    pool.get_new_blocks(3)  # the 3 dead blocks ahead of z[0]
    assert set(pool.cached) == {2, 3}
    pool.get_new_blocks(1)
    assert set(pool.cached) == {2}
