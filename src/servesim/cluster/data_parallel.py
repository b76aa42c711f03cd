"""One ``vllm serve --data-parallel-size D`` deployment: D rank engines behind vLLM's DP load
balancer, stepping in lockstep for a MoE model.

Each DP rank is an engine of its own (its scheduler, its KV cache: ``servesim.engine.Engine``);
arrivals are spread by ``DPLoadBalancer``, vLLM's rule. Two ways the ranks run, as vLLM's
engine cores do (``vllm/v1/engine/core.py``):

* **Dense model**: ``EngineCoreProc`` per rank, independent (``reconfigure_for_independent_dp_rank``):
  each rank steps on its own clock, as a replica of a cluster does.
* **MoE model**: ``DPEngineCoreProc.run_busy_loop``: while the wave runs, every rank steps
  together: a rank with work runs its scheduled batch, an idle one a dummy batch
  (``execute_dummy_batch``), and the step lasts as long as the slowest rank's
  (``perf.expert_parallel.DataParallelStepTime.lockstep``: padded token counts, the experts'
  all-gather / reduce-scatter). Every ``dp_sync_interval`` steps (and at the first) the ranks
  agree whether any has unfinished requests (``_has_global_unfinished_reqs``); when none has,
  the wave ends and the ranks stop until the next arrival. A request arriving during a step
  joins its rank's next step.

The result is a ``ClusterRun`` of the D rank engines (``build_cluster_result`` makes it the
usual fleet result: latencies, goodput, per-rank figures), with ``DataParallelStats`` beside it.
Arrivals at a step's end are routed after the step's results apply, as ``ClusterSimulator``
orders them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from servesim.cluster.fleet import Replica
from servesim.cluster.router import dp_score
from servesim.cluster.simulate import ClusterRun
from servesim.engine.engine import Engine
from servesim.engine.replica import ReplicaView
from servesim.engine.step_plan import PendingStep
from servesim.engine.trace_arrays import TraceArrays
from servesim.errors import InputError
from servesim.events import Observer
from servesim.perf.expert_parallel import DP_SYNC_INTERVAL, DataParallelStepTime
from servesim.traces.schema import Trace


class DPLoadBalancer:
    """vLLM's DP load balancer (``DPLBAsyncMPClient.get_core_engine_for_request``,
    vllm/v1/engine/core_client.py), one API server (``client_count`` 1, ``client_index`` 0).

    Each rank's score is ``max(in_flight, waiting + running)`` plus, when it has waiting
    requests, ``waiting x 6 x max(0, kv_cache_usage - 0.5)`` (a queue on a KV-bound rank drains
    slowly); the lowest score wins, scanning from ``eng_start_index`` so that ties go to the
    first rank from there (strict ``<``); the start then moves on by one rank per request.
    vLLM reads waiting, running and KV usage from the coordinator's snapshot (published at most
    every 100 ms) and its own in-flight count exactly; servesim reads all of them as of the
    arrival (the in-flight floor makes the snapshot's age matter only for the KV penalty)."""

    def __init__(self) -> None:
        self.start = 0

    def pick(self, counts: Sequence[tuple[int, int, float]], inflight: Sequence[int]) -> int:
        """The rank for the next request: ``counts`` is each rank's (waiting, running, KV usage),
        ``inflight`` its requests routed and not finished."""
        n = len(counts)
        best, least = 0, float(sys.maxsize)
        for i in range(n):
            idx = (self.start + i) % n
            waiting, running, kv = counts[idx]
            score = dp_score(waiting, running, kv, inflight[idx])
            if score < least:
                least, best = score, idx
        self.start = (self.start + 1) % n
        return best


class DataParallelStats(BaseModel):
    """What the ranks did besides serving: the figures a DP deployment adds to a run's result."""

    data_parallel_size: int
    lockstep: bool = Field(description="The ranks stepped together (a MoE model) or each on its own.")
    group_steps: int = Field(description="Lockstep steps of the whole group (0 when independent).")
    dummy_rank_steps: int = Field(description="Rank-steps spent on a dummy batch (idle rank in a wave).")
    waves: int = Field(description="Waves ended (the ranks agreed nobody had work and stopped).")
    routed: list[int] = Field(description="Requests the load balancer sent to each rank.")


@dataclass
class _Group:
    arrays: TraceArrays
    engines: list[Engine]
    views: list[ReplicaView]
    routed: list[int]
    lb: DPLoadBalancer = field(default_factory=DPLoadBalancer)

    def route(self, i: int, t: float) -> None:
        r = self.arrays.make_request(i)
        counts = [(v.num_waiting, v.num_running, v.kv_usage) for v in self.views]
        inflight = [self.routed[k] - e.num_closed for k, e in enumerate(self.engines)]
        k = self.lb.pick(counts, inflight)
        self.routed[k] += 1
        self.engines[k].submit(r, t)


def _has_work(e: Engine) -> bool:
    """vLLM's ``scheduler.has_unfinished_requests`` (a step still held by async scheduling too)."""
    return bool(e.live) or e._held is not None


def simulate_data_parallel(
    trace: Trace,
    ranks: Sequence[Replica],
    lockstep: DataParallelStepTime | None,
    *,
    fast: bool = True,
    observers: Sequence[Observer] = (),
) -> tuple[ClusterRun, DataParallelStats]:
    """Run ``trace`` on the DP ranks ``ranks``; ``lockstep``: the group's step time (a MoE
    model), None for independent ranks (a dense one). See the module docstring."""
    if not ranks:
        raise InputError("--data-parallel-size must be >= 1")
    arrays = TraceArrays(trace)
    engines = [
        Engine(
            arrays,
            rep.config,
            rep.step_time,
            fast=fast,
            stretch=False,
            external_arrivals=True,
            observers=observers,
            name=rep.name,
            kv_connector=rep.kv_connector() if rep.kv_connector is not None else None,
        )
        for rep in ranks
    ]
    group = _Group(arrays, engines, [ReplicaView(e) for e in engines], [0] * len(ranks))
    stats = _independent(group) if lockstep is None else _lockstep(group, lockstep)
    for e in engines:
        e.finish()
    run = ClusterRun(trace, list(ranks), engines, list(range(len(ranks))))
    return run, stats


def _independent(g: _Group) -> DataParallelStats:
    """Dense ranks: each steps on its own clock; step ends before arrivals at the same time."""
    engines, arrival, n = g.engines, g.arrays.arrival, g.arrays.n
    pend: list[PendingStep | None] = [None] * len(engines)
    i = 0
    while True:
        t_arr = arrival[i] if i < n else math.inf
        for k, e in enumerate(engines):
            if pend[k] is None and e.now < t_arr:  # arrivals at its clock come first
                pend[k] = e.begin_step(math.inf)
        k_step, t_step = -1, math.inf
        for k, p in enumerate(pend):
            if p is not None and p.start + p.duration < t_step:
                k_step, t_step = k, p.start + p.duration
        if k_step >= 0 and t_step <= t_arr:
            p = pend[k_step]
            pend[k_step] = None
            if p is not None:
                engines[k_step].end_step(p)
            continue
        if t_arr == math.inf:
            break
        g.route(i, t_arr)
        i += 1
    return DataParallelStats(
        data_parallel_size=len(engines),
        lockstep=False,
        group_steps=0,
        dummy_rank_steps=0,
        waves=0,
        routed=g.routed,
    )


def _lockstep(g: _Group, model: DataParallelStepTime) -> DataParallelStats:
    """MoE ranks: one step of the whole group at a time (``DPEngineCoreProc.run_busy_loop``)."""
    engines, arrival, n = g.engines, g.arrays.arrival, g.arrays.n
    t, i = 0.0, 0
    wave = False
    counter = steps = dummies = waves = 0
    while True:
        while i < n and arrival[i] <= t:
            g.route(i, arrival[i])
            i += 1
            wave = True
        busy = [_has_work(e) for e in engines]
        if not wave and not any(busy):
            if i >= n:
                break
            t = arrival[i]
            continue
        pend: list[PendingStep | None] = []
        for e, b in zip(engines, busy, strict=True):
            if e.now < t:
                e.now = t
            pend.append(e.begin_step(math.inf) if b else None)
        dt = model.lockstep([p.batch if p is not None else None for p in pend])
        t_end = t + dt
        while i < n and arrival[i] < t_end:  # they see the ranks as the step left them: in flight
            g.route(i, arrival[i])
            i += 1
        for e, p in zip(engines, pend, strict=True):
            if p is None:
                dummies += 1
            else:
                p.duration = dt
                e.end_step(p)
        steps += 1
        counter += 1
        t = t_end
        if counter == 1 or counter % DP_SYNC_INTERVAL == 0:
            wave = any(_has_work(e) for e in engines)
            if not wave:
                counter = 0
                waves += 1
    return DataParallelStats(
        data_parallel_size=len(engines),
        lockstep=True,
        group_steps=steps,
        dummy_rank_steps=dummies,
        waves=waves,
        routed=g.routed,
    )


__all__ = ["DPLoadBalancer", "DataParallelStats", "simulate_data_parallel"]
