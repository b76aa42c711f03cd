"""Routing arrivals to replicas, from what each replica's engine shows at the arrival time."""

from __future__ import annotations

import random
from collections.abc import Sequence

from servesim.cluster.config import RouterSpec
from servesim.engine.engine import Engine
from servesim.engine.request import Request
from servesim.errors import InputError


def outstanding(engine: Engine) -> int:
    return len(engine.scheduler.running) + len(engine.scheduler.waiting)


def cached_prefix_blocks(engine: Engine, r: Request) -> int:
    """Leading blocks of ``r`` whose content the replica's prefix cache holds right now (what
    llm-d's precise prefix scorer learns from vLLM's KV events)."""
    if not engine.kv.caching:
        return 0
    engine.kv.init_request(r)
    cached = engine.pool.cached
    n = 0
    for i in range(r.num_shared_blocks):
        if engine.kv.block_key(r, i) not in cached:
            break
        n += 1
    return n


def cpu_prefix_blocks(engine: Engine, r: Request, start: int) -> int:
    """Blocks of ``r`` past its first ``start`` (the GPU hit) that the replica's CPU offload tier
    holds, in whole chunks from the one holding block ``start`` on, as the connector's admission
    lookup would find them (0 without a tier); llm-d's tiered prefix index sees the same from
    vLLM's KV events of the CPU medium."""
    conn = engine.kv_connector
    if conn is None:
        return 0
    engine.kv.init_request(r)
    ref = conn.manager.ref
    bpc = conn.bpc
    c = start // bpc
    while (c + 1) * bpc <= r.num_shared_blocks and engine.kv.block_key(r, (c + 1) * bpc - 1) in ref:
        c += 1
    return max(0, c * bpc - start)


class Router:
    """Picks a replica index for each request; deterministic for a given seed."""

    def __init__(self, spec: RouterSpec) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        self._turn = 0

    def pick(self, r: Request, engines: Sequence[Engine], eligible: Sequence[int]) -> int:
        if not eligible:
            raise InputError("no replica can take requests")
        policy = self.spec.policy
        self._turn += 1
        order = list(eligible)
        if policy == "round_robin":
            return order[(self._turn - 1) % len(order)]
        if policy == "random":
            return self._rng.choice(order)
        if policy == "power_of_two":
            if len(order) == 1:
                return order[0]
            a, b = self._rng.sample(order, 2)
            return a if outstanding(engines[a]) <= outstanding(engines[b]) else b
        shift = self._turn % len(order)
        order = order[shift:] + order[:shift]  # ties rotate instead of piling on replica 0
        if policy == "least_outstanding":
            return min(order, key=lambda k: outstanding(engines[k]))
        if policy == "least_kv":
            return min(order, key=lambda k: engines[k].pool.usage())
        if policy == "vllm_dp":

            def dp_score(k: int) -> float:
                e = engines[k]
                w = len(e.scheduler.waiting)
                return w + len(e.scheduler.running) + w * 6.0 * max(0.0, e.pool.usage() - 0.5)

            return min(order, key=dp_score)
        return self._prefix_aware(r, engines, order)

    def _prefix_aware(self, r: Request, engines: Sequence[Engine], order: list[int]) -> int:
        spec = self.spec
        queues = {k: outstanding(engines[k]) for k in order}
        qmax, qmin = max(queues.values()), min(queues.values())
        total_blocks = max(1, (r.prompt_len + r.num_output) // engines[order[0]].kv.block_size)

        def score(k: int) -> float:
            queue = 1.0 if qmax == qmin else (qmax - queues[k]) / (qmax - qmin)
            gpu = cached_prefix_blocks(engines[k], r)
            cpu = cpu_prefix_blocks(engines[k], r, gpu) if spec.cpu_prefix_weight else 0
            prefix = (gpu + spec.cpu_prefix_weight * cpu) / total_blocks
            kv = 1.0 - engines[k].pool.usage()
            return spec.prefix_weight * prefix + spec.queue_weight * queue + spec.kv_weight * kv

        return max(order, key=score)
