"""The engine's conservation checks (docs/invariants.md), run by ``Engine.assert_invariants``.

Cheap enough to run after every step in tests (``simulate(..., check_invariants=True)``) and
always once at the end of a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.kv_hybrid import HybridKVCacheManager
from servesim.engine.request import OUTCOME_UNFINISHED, RUNNING
from servesim.errors import InternalError

if TYPE_CHECKING:
    from servesim.engine.engine import Engine


def check_engine(engine: Engine, final: bool = False) -> None:
    """Blocks and tokens conserved; with ``final``, the run ended clean (KV-1..6, TOK-1, REQ-1)."""
    sched = engine.scheduler
    seqs = [r.admit_seq for r in sched.running]
    if not (seqs == sorted(set(seqs))):
        raise InternalError("running list out of admission order")
    held = _held_blocks(engine)
    engine.pool.check(held)
    if isinstance(engine.kv, HybridKVCacheManager):
        _check_group_usage(engine, engine.kv)
    if final:
        if not (not sched.running and not len(sched.waiting)):
            raise InternalError("requests left in the engine")
        if held:
            raise InternalError("blocks still held at the end")
        if not (engine.pool.num_free == engine.pool.usable_blocks):
            raise InternalError("KV blocks not returned to the pool")
        if engine.external_arrivals:
            return  # a cluster replica sees only some requests; the cluster checks them all
        outcomes = engine.rec.outcome
        for i in range(engine.trace.n):
            if not (outcomes[i] != OUTCOME_UNFINISHED):
                raise InternalError(f"request {engine.trace.req_id[i]} has no outcome")


def _check_group_usage(engine: Engine, kv: HybridKVCacheManager) -> None:
    """KV-7: each group's count of blocks in use (kept as blocks change hands) is the number of
    distinct blocks its tables hold over the running requests, and the counts add up to the
    pool's blocks in use: the per-group usage a run reports splits its total exactly."""
    pool = engine.pool
    if not (sum(kv.group_used) == pool.usable_blocks - pool.num_free):
        raise InternalError(
            f"KV cache groups hold {kv.group_used} blocks, the pool {pool.usable_blocks - pool.num_free}"
        )
    held: list[set[int]] = [set() for _ in kv.group_used]
    for r in engine.scheduler.running:
        for g, table in enumerate(kv.tables(r)):
            held[g].update(b for b in table if b)
    counts = [len(s) for s in held]
    if not (counts == kv.group_used):
        raise InternalError(
            f"KV cache groups count {kv.group_used} blocks in use, their tables hold {counts}"
        )


def _held_blocks(engine: Engine) -> dict[int, int]:
    """Every block some request (or the decode group's limbo) holds -> its number of holders,
    checking each running request's counts on the way."""
    sched = engine.scheduler
    kv = engine.kv
    bs = kv.block_size
    held: dict[int, int] = {}
    for r in sched.running:
        if not (r.status == RUNNING):
            raise InternalError(f"{r.req_id} in running with status {r.status}")
        if not (r.num_output >= 0 and r.num_computed >= 0):
            raise InternalError(f"{r.req_id} has a negative count")
        if isinstance(kv, HybridKVCacheManager):  # one table per group, null blocks (0) left out
            for g, table in enumerate(kv.tables(r)):
                if kv.is_state_group(g):  # a mamba group: one state block for the whole request
                    if len(table) != 1 or not table[0]:
                        raise InternalError(f"{r.req_id}: a mamba group holds {len(table)} blocks, not one")
                    continue
                if kv.is_align_group(g):  # "align": the running state, the one it came from, a checkpoint
                    live = sum(1 for b in table if b)
                    if not (
                        table
                        and table[-1]
                        and live <= 2 + kv.checkpoint_blocks
                        and len(table) * bs >= r.num_computed
                    ):
                        raise InternalError(f"{r.req_id}: a mamba group's states {table} out of step")
                    continue
                if not (r.num_cached_blocks <= len(table) and len(table) * bs >= r.num_computed):
                    raise InternalError(f"{r.req_id}: a group's table is shorter than its tokens")
            for b in kv.held_blocks(r):
                held[b] = held.get(b, 0) + 1
            continue
        if not (r.num_live_blocks <= r.num_cached_blocks <= len(r.blocks)):
            raise InternalError("invariant broken: r.num_live_blocks <= r.num_cached_blocks <= len(r.blocks)")
        for b in r.blocks:
            held[b] = held.get(b, 0) + 1
        if r.sync_step < 0:
            # async scheduling: computed tokens include the steps in flight, and their sampled
            # tokens are placeholders; hashing lags to what the applied steps computed
            if not (r.num_computed <= r.prompt_len + r.num_output + r.placeholders):
                raise InternalError(f"{r.req_id} computed past its tokens")
            if not (len(r.blocks) * bs >= r.num_computed):
                raise InternalError(f"{r.req_id} lacks blocks")
            known = min(r.num_computed, r.prompt_len + r.num_output - kv.hash_lookahead) // bs
            lo = (r.num_computed - r.in_flight) // bs if sched.async_sched else known
            if not (lo <= r.num_cached_blocks <= known or (not kv.caching and r.num_cached_blocks == 0)):
                raise InternalError(f"{r.req_id}: hashed blocks out of step with computed tokens")
    group = sched.group
    for b in group.limbo if group is not None else ():
        held[b] = held.get(b, 0) + 1
    for r in sched.waiting:
        if r.blocks:
            raise InternalError(f"waiting request {r.req_id} holds blocks")
    xfer = sched.kv_xfer
    if xfer is not None:
        for r in xfer.holding:
            if not r.blocks:
                raise InternalError(f"KV-holding request {r.req_id} holds no blocks")
            for b in r.blocks:
                held[b] = held.get(b, 0) + 1
        for r in xfer.sending.values():  # finished, their blocks kept for a send
            for b in r.blocks:
                held[b] = held.get(b, 0) + 1
    return held


__all__ = ["check_engine"]
