"""Prefill/decode disaggregation: a prefill pool, a decode pool, and the KV transfers between them.

As deployed with vLLM's NixlConnector behind a P/D proxy (vLLM's toy proxy, llm-d): a request
is routed to a prefill replica (prefix-aware pick) and run there with ``max_tokens`` 1, its
blocks kept for the transfer (``PDConnector``'s prefill leg). When it finishes, the proxy sends
it to a decode replica (least KV usage) with its prompt's KV remote: the decode replica
allocates blocks and waits (WAITING_FOR_REMOTE_KVS) while its worker pulls the KV; the first
decode step recomputes the last prompt token and samples the first output token. Prompts
shorter than ``short_prompt_tokens`` skip disaggregation: the decode replica prefills them itself.

A transfer starts when the decode replica has allocated the blocks (vLLM's pull), queues behind
the transfers already bound for that decode replica (its inbound link: every TP rank's NIC
carries its own KV shard, so the shards move in parallel), then takes ``setup_latency +
wire bytes / (bandwidth × efficiency)`` (``RecoveryContext.transfer_s``, the migration model).
The prefill replica frees the blocks when the transfer has landed.

Replicas run step by step in time order (an event of one can change another's next step), on
``Engine`` exactly as stand-alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from servesim.cluster.config import RouterSpec
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.router import Router
from servesim.cluster.simulate import Replica
from servesim.engine.engine import Engine, PendingStep, TraceArrays
from servesim.engine.kv_pd import PDConnector
from servesim.engine.replica import ReplicaView
from servesim.engine.request import OUTCOME_FINISHED, Request
from servesim.errors import InputError, InternalError, shown
from servesim.traces.schema import Trace


class LinkPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    bandwidth_gbps: float = Field(gt=0)
    setup_latency_ms: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)
    sources: dict[str, str]


def link_presets() -> dict[str, LinkPreset]:
    """The catalog's KV-transfer links (``data/perf/links.yaml``), by name."""
    text = (resources.files("servesim") / "data" / "perf" / "links.yaml").read_text(encoding="utf-8")
    return {k: LinkPreset.model_validate(v) for k, v in yaml.safe_load(text)["links"].items()}


def link_preset(name: str) -> LinkPreset:
    presets = link_presets()
    if name not in presets:
        raise InputError(f"unknown link {shown(name)}; presets: {', '.join(sorted(presets))}")
    return presets[name]


class PoolSpec(BaseModel):
    """One pool of a disaggregated cluster: how many replicas, on what, with which vLLM keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    replicas: int = Field(1, ge=1, le=64)
    gpu: str | None = Field(None, description="GPU of this pool (default: the run's).")
    tp: int | None = Field(None, ge=1, description="Tensor-parallel degree of a replica of this pool.")
    config: dict[str, object] = Field(default_factory=dict, description="vLLM keys of every replica.")


class DisaggSpec(BaseModel):
    """A disaggregated cluster (``servesim cluster --cluster FILE`` with ``prefill``/``decode``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill: PoolSpec = Field(default_factory=PoolSpec)
    decode: PoolSpec = Field(default_factory=PoolSpec)
    link: str = Field("rdma-400g", description="KV-transfer link preset (data/perf/links.yaml).")
    short_prompt_tokens: int = Field(
        0, ge=0, description="Prompts shorter than this are prefilled on their decode replica."
    )
    model: str = Field("llama-3.1-8b", description="Catalog name of the served model (its KV size).")

    def context(self) -> RecoveryContext:
        """The transfer cost model (``pd_context``)."""
        return pd_context(self.model, self.prefill.tp, self.decode.tp, self.link)


def pd_context(model: str, prefill_tp: int | None, decode_tp: int | None, link: str) -> RecoveryContext:
    """The transfer cost model: the served model's KV per rank over the preset link; the smaller
    TP degree of the two pools sets the shard each rank moves."""
    from servesim.perf import load_catalog
    from servesim.perf.catalog import resolve_model

    preset = link_preset(link)
    return RecoveryContext(
        model=resolve_model(model, load_catalog()),
        tp=min(prefill_tp or 1, decode_tp or 1),
        bandwidth_gbps=preset.bandwidth_gbps,
        transfer_efficiency=preset.efficiency,
        setup_latency_s=preset.setup_latency_ms / 1000.0,
    )


@dataclass
class Transfer:
    """One prompt's KV moved from a prefill replica to a decode replica."""

    req_id: str
    prefill: str
    decode: str
    blocks: int
    tokens: int
    ready_s: float  # the decode replica allocated the blocks (the pull is issued)
    start_s: float  # the link is free for it
    end_s: float  # landed; the prefill replica frees its blocks


@dataclass
class PDRun:
    """The raw outcome: engines, requests on each leg, transfers."""

    trace: Trace
    prefill: list[Engine]
    decode: list[Engine]
    prefill_req: dict[int, Request]
    decode_req: dict[int, Request]
    prefill_of: dict[int, int]  # request idx -> prefill replica index
    decode_of: dict[int, int]
    transfers: dict[int, Transfer] = field(default_factory=dict)
    local: set[int] = field(default_factory=set)  # short prompts prefilled on the decode replica


class PDCluster:
    """A prefill pool and a decode pool on one clock; see the module docstring."""

    def __init__(
        self,
        trace: Trace,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        link: RecoveryContext,
        *,
        short_prompt_tokens: int = 0,
        prefill_router: RouterSpec | None = None,
        decode_router: RouterSpec | None = None,
    ) -> None:
        if not prefill or not decode:
            raise InputError("a disaggregated cluster needs at least one prefill and one decode replica")
        if short_prompt_tokens < 0:
            raise InputError(f"short_prompt_tokens must be >= 0, got {short_prompt_tokens}")
        self.trace = trace
        self.arrays = TraceArrays(trace)
        self.link = link
        self.short = short_prompt_tokens
        self.p_router = Router(prefill_router or RouterSpec(policy="prefix_aware"))
        self.d_router = Router(decode_router or RouterSpec(policy="least_kv"))
        self.p_specs = list(prefill)
        self.d_specs = list(decode)
        self.p_eng = [self._engine(s, None) for s in prefill]
        self.d_eng = [self._engine(s, k) for k, s in enumerate(decode)]
        self.p_views = [ReplicaView(e) for e in self.p_eng]
        self.d_views = [ReplicaView(e) for e in self.d_eng]
        self._link_free = [0.0] * len(decode)  # each decode replica's inbound link
        self.run_ = PDRun(trace, self.p_eng, self.d_eng, {}, {}, {}, {})

    def _engine(self, spec: Replica, decode_k: int | None) -> Engine:
        if decode_k is None:
            conn = PDConnector()
        else:

            def due(r: Request, now: float, end: float, n_blocks: int, k: int = decode_k) -> float:
                return self._transfer(k, r, now, n_blocks)

            conn = PDConnector(recv_due=due)
        return Engine(
            self.arrays,
            spec.config,
            spec.step_time,
            fast=False,
            external_arrivals=True,
            name=spec.name,
            kv_connector=conn,
        )

    def _transfer(self, k: int, r: Request, now: float, n_blocks: int) -> float:
        """The decode replica ``k`` pulls ``r``'s prompt KV: queue on its link, then the wire."""
        run = self.run_
        p = run.prefill_of[r.idx]
        if r.idx in run.transfers:
            raise InternalError(f"invariant broken: {r.req_id}'s KV transferred twice")
        tokens = n_blocks * self.d_specs[k].config.block_size
        start = max(now, self._link_free[k])
        end = start + self.link.setup_latency_s + self.link.transfer_s(tokens)
        self._link_free[k] = end
        run.transfers[r.idx] = Transfer(
            r.req_id, self.p_specs[p].name, self.d_specs[k].name, n_blocks, tokens, now, start, end
        )
        conn = self.p_eng[p].kv_connector
        if not isinstance(conn, PDConnector):
            raise InternalError("invariant broken: a prefill replica without its P/D connector")
        conn.send_done(r.idx, end)
        return end

    def run(self) -> PDRun:
        arr = self.arrays
        engines = self.p_eng + self.d_eng
        n_p = len(self.p_eng)
        inflight: list[PendingStep | None] = [None] * len(engines)
        nxt = 0
        while True:
            t_arr = arr.arrival[nxt] if nxt < arr.n else math.inf
            for k, e in enumerate(engines):
                if inflight[k] is None:
                    inflight[k] = e.begin_step(t_arr)
            k_step, t_step = -1, math.inf
            for k, p in enumerate(inflight):
                if p is not None and p.end < t_step:
                    k_step, t_step = k, p.end
            if k_step >= 0 and t_step <= t_arr:
                p = inflight[k_step]
                if p is None:
                    raise InternalError("invariant broken: no step in flight")
                finished = engines[k_step].end_step(p)
                inflight[k_step] = None
                if k_step < n_p:
                    for r in finished:
                        self._hand_off(r, t_step)
                continue
            if t_arr == math.inf:
                break
            self._arrive(arr.make_request(nxt), arr.make_request(nxt))
            nxt += 1
        for e in engines:
            e.finish()
        check_pd_invariants(self.run_)
        return self.run_

    def _arrive(self, r: Request, d_copy: Request) -> None:
        run = self.run_
        t = r.arrival
        if r.prompt_len < self.short:
            k = self.d_router.pick(d_copy, self.d_views, range(len(self.d_eng)))
            run.local.add(r.idx)
            run.decode_req[r.idx] = d_copy
            run.decode_of[r.idx] = k
            self.d_eng[k].submit(d_copy, t)
            return
        k = self.p_router.pick(r, self.p_views, range(len(self.p_eng)))
        r.max_tokens = 1  # the prefill leg: one token, its KV kept for the decode replica
        conn = self.p_eng[k].kv_connector
        if not isinstance(conn, PDConnector):
            raise InternalError("invariant broken: a prefill replica without its P/D connector")
        conn.mark_remote_decode(r.idx)
        run.prefill_req[r.idx] = r
        run.prefill_of[r.idx] = k
        run.decode_req[r.idx] = d_copy  # submitted when the prefill leg finishes
        self.p_eng[k].submit(r, t)

    def _hand_off(self, r: Request, t: float) -> None:
        """The prefill leg finished at ``t``: the proxy sends the request to a decode replica."""
        run = self.run_
        d = run.decode_req[r.idx]
        k = self.d_router.pick(d, self.d_views, range(len(self.d_eng)))
        conn = self.d_eng[k].kv_connector
        if not isinstance(conn, PDConnector):
            raise InternalError("invariant broken: a decode replica without its P/D connector")
        conn.mark_remote_prefill(r.idx)
        run.decode_of[r.idx] = k
        self.d_eng[k].submit(d, t)


def check_pd_invariants(run: PDRun) -> None:
    """docs/invariants.md (P/D): every disaggregated request's KV transferred exactly once, none
    decoded before its KV landed, none lost (each finished on a decode replica)."""
    for idx, d in run.decode_req.items():
        if d.outcome != OUTCOME_FINISHED:
            raise InternalError(f"invariant broken: {d.req_id} did not finish (outcome {d.outcome})")
        if idx in run.local:
            continue
        x = run.transfers.get(idx)
        if x is None:
            raise InternalError(f"invariant broken: {d.req_id}'s KV never transferred")
        conn = run.decode[run.decode_of[idx]].kv_connector
        p_conn = run.prefill[run.prefill_of[idx]].kv_connector
        if not isinstance(conn, PDConnector) or not isinstance(p_conn, PDConnector):
            raise InternalError("invariant broken: a replica without its P/D connector")
        if conn.recv_done.get(idx, math.inf) < x.end_s or d.first_scheduled < conn.recv_done[idx]:
            raise InternalError(f"invariant broken: {d.req_id} decoded before its KV landed")
        if p_conn.sent.get(idx, -1.0) < x.end_s:
            raise InternalError(f"invariant broken: {d.req_id}'s prefill blocks freed before the transfer")
    if len(run.transfers) != len(run.decode_req) - len(run.local):
        raise InternalError("invariant broken: transfers and disaggregated requests differ")
    if len(run.decode_req) != len(run.trace):
        raise InternalError("invariant broken: requests lost")


__all__ = [
    "DisaggSpec",
    "PDCluster",
    "PDRun",
    "PoolSpec",
    "Transfer",
    "check_pd_invariants",
    "link_preset",
    "link_presets",
    "pd_context",
]
