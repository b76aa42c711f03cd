"""What a cluster is made of: replicas, a router, failure events and how KV state survives them."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError, shown

RouterPolicy = Literal[
    "round_robin",
    "random",
    "least_outstanding",
    "least_kv",
    "power_of_two",
    "prefix_aware",
    "vllm_dp",
    "lora_aware",
]


class RouterSpec(BaseModel):
    """How arrivals are spread over replicas.

    * ``round_robin``, ``random``: oblivious.
    * ``least_outstanding``: fewest running + waiting requests.
    * ``least_kv``: lowest KV-cache usage.
    * ``power_of_two``: two replicas drawn at random, the one with fewer outstanding requests.
    * ``prefix_aware``: llm-d / Gateway API Inference Extension style scoring, the highest
      Σ weight × scorer wins: prefix = cached leading blocks / blocks of the request, queue =
      (max q − q)/(max q − min q), kv = 1 − usage (defaults 3, 1, 1 as commonly shipped). On
      replicas with a CPU offload tier (``kv_offloading_size``) a block the tier holds past the
      GPU hit counts ``cpu_prefix_weight`` of a GPU block: it saves the same prefill but has to
      be loaded over the host link first, and the request waits for the load (servesim's
      default 0.5, an assumption; 0 scores GPU hits only, as before the tier existed).
    * ``vllm_dp``: vLLM's data-parallel front end (``router.dp_score``, the rule
      ``--data-parallel-size`` runs too): lowest max(outstanding, waiting + running) +
      6·waiting·max(0, kv − 0.5), ties to the first from a start that moves on by one replica per
      request (the first request's scan starts at replica 0, as vLLM's).
    * ``lora_aware``: for a request with a LoRA adapter, the fewest outstanding among the
      replicas already running that adapter, else among those with a free adapter slot (fewer
      distinct adapters running than ``max_loras``), else among all: it does not wait behind
      another adapter's batch on a replica whose slots are full (vLLM skips it there), as the
      LoRA-affinity routing of Kubernetes inference gateways does. Requests without an adapter:
      the fewest outstanding.

    Ties go to the lowest replica index after a seeded rotation, so runs are reproducible.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: RouterPolicy = "least_outstanding"
    seed: int = Field(0, ge=0)
    prefix_weight: float = Field(3.0, ge=0)
    queue_weight: float = Field(1.0, ge=0)
    kv_weight: float = Field(1.0, ge=0)
    cpu_prefix_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="What a CPU-tier block is worth against a GPU-cached block (prefix_aware).",
    )


class FailureEvent(BaseModel):
    """A replica is reclaimed at ``time_s`` (optionally announced ``warning_s`` earlier, when it
    stops receiving new requests), and optionally comes back empty ``recover_after_s`` later."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    node: str = Field(min_length=1)
    time_s: float = Field(ge=0, allow_inf_nan=False)
    warning_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    recover_after_s: float | None = Field(None, gt=0, allow_inf_nan=False)


KVCheckpointing = Literal["none", "on_warning", "continuous"]
"""What KV survives a node failure: nothing; a snapshot taken when the failure is announced
(stale by the warning lead); or all of it (KV replicated as it is computed, e.g. to CPU/remote)."""


def failure_schedule(
    nodes: list[str],
    horizon_s: float,
    mtbf_s: float,
    *,
    warning_s: float = 0.0,
    recover_after_s: float | None = None,
    seed: int = 0,
) -> list[FailureEvent]:
    """Seeded failures: each node fails after exponential times with mean ``mtbf_s`` (counted
    from its recovery), within ``horizon_s``."""
    rng = np.random.default_rng(seed)
    events: list[FailureEvent] = []
    for node in nodes:
        t = 0.0
        while True:
            t += float(rng.exponential(mtbf_s))
            if t >= horizon_s:
                break
            events.append(
                FailureEvent(node=node, time_s=t, warning_s=warning_s, recover_after_s=recover_after_s)
            )
            if recover_after_s is None:
                break
            t += recover_after_s
    return sorted(events, key=lambda e: (e.time_s, e.node))


class FailurePlan(BaseModel):
    """A list of failure events, validated against each other."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    events: list[FailureEvent] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> FailurePlan:
        down_until: dict[str, float] = {}
        for e in sorted(self.events, key=lambda e: e.time_s):
            if e.time_s < down_until.get(e.node, -1.0):
                raise InputError(f"node {shown(e.node)} fails at {e.time_s} s while already down")
            down_until[e.node] = float("inf") if e.recover_after_s is None else e.time_s + e.recover_after_s
        return self
