"""Routing arrivals to replicas, from what each replica shows at the arrival time (its
``ReplicaView``: queue lengths, KV usage, what its prefix cache holds)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from servesim.cluster.config import RouterSpec
from servesim.engine.replica import ReplicaView
from servesim.engine.request import Request
from servesim.errors import InputError

#: Policies that read nothing of the replicas, and those that read only their queue lengths
#: (``ReplicaView.outstanding``); the others read KV usage and prefix caches too.
BLIND_POLICIES = frozenset({"round_robin", "random"})
QUEUE_POLICIES = frozenset({"least_outstanding", "power_of_two"})


def dp_score(waiting: int, running: int, kv_usage: float, in_flight: int) -> float:
    """vLLM's data-parallel load balancer's score of one engine (``DPLBAsyncMPClient.
    get_core_engine_for_request``, vllm/v1/engine/core_client.py, one API server): its requests
    ``max(in_flight, waiting + running)`` plus, while some wait, ``waiting x 6 x max(0,
    kv_usage - 0.5)`` (a queue on a KV-bound engine drains slowly). The lowest wins, ties to the
    first from a start that moves on by one engine per request (``eng_start_index``). The one
    statement of the rule: the ``vllm_dp`` router and ``cluster.data_parallel.DPLoadBalancer``."""
    score = float(max(in_flight, waiting + running))
    if waiting:
        score += waiting * 6.0 * max(0.0, kv_usage - 0.5)
    return score


class Router:
    """Picks a replica index for each request; deterministic for a given seed."""

    def __init__(self, spec: RouterSpec) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        self._turn = 0

    @property
    def reads(self) -> str:
        """What the policy reads of the replicas at an arrival: "nothing", "queues" (their
        ``outstanding``) or "state" (KV usage, prefix caches too). A cluster need not advance a
        replica to an arrival that cannot change what its router reads of it there."""
        policy = self.spec.policy
        if policy in BLIND_POLICIES:
            return "nothing"
        return "queues" if policy in QUEUE_POLICIES else "state"

    def pick(
        self,
        r: Request,
        replicas: Sequence[ReplicaView],
        eligible: Sequence[int],
        queues: Sequence[int] | None = None,
    ) -> int:
        """The replica for ``r`` among ``eligible``; ``queues``, when given, is each replica's
        ``outstanding`` already read (a cluster keeps them: the same picks, without a call into
        every replica at every arrival)."""
        if not eligible:
            raise InputError("no replica can take requests")
        policy = self.spec.policy
        self._turn += 1
        if queues is not None and policy == "least_outstanding" and len(eligible) == len(queues):
            return _least_queue(queues, self._turn % len(queues))
        order = list(eligible)
        if policy == "round_robin":
            return order[(self._turn - 1) % len(order)]
        if policy == "random":
            return self._rng.choice(order)
        if policy == "power_of_two":
            if len(order) == 1:
                return order[0]
            a, b = self._rng.sample(order, 2)
            if queues is not None:
                return a if queues[a] <= queues[b] else b
            return a if replicas[a].outstanding <= replicas[b].outstanding else b
        shift = self._turn % len(order)
        if policy == "least_outstanding":
            return _least_outstanding(replicas, order, shift)
        if policy == "lora_aware":
            able = _can_run_adapter(r, replicas, order)
            return _least_outstanding(replicas, able, shift % len(able))
        order = order[shift:] + order[:shift]  # ties rotate instead of piling on replica 0
        if policy == "least_kv":
            return min(order, key=lambda k: replicas[k].kv_usage)
        if policy == "vllm_dp":  # vLLM's start is 0 for the first request: one turn behind the rotation above
            start = (self._turn - 1) % len(order)
            scan = list(eligible)[start:] + list(eligible)[:start]
            return min(
                scan,
                key=lambda k: dp_score(
                    replicas[k].num_waiting,
                    replicas[k].num_running,
                    replicas[k].kv_usage,
                    replicas[k].outstanding,
                ),
            )
        return self._prefix_aware(r, replicas, order)

    def _prefix_aware(self, r: Request, replicas: Sequence[ReplicaView], order: list[int]) -> int:
        spec = self.spec
        queues = {k: replicas[k].outstanding for k in order}
        qmax, qmin = max(queues.values()), min(queues.values())
        total_blocks = max(1, (r.prompt_len + r.num_output) // replicas[order[0]].block_size)

        def score(k: int) -> float:
            queue = 1.0 if qmax == qmin else (qmax - queues[k]) / (qmax - qmin)
            gpu = replicas[k].cached_prefix_blocks(r)
            cpu = replicas[k].cpu_prefix_blocks(r, gpu) if spec.cpu_prefix_weight else 0
            prefix = (gpu + spec.cpu_prefix_weight * cpu) / total_blocks
            kv = 1.0 - replicas[k].kv_usage
            return spec.prefix_weight * prefix + spec.queue_weight * queue + spec.kv_weight * kv

        return max(order, key=score)


def _can_run_adapter(r: Request, replicas: Sequence[ReplicaView], order: list[int]) -> list[int]:
    """The replicas of ``order`` that ``lora_aware`` picks among for ``r``: those running its
    LoRA adapter with room in their batch (fewer outstanding than ``max_num_seqs``), else those
    with a free adapter slot (fewer distinct adapters running than ``max_loras``), else those
    running it, else all; all of ``order`` for a request without an adapter. Affinity first: a
    second replica that took the adapter while the first still had room would hold a slot the
    next request of another adapter needs, which then waits behind both (vLLM skips it while
    its adapter cannot be added); past the first's room the adapter spreads to a free slot."""
    if r.lora <= 0:
        return order
    roomy: list[int] = []
    free: list[int] = []
    full: list[int] = []
    for k in order:
        v = replicas[k]
        running = v.running_loras()
        if r.lora in running:
            (roomy if v.outstanding < v.max_num_seqs else full).append(k)
        elif len(running) < v.max_loras:
            free.append(k)
    return roomy or free or full or order


def _least_outstanding(replicas: Sequence[ReplicaView], order: list[int], shift: int) -> int:
    """The replica with the fewest outstanding requests, ties to the first from ``order[shift]``
    on (ties rotate instead of piling on replica 0): ``min`` over the rotated order, as one pass
    without building it (a router's pick is on every arrival, and a fleet's arrivals grow with
    its replicas)."""
    n = len(order)
    best = order[shift]
    least = replicas[best].outstanding
    for i in range(shift + 1, shift + n):
        k = order[i - n] if i >= n else order[i]
        v = replicas[k].outstanding
        if v < least:
            best, least = k, v
    return best


def _least_queue(queues: Sequence[int], shift: int) -> int:
    """``_least_outstanding`` over every replica, from their queue lengths: the first replica
    with the fewest from ``shift`` on, else from 0 (two passes in C, none in Python)."""
    least = min(queues)
    try:
        return queues.index(least, shift)
    except ValueError:
        return queues.index(least)
