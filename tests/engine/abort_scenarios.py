"""Aborts in every state a request can be in (``Scheduler.finish_requests``), as plain functions:
test_abort.py runs them in-process (asserting each one) and, through ``__main__``, in a
subprocess under each core, so the compiled core and the pure-Python reference are compared on
what they leave behind.

Each scenario returns a record of what happened: the state the victim was in, the blocks the
abort gave back, and every request's outcome, finish time and output count at the end.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from servesim.engine import EngineConfig, _native
from servesim.engine.engine import Engine, TraceArrays
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS, OffloadingConnector, StepCountTiming
from servesim.engine.kv_pd import PDConnector
from servesim.engine.request import PREEMPTED, RUNNING, WAITING, Request
from servesim.engine.step_time import ConstantStepTime
from servesim.traces.schema import Trace

STEP_S = 0.01


def engine(cfg: EngineConfig, *, fast: bool = False, connector: Any = None) -> Engine:
    return Engine(
        TraceArrays(Trace.empty()),
        cfg,
        ConstantStepTime(step_time_s=STEP_S),
        fast=fast,
        external_arrivals=True,
        check_invariants=True,
        kv_connector=connector,
    )


def step_until(e: Engine, done: Callable[[], bool], most: int = 500) -> None:
    """Run step by step until ``done()`` holds between two steps."""
    for _ in range(most):
        if done():
            return
        p = e.begin_step()
        if p is None:
            break
        e.end_step(p)
    if not done():
        raise AssertionError("the state the scenario needs never came")


def record(e: Engine, reqs: list[Request], victim: Request, state: int, freed: int) -> dict[str, Any]:
    """Abort ``victim`` was in ``state`` and gave back ``freed`` blocks; run the rest to the end."""
    e.run_until(math.inf)
    e.finish()  # the final invariants: every block back in the pool, nothing left anywhere
    return {
        "state": state,
        "freed": freed,
        "steps": e.step,
        "outcomes": [e.rec.outcome[r.idx] for r in reqs],
        "finish": [r.finish_time for r in reqs],
        "outputs": [r.num_output for r in reqs],
    }


def abort(e: Engine, victim: Request) -> tuple[int, int]:
    """Abort ``victim`` now: its state before, and the free blocks the pool gained."""
    state = victim.status
    before = e.pool.num_free
    if not e.abort(victim, e.now):
        raise AssertionError(f"{victim.req_id} was not live")
    if e.abort(victim, e.now):
        raise AssertionError("aborting twice must be a no-op")
    if victim in e.scheduler.running or victim in list(e.scheduler.waiting) or victim.blocks:
        raise AssertionError(f"{victim.req_id} is still held after its abort")
    return state, e.pool.num_free - before


def crowd(fast: bool) -> tuple[Engine, list[Request]]:
    """Eight requests on four seats: twelve steps in, four run (fast: in the decode group) and
    four wait."""
    cfg = EngineConfig(
        num_gpu_blocks=60, block_size=16, max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512
    )
    e = engine(cfg, fast=fast)
    reqs = [Request(i, f"r{i}", 0.0, 100 + 10 * i, 40) for i in range(8)]
    for r in reqs:
        e.submit(r, 0.0)
    e.run_until(0.115)
    return e, reqs


def abort_waiting(fast: bool) -> dict[str, Any]:
    e, reqs = crowd(fast)
    victim = [r for r in reqs if r.status == WAITING][-1]
    return record(e, reqs, victim, *abort(e, victim))


def abort_running(fast: bool) -> dict[str, Any]:
    e, reqs = crowd(fast)
    victim = [r for r in reqs if r.status == RUNNING][1]
    if fast and victim.sync_step < 0:
        raise AssertionError("the fast path should hold the victim in its decode group")
    return record(e, reqs, victim, *abort(e, victim))


def abort_preempted(fast: bool) -> dict[str, Any]:
    """A tight KV pool: a request is preempted (back in the waiting queue, its blocks freed,
    hashed ones kept in the prefix cache) and aborted there."""
    cfg = EngineConfig(
        num_gpu_blocks=24, block_size=16, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=256
    )
    e = engine(cfg, fast=fast)
    reqs = [Request(i, f"r{i}", 0.0, 64, 120) for i in range(4)]
    for r in reqs:
        e.submit(r, 0.0)
    step_until(e, lambda: any(r.status == PREEMPTED for r in reqs))
    victim = next(r for r in reqs if r.status == PREEMPTED)
    return record(e, reqs, victim, *abort(e, victim))


def abort_loading_from_cpu() -> dict[str, Any]:
    """vLLM's CPU offload tier: r1 shares r0's 128-token prompt, which the tier holds; it is
    admitted with its blocks allocated and waits for the load (WAITING_FOR_REMOTE_KVS) when it
    is aborted. The load runs to its end and admits nobody."""
    cfg = EngineConfig(
        num_gpu_blocks=60,
        block_size=16,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        max_model_len=512,
        enable_prefix_caching=False,
    )
    conn = OffloadingConnector(100, StepCountTiming(STEP_S, 4, 1), 16, 1, False)
    e = engine(cfg, connector=conn)
    r0 = Request(0, "r0", 0.0, 128, 2, group=0, prefix_len=128)
    r1 = Request(1, "r1", 0.1, 160, 4, group=0, prefix_len=128)
    r2 = Request(2, "r2", 0.1, 40, 4)
    e.submit(r0, 0.0)
    e.run_until(0.1)
    e.submit(r1, 0.1)
    e.submit(r2, 0.1)
    step_until(e, lambda: r1.status == WAITING_FOR_REMOTE_KVS)
    out = record(e, [r0, r1, r2], r1, *abort(e, r1))
    out["holding_after"] = len(conn.holding)
    out["loaded_blocks"] = conn.stats.loaded_blocks
    return out


def pd_pair(role: str) -> tuple[Engine, PDConnector, list[Request]]:
    """A P/D connector on one replica: r0 is a decode leg (its prompt's KV pulled from a prefill
    replica) or a prefill leg (its blocks kept for the send when it finishes)."""
    cfg = EngineConfig(
        num_gpu_blocks=60, block_size=16, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=512
    )
    remote_prefill, remote_decode = ({0}, set()) if role == "decode" else (set(), {0})
    conn = PDConnector(StepCountTiming(STEP_S, 5), remote_prefill, remote_decode, send_steps=2, step_s=STEP_S)
    e = engine(cfg, connector=conn)
    reqs = [Request(0, "r0", 0.0, 200, 1 if role == "prefill" else 6), Request(1, "r1", 0.0, 50, 6)]
    for r in reqs:
        e.submit(r, 0.0)
    return e, conn, reqs


def abort_waiting_for_remote_kv() -> dict[str, Any]:
    """A decode leg waiting for its prompt's KV from the prefill replica (the pull in flight)."""
    e, conn, reqs = pd_pair("decode")
    step_until(e, lambda: reqs[0].status == WAITING_FOR_REMOTE_KVS)
    out = record(e, reqs, reqs[0], *abort(e, reqs[0]))
    out["holding_after"] = len(conn.holding)
    out["admitted_after_load"] = 0 in conn.finished_recving
    return out


def abort_running_prefill_leg() -> dict[str, Any]:
    """A prefill leg aborted mid-prefill: nothing is sent, its blocks go straight back."""
    e, conn, reqs = pd_pair("prefill")
    step_until(e, lambda: reqs[0].status == RUNNING and 0 < reqs[0].num_computed < reqs[0].prompt_len)
    out = record(e, reqs, reqs[0], *abort(e, reqs[0]))
    out["kept_after"] = len(conn.kept_blocks())
    out["sends"] = conn.stats.store_jobs
    return out


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "waiting": lambda: abort_waiting(False),
    "waiting_fast": lambda: abort_waiting(True),
    "running": lambda: abort_running(False),
    "running_fast": lambda: abort_running(True),
    "preempted": lambda: abort_preempted(False),
    "preempted_fast": lambda: abort_preempted(True),
    "loading_from_cpu": abort_loading_from_cpu,
    "waiting_for_remote_kv": abort_waiting_for_remote_kv,
    "running_prefill_leg": abort_running_prefill_leg,
}


if __name__ == "__main__":
    json.dump({"core": _native.core(), "runs": {k: f() for k, f in SCENARIOS.items()}}, sys.stdout)
