"""Keys filed per hash id (``BlockPool.register_hashed``: one table entry per ``hash_ids`` entry)
against the same keys filed one per block (``BlockPool.register``, the plain hash table that
``test_block_pool`` checks against vLLM's free queue).

Two pools see the same requests: admissions with or without a prefix lookup, their blocks
published in chunks (a chunked prefill: an id's blocks can arrive over several calls, and two
requests can compute the same content before either publishes it: duplicates), and releases in
any order. Whatever way a pool files its keys, a scheduler must observe the same thing: the same
block ids handed out (so the same evictions, in the same order), the same prefix hits and the
same free count. Runs on whichever core is installed (``make unit`` runs it on the pure one too).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from servesim.engine.block_pool import BlockPool
from servesim.engine.kv_cache_manager import hash_id_bases, hash_id_keys

Op = tuple[str, int, int, list[int], list[int]]


@st.composite
def operations(draw: st.DrawFn) -> list[Op]:
    ops: list[Op] = []
    for _ in range(draw(st.integers(5, 50))):
        ops.append(
            (
                draw(st.sampled_from(["admit", "hit", "hit", "release", "release"])),
                draw(st.integers(0, 3)),  # which shared prefix of ids
                draw(st.integers(0, 14)),  # blocks the request holds
                draw(st.lists(st.integers(0, 3), max_size=3)),  # its ids after the prefix
                draw(st.lists(st.integers(1, 6), max_size=3)),  # its publication chunks
            )
        )
    return ops


def hit_by_key(pool: BlockPool, keys: list[int]) -> list[int]:
    hit = []
    for h in keys:
        b = pool.cached.get(h)
        if b is None:
            break
        hit.append(b)
    return hit


def hit_by_id(pool: BlockPool, bases: list[int], per: int, n: int) -> list[int]:
    hit = []
    for i in range(n):
        rec = pool.hashed.get(bases[i // per])
        if rec is None or not rec[i % per]:
            break
        hit.append(rec[i % per])
    return hit


def filed_keys(pool: BlockPool, per: int) -> set[int]:
    """Every key the per-id table can hit (``register`` keeps them all in ``cached``)."""
    return {base + 4 * k for base, rec in pool.hashed.items() for k in range(per) if rec[k]}


@settings(max_examples=examples(300), deadline=None)
@given(
    num_gpu_blocks=st.integers(2, 40),
    per=st.sampled_from([1, 2, 4]),
    ops=operations(),
    seed=st.integers(0, 10**6),
)
def test_keys_filed_per_hash_id_observe_like_keys_filed_per_block(
    num_gpu_blocks: int, per: int, ops: list[Op], seed: int
) -> None:
    by_key = BlockPool(num_gpu_blocks, True)
    by_id = BlockPool(num_gpu_blocks, True)
    holders: list[tuple[list[int], int]] = []  # (blocks, how many are published)
    for i, (op, prefix, n, tail, chunks) in enumerate(ops):
        if op == "release":
            if holders:
                blocks, live = holders.pop((seed + i) % len(holders))
                by_key.free(list(blocks), live, live)
                by_id.free(blocks, live, live)
        else:
            ids = [100 + prefix, 200 + prefix, *tail]
            # one block of ``per`` tokens per key: ``per`` keys per id
            keys = hash_id_keys(ids, per, 1, n)
            bases, got_per, m = hash_id_bases(ids, per, 1, n)
            assert got_per == per and m == len(keys)
            hit = hit_by_key(by_key, keys) if op == "hit" else []
            assert hit == (hit_by_id(by_id, bases, per, m) if op == "hit" else []), f"op {i}: hits differ"
            if n - len(hit) > by_key.num_free - by_key.num_evictable_among(hit):
                continue
            by_key.touch(hit)
            by_id.touch(hit)
            new = by_key.get_new_blocks(n - len(hit))
            assert new == by_id.get_new_blocks(n - len(hit)), f"op {i}: other blocks handed out"
            blocks = hit + new
            lo = len(hit)
            for c in [*chunks, m]:  # published in chunks, up to the blocks the ids describe
                hi = min(lo + c, m)
                if hi > lo:
                    by_key.register(blocks[lo:hi], keys[lo:hi])
                    by_id.register_hashed(blocks, lo, hi, bases, per)
                    lo = hi
            holders.append((blocks, max(lo, len(hit))))
        assert by_key.num_free == by_id.num_free, f"op {i}: free blocks differ"
        assert set(by_key.cached) == filed_keys(by_id, per), f"op {i}: cached content differs"
        held: dict[int, int] = {}
        for blocks, _ in holders:
            for b in blocks:
                held[b] = held.get(b, 0) + 1
        by_key.check(held)
        by_id.check(held)


def test_an_evicted_run_of_one_id_drops_its_entry_with_its_last_block() -> None:
    """Hand-worked: two ids of 4 blocks each, freed; taking 6 blocks evicts the second id whole
    (released last, tail first, it sits ahead of the first) and half of the first."""
    pool = BlockPool(9, True)  # blocks 1..8
    bases = [1 << 8 | 3, 2 << 8 | 3]
    a = pool.get_new_blocks(8)
    pool.register_hashed(a, 0, 3, bases, 4)  # the first id in two chunks: 3 blocks, then 1
    pool.register_hashed(a, 3, 8, bases, 4)
    assert pool.hashed == {bases[0]: [*a[:4], 4], bases[1]: [*a[4:], 4]}
    pool.free(a, 8, 8)  # LRU: a[7] .. a[0]
    pool.check({})
    assert pool.get_new_blocks(6) == a[7:1:-1]
    assert pool.hashed == {bases[0]: [a[0], a[1], 0, 0, 2]}
    pool.check(dict.fromkeys(a[2:], 1))
