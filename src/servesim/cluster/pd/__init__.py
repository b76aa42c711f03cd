"""Prefill/decode disaggregation: a prefill pool, a decode pool, and the KV transfers between them.

As deployed with vLLM's NixlConnector behind a P/D proxy (vLLM's toy proxy, llm-d): a request
is routed to a prefill replica (prefix-aware pick) and run there with ``max_tokens`` 1, its
blocks kept for the transfer (``PDConnector``'s prefill leg). When it finishes, the proxy sends
it to a decode replica (least KV usage) with its prompt's KV remote: the decode replica
allocates blocks and waits (WAITING_FOR_REMOTE_KVS) while its worker pulls the KV; the first
decode step recomputes the last prompt token and samples the first output token. Prompts
shorter than ``short_prompt_tokens`` skip disaggregation: the decode replica prefills them itself.

A transfer starts when the decode replica has allocated the blocks (vLLM's pull), queues until
both the prefill replica's outbound link and the decode replica's inbound link are free (every
TP rank's NIC carries its own KV shard, so the shards move in parallel), then takes
``setup_latency + wire bytes / (bandwidth × efficiency)`` (``RecoveryContext.transfer_s``, the
migration model). The prefill replica frees the blocks when the transfer has landed.

Failures (``failures``: replicas of either pool by name) are handled as docs/cluster.md
("Failures in either pool") says: a lost prefill replica's prefills run again elsewhere and the
KV it held for transfers is recomputed on the decode side; a lost decode replica's requests are
re-routed, re-transferred from the prefill side (which holds the KV until it has been read) or
recomputed, as the recovery planner's ``decide_job`` chooses. ``PDRun.recoveries`` says what
became of each.

Replicas run step by step in time order (an event of one can change another's next step), on
``Engine`` exactly as stand-alone.

Modules: ``links`` (the link presets, the transfer cost model), ``spec`` (the pools as stated),
``records`` (transfers, recoveries, the raw run), ``core`` (engines, transfers, routing),
``failures`` (losses and comebacks), ``sim`` (``PDCluster``: the clock), ``state`` and ``view``
(what snapshots and timelines read), ``invariants`` (docs/invariants.md's checks).
"""

from __future__ import annotations

from servesim.cluster.pd.invariants import check_pd_invariants
from servesim.cluster.pd.links import LinkPreset, link_preset, link_presets, pd_context
from servesim.cluster.pd.records import (
    ABORTED,
    RECOVERY_ACTIONS,
    REJECTED,
    SERVED,
    PDFailure,
    PDRecovery,
    PDRun,
    Transfer,
)
from servesim.cluster.pd.sim import PDCluster
from servesim.cluster.pd.spec import DisaggSpec, PoolSpec, parse_pool_node
from servesim.cluster.pd.state import LegFigures, PDState

__all__ = [
    "ABORTED",
    "RECOVERY_ACTIONS",
    "REJECTED",
    "SERVED",
    "DisaggSpec",
    "LegFigures",
    "LinkPreset",
    "PDCluster",
    "PDFailure",
    "PDRecovery",
    "PDRun",
    "PDState",
    "PoolSpec",
    "Transfer",
    "check_pd_invariants",
    "link_preset",
    "link_presets",
    "parse_pool_node",
    "pd_context",
]
