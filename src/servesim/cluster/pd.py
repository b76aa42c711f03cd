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
"""

from __future__ import annotations

import heapq
import math
import sys
from bisect import insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.cluster.config import FailureEvent, FailurePlan, RouterSpec
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.router import Router
from servesim.cluster.simulate import Replica
from servesim.engine.engine import Engine, PendingStep, TraceArrays
from servesim.engine.kv_pd import PDConnector
from servesim.engine.replica import ReplicaView, close_unheld
from servesim.engine.request import (
    OUTCOME_ABORTED,
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOME_UNFINISHED,
    RUNNING,
    Request,
)
from servesim.errors import InputError, InternalError, describe, shown
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
    """One prompt's KV moved from a prefill replica to a decode replica (one leg)."""

    req_id: str
    prefill: str
    decode: str
    blocks: int
    tokens: int
    ready_s: float  # the decode replica allocated the blocks (the pull is issued)
    start_s: float  # both links are free for it
    end_s: float  # landed; the prefill replica frees its blocks (or when it was cut off)
    landed: bool = True  # False: an end of the link was lost mid-transfer (or the request aborted)
    aborted: bool = False  # cut because the client went away (``PDCluster.abort``)


@dataclass
class PDRecovery:
    """What became of one request when a replica it depended on was lost."""

    req_id: str
    time_s: float
    node: str  # the lost replica
    action: str  # see RECOVERY_ACTIONS
    target: str | None  # where it went on (None: parked, no replica of that pool up)
    reason: str = ""


RECOVERY_ACTIONS = {
    "re-prefill": "its prefill was under way (or queued) on the lost prefill replica: run again on another",
    "prefill-on-decode": "its KV was lost with the prefill replica before it was read: its decode "
    "replica recomputes the prompt",
    "re-route": "it was queued on the lost decode replica: sent to another (its KV still on the "
    "prefill side)",
    "re-transfer": "its KV was still held on the prefill side: read again by another decode replica "
    "(a new leg)",
    "recompute": "its KV existed only on the lost decode replica (or recomputing was cheaper): "
    "prompt and outputs so far recomputed on another",
}


@dataclass
class PDFailure:
    node: str
    pool: str  # "prefill" | "decode"
    time_s: float
    recover_s: float | None
    requests: int = 0  # requests the loss touched


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
    transfers: dict[int, Transfer] = field(default_factory=dict)  # the leg that landed, per request
    local: set[int] = field(default_factory=set)  # short prompts prefilled on the decode replica
    legs: list[Transfer] = field(default_factory=list)  # every transfer, landed or cut off
    failures: list[PDFailure] = field(default_factory=list)
    recoveries: list[PDRecovery] = field(default_factory=list)
    parked: list[int] = field(default_factory=list)  # never placed: no decode replica came back
    sender: dict[int, PDConnector] = field(default_factory=dict)  # who sent the landed leg
    receiver: dict[int, PDConnector] = field(default_factory=dict)  # who received it
    retired: list[Engine] = field(default_factory=list)  # engines of lost replicas
    num_online: int = 0  # requests submitted online (``PDCluster.submit``), beyond the trace's


def parse_pool_node(node: str, n_prefill: int, n_decode: int) -> tuple[str, int]:
    """A replica of a disaggregated cluster: ``p0``/``d1`` (their names) or ``prefill:0``/``decode:1``."""
    pool, sep, num = node.partition(":")
    if sep:
        tag = {"prefill": "p", "decode": "d"}.get(pool)
        if tag is None or not num.isdigit():
            raise InputError(f"unknown replica {shown(node)}: use prefill:N or decode:N (or pN / dN)")
    else:
        tag, num = node[:1], node[1:]
        if tag not in ("p", "d") or not num.isdigit():
            raise InputError(f"unknown replica {shown(node)}: use pN / dN or prefill:N / decode:N")
    k = int(num)
    n = n_prefill if tag == "p" else n_decode
    if k >= n:
        name = "prefill" if tag == "p" else "decode"
        raise InputError(f"no replica {shown(node)}: the {name} pool has {n} (0..{n - 1})")
    return ("prefill" if tag == "p" else "decode"), k


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
        failures: Sequence[FailureEvent] = (),
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
        self.p_alive = [True] * len(prefill)
        self.d_alive = [True] * len(decode)
        self._in_free = [0.0] * len(decode)  # each decode replica's inbound link
        self._out_free = [0.0] * len(prefill)  # each prefill replica's outbound link
        self._parked: list[Request] = []  # decode legs waiting for any decode replica to come back
        self.run_ = PDRun(trace, self.p_eng, self.d_eng, {}, {}, {}, {})
        self._events: list[tuple[float, int, int, str, str, int, FailureEvent]] = []
        names = [s.name for s in prefill] + [s.name for s in decode]
        for i, f in enumerate(sorted(failures, key=lambda f: (f.time_s, f.node))):
            pool, k = self._node(f.node, names)
            self._events.append((f.time_s, 0, i, "fail", pool, k, f))
            if f.recover_after_s is not None:
                self._events.append((f.time_s + f.recover_after_s, 1, i, "recover", pool, k, f))
            name = (self.p_specs if pool == "prefill" else self.d_specs)[k].name
            self.run_.failures.append(PDFailure(name, pool, f.time_s, f.recover_after_s))
        self._events.sort(key=lambda e: e[:3])
        self._ev = 0  # the next of ``_events`` to apply
        self.inflight: list[PendingStep | None] = [None] * (len(prefill) + len(decode))
        self.now = 0.0
        self._next_arrival = 0  # the next trace row to arrive
        self._online: list[tuple[float, int, Request]] = []  # submitted arrivals (a heap)
        self._origin: dict[int, Request] = {}  # submitted requests' fields, for fresh copies
        self._next_idx = self.arrays.n
        # Client aborts (``abort``): a heap of (time, seq, request idx); those whose leg is in a
        # step in flight wait for that step's end (per engine slot), as vLLM applies them.
        self._aborts: list[tuple[float, int, int]] = []
        self._abort_seq = 0
        self._aborts_after_step: list[list[int]] = [[] for _ in self.inflight]
        self.aborted: set[int] = set()  # request indices closed by ``abort`` (legs cut by one)
        self._rolling: tuple[int, int] | None = None  # ``roll_records``
        self.legs_base = 0  # ``run_.legs`` entries dropped by ``trim_records``

    def _node(self, node: str, names: list[str]) -> tuple[str, int]:
        if node in names:
            i = names.index(node)
            n_p = len(self.p_specs)
            return ("prefill", i) if i < n_p else ("decode", i - n_p)
        return parse_pool_node(node, len(self.p_specs), len(self.d_specs))

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

    @staticmethod
    def _conn(e: Engine) -> PDConnector:
        conn = e.kv_connector
        if not isinstance(conn, PDConnector):
            raise InternalError("invariant broken: a replica without its P/D connector")
        return conn

    def _transfer(self, k: int, r: Request, now: float, n_blocks: int) -> float:
        """The decode replica ``k`` pulls ``r``'s prompt KV: it queues until both the prefill
        replica's outbound link and ``k``'s inbound link are free, then takes the wire time."""
        run = self.run_
        p = run.prefill_of[r.idx]
        if r.idx in run.transfers:
            raise InternalError(f"invariant broken: {r.req_id}'s KV transferred twice")
        tokens = n_blocks * self.d_specs[k].config.block_size
        start = max(now, self._in_free[k], self._out_free[p])
        end = start + self.link.setup_latency_s + self.link.transfer_s(tokens)
        self._in_free[k] = end
        self._out_free[p] = end
        x = Transfer(r.req_id, self.p_specs[p].name, self.d_specs[k].name, n_blocks, tokens, now, start, end)
        run.transfers[r.idx] = x
        run.legs.append(x)
        p_conn = self._conn(self.p_eng[p])
        p_conn.send_done(r.idx, end)
        run.sender[r.idx] = p_conn
        run.receiver[r.idx] = self._conn(self.d_eng[k])
        return end

    def _cut(self, idx: int, t: float) -> None:
        """The transfer of ``idx`` in flight at ``t`` is cut off (an end of it was lost)."""
        run = self.run_
        x = run.transfers.pop(idx)
        x.start_s = min(x.start_s, t)  # cut while still queued for the link: it never started
        x.end_s, x.landed = t, False
        run.sender.pop(idx, None)
        run.receiver.pop(idx, None)

    # -- the clock ---------------------------------------------------------------------------
    def run(self) -> PDRun:
        """Every arrival and failure of the trace, to the end; the outcome, invariants checked."""
        self.advance()
        return self.finish()

    def advance(self, until: float = math.inf, max_steps: int = sys.maxsize) -> int:
        """Process step ends, arrivals (the trace's and ``submit``'s) and failures in time order;
        returns the engine steps ended. Stops before the first step end or event at or after
        ``until``, after ``max_steps`` step ends, or when nothing is left to do, which includes
        the case where only empty steps remain, waiting for KV that nobody will ever read
        (``_stuck``): stepping on would never end."""
        n_p = len(self.p_eng)
        steps = 0
        while True:
            engines = self.p_eng + self.d_eng
            t_arr = self._next_arrival_time()
            t_ev = self._events[self._ev][0] if self._ev < len(self._events) else math.inf
            t_ab = self._aborts[0][0] if self._aborts else math.inf
            t_ext = min(t_arr, t_ev, t_ab)
            horizon = t_ext if t_ext < until else until
            for k, e in enumerate(engines):
                if self.inflight[k] is None and self._is_alive(k):
                    self.inflight[k] = e.begin_step(horizon)
            k_step, t_step = -1, math.inf
            for k, pend in enumerate(self.inflight):
                if pend is not None and pend.end < t_step:
                    k_step, t_step = k, pend.end
            if k_step >= 0 and t_step <= t_ext and t_step < until:
                pend = self.inflight[k_step]
                if pend is None:
                    raise InternalError("invariant broken: no step in flight")
                finished = engines[k_step].end_step(pend)
                self.inflight[k_step] = None
                if k_step < n_p:
                    for r in finished:
                        self._hand_off(r, t_step)
                if self._aborts_after_step[k_step]:
                    self._apply_aborts(k_step, t_step)
                if t_step > self.now:
                    self.now = t_step
                steps += 1
                if steps >= max_steps or (t_ext == math.inf and _empty(pend) and self._stuck()):
                    return steps
                continue
            if t_ext == math.inf or t_ext >= until:
                return steps
            self.now = t_ext
            if t_arr <= t_ev and t_arr <= t_ab:
                r = self._pop_arrival()
                self._arrive(r, self._copy(r))
                continue
            if t_ab < t_ev:
                _, _, idx = heapq.heappop(self._aborts)
                self._abort(idx, t_ab)
                continue
            t, _, _, kind, pool, k, _f = self._events[self._ev]
            self._ev += 1
            slot = k if pool == "prefill" else n_p + k
            self.inflight[slot] = None  # a step in flight is lost with the replica
            if kind == "fail":
                self._fail(pool, k, t)
                if self._aborts_after_step[slot]:  # waiting for a step lost with the replica
                    self._apply_aborts(slot, t)
            else:
                self._recover(pool, k, t)

    def finish(self) -> PDRun:
        """Close every live replica (outcomes, pending sends drained) and check docs/invariants.md's
        P/D invariants over the whole run."""
        for k, e in enumerate(self.p_eng + self.d_eng):
            if self._is_alive(k):
                e.finish()
        run = self.run_
        for idx, r in run.prefill_req.items():  # timed out in a prefill queue: never handed off
            if r.outcome in REJECTED and run.decode_req[idx].outcome not in REJECTED:
                self._reject(r)
        self.run_.prefill, self.run_.decode = self.p_eng, self.d_eng
        self.run_.parked = [r.idx for r in self._parked]
        check_pd_invariants(self.run_)
        return self.run_

    def next_time(self) -> float:
        """When the next step ends or arrival or failure is due (inf: nothing is pending)."""
        t_ev = self._events[self._ev][0] if self._ev < len(self._events) else math.inf
        t = min(self._next_arrival_time(), t_ev, self._aborts[0][0] if self._aborts else math.inf)
        for pend in self.inflight:
            if pend is not None and pend.end < t:
                t = pend.end
        return t

    def make_request(
        self,
        req_id: str,
        arrival_s: float,
        prompt_len: int,
        max_tokens: int,
        *,
        priority: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
    ) -> Request:
        """A request that is not in the trace, for ``submit`` (the next free request index).
        ``hash_ids``: one id per ``hash_block_size`` prompt tokens naming the prefix up to there
        (prefix caching on either leg, and the prefill router's prefix-aware pick)."""
        r = Request(
            self._next_idx,
            req_id,
            arrival_s,
            prompt_len,
            max_tokens,
            priority,
            -1,
            0,
            hash_ids,
            hash_block_size,
        )
        self._next_idx += 1
        return r

    def submit(self, r: Request) -> None:
        """An online arrival at ``r.arrival`` (not before the cluster's time): routed as a trace
        row arriving then would be (after any trace row arriving at the same time)."""
        if r.arrival < self.now:
            raise InputError(f"an arrival at {r.arrival} s is in the past (the cluster is at {self.now} s)")
        self._origin[r.idx] = r
        self.run_.num_online += 1
        heapq.heappush(self._online, (r.arrival, r.idx, self._copy(r)))

    # -- online: aborts, failures, rolling records ---------------------------------------------
    def abort(self, r: Request, time_s: float) -> None:
        """The client of ``r`` (a ``make_request`` request, submitted) went away at ``time_s``:
        as vLLM's P/D proxy, both legs are aborted. The leg a replica holds finishes as aborted
        and its blocks go back to the pool; a KV read in flight is cut (its link freed); the
        prefill side frees the blocks it kept for the transfer. Applied between steps, in time
        order with arrivals and failures: a leg in a step in flight is aborted when it ends."""
        heapq.heappush(self._aborts, (max(time_s, self.now, r.arrival), self._abort_seq, r.idx))
        self._abort_seq += 1

    def _apply_aborts(self, slot: int, t: float) -> None:
        idxs, self._aborts_after_step[slot] = self._aborts_after_step[slot], []
        for idx in idxs:
            self._abort(idx, t)

    def _abort(self, idx: int, t: float) -> None:
        run = self.run_
        d = run.decode_req.get(idx)
        if d is None or d.outcome != OUTCOME_UNFINISHED:
            return  # finished or rejected before the abort took effect (or never submitted)
        n_p = len(self.p_eng)
        k = run.decode_of.get(idx)
        if k is not None and self.d_alive[k] and self.d_views[k].holds(d):
            if self.inflight[n_p + k] is not None and d.status == RUNNING:
                self._aborts_after_step[n_p + k].append(idx)
                return
            conn = self._conn(self.d_eng[k])
            receiving = conn.receiving(idx)
            self.d_eng[k].abort(d, t)
            if receiving:  # the read is cut: its blocks went back with the request
                conn.cancel_recv(idx)
                self._cut_by_abort(idx, k, t)
        else:
            p = run.prefill_of.get(idx)
            pr = run.prefill_req.get(idx)
            if pr is not None and p is not None and self.p_alive[p] and self.p_views[p].holds(pr):
                if self.inflight[p] is not None and pr.status == RUNNING:
                    self._aborts_after_step[p].append(idx)
                    return
                self.p_eng[p].abort(pr, t)  # no KV kept: the decode leg never starts
            elif d in self._parked:
                self._parked.remove(d)
            close_unheld(d, t)
        self.aborted.add(idx)
        p = run.prefill_of.get(idx)
        if p is not None and self._prefill_holds(idx, t):
            self._conn(self.p_eng[p]).send_done(idx, t)  # nobody will read it: freed at its next step

    def _cut_by_abort(self, idx: int, k: int, t: float) -> None:
        """The aborted request's transfer stops at ``t``: the links it held (or was queued for)
        are free again from then, where no later transfer was booked behind it."""
        x = self.run_.transfers[idx]
        p = self.run_.prefill_of[idx]
        free_at = max(x.start_s, min(t, x.end_s))
        if self._in_free[k] == x.end_s:
            self._in_free[k] = free_at
        if self._out_free[p] == x.end_s:
            self._out_free[p] = free_at
        self._cut(idx, t)
        x.aborted = True

    def inject_failure(self, node: str, time_s: float, recover_after_s: float | None = None) -> FailureEvent:
        """Add a failure of ``node`` (``p0``/``d1`` or ``prefill:0``/``decode:1``) at ``time_s``
        (not before the cluster's time), optionally back ``recover_after_s`` later."""
        names = [s.name for s in self.p_specs] + [s.name for s in self.d_specs]
        pool, k = self._node(node, names)
        name = (self.p_specs if pool == "prefill" else self.d_specs)[k].name
        if time_s < self.now:
            raise InputError(f"a failure at {time_s} s is in the past (the cluster is at {self.now} s)")
        event = FailureEvent(node=name, time_s=time_s, recover_after_s=recover_after_s)
        listed = [
            e[6].model_copy(update={"node": (self.p_specs if e[4] == "prefill" else self.d_specs)[e[5]].name})
            for e in self._events
            if e[3] == "fail"
        ]
        try:
            FailurePlan(events=[*listed, event])
        except ValidationError as e:
            raise InputError(f"cannot fail {shown(name)} at {time_s:g} s: {describe(e)}") from None
        i = len(self.run_.failures)
        insort(self._events, (time_s, 0, i, "fail", pool, k, event), lo=self._ev, key=lambda e: e[:3])
        if recover_after_s is not None:
            back = (time_s + recover_after_s, 1, i, "recover", pool, k, event)
            insort(self._events, back, lo=self._ev, key=lambda e: e[:3])
        self.run_.failures.append(PDFailure(name, pool, time_s, recover_after_s))
        return event

    def applied_events(self) -> list[tuple[float, str, str, int]]:
        """The failures and comebacks applied so far, in the order applied: (time, "fail" or
        "recover", pool, replica index in its pool)."""
        return [(e[0], e[3], e[4], e[5]) for e in self._events[: self._ev]]

    @property
    def parked_requests(self) -> list[Request]:
        """Decode legs waiting for any decode replica to come back, in the order they will go."""
        return list(self._parked)

    def kv_waiting(self, e: Engine) -> int:
        """Requests on ``e`` waiting for their KV to land (WAITING_FOR_REMOTE_KVS)."""
        return len(self._conn(e).holding)

    def roll_records(self, keep_steps: int, keep_requests: int) -> None:
        """Keep only the latest records from now on (``trim_records``): an online run that never
        ends holds bounded memory. No result can be built (``finish``) afterwards."""
        if keep_steps < 1 or keep_requests < 1:
            raise InputError("roll_records keeps at least one step and one request")
        self._rolling = (keep_steps, keep_requests)
        self.trim_records()

    def trim_records(self) -> list[Request]:
        """Apply ``roll_records``: every engine's recorder (lost replicas' too) keeps its latest
        steps and request columns, and the run forgets the closed requests (finished, rejected
        or aborted, no KV held for them) beyond the latest ``keep_requests``, with their legs'
        bookkeeping; ``run_.legs`` and ``run_.recoveries`` keep their latest entries (``legs_base``
        counts the legs dropped). Cheap until due. Returns the decode legs forgotten."""
        if self._rolling is None:
            return []
        steps, keep = self._rolling
        engines = self.p_eng + self.d_eng + self.run_.retired
        due = [e for e in engines if e.rec.trim_due(steps, keep)]
        if due:
            oldest = min(
                (r.arrival for e in self.p_eng + self.d_eng for r in e.live.values()), default=math.inf
            )
            oldest = min([oldest, *(r.arrival for r in self._parked)])
            for e in due:
                e.rec.trim(steps, keep, oldest)
        run = self.run_
        if len(run.legs) > 2 * keep:
            drop = len(run.legs) - keep
            del run.legs[:drop]
            self.legs_base += drop
        if len(run.recoveries) > 2 * keep:
            del run.recoveries[: len(run.recoveries) - keep]
        if len(run.decode_req) <= 2 * keep:
            return []
        held = {i for e in self.p_eng for i in self._conn(e).pending_sends()}
        parked = {r.idx for r in self._parked}
        closed = [
            idx
            for idx, d in run.decode_req.items()
            if d.outcome != OUTCOME_UNFINISHED and idx not in held and idx not in parked
        ]
        gone = closed[: max(0, len(run.decode_req) - keep)]
        conns = [self._conn(e) for e in self.p_eng + self.d_eng]
        out = []
        for idx in gone:
            out.append(run.decode_req.pop(idx))
            for table in (
                run.prefill_req,
                run.prefill_of,
                run.decode_of,
                run.transfers,
                run.sender,
                run.receiver,
            ):
                table.pop(idx, None)
            run.local.discard(idx)
            self._origin.pop(idx, None)
            self.aborted.discard(idx)
            for c in conns:
                for col in (c.recv_started, c.recv_tokens, c.recv_done, c.sent, c.recv_failed, c.gpu_hit):
                    col.pop(idx, None)
        return out

    def _next_arrival_time(self) -> float:
        arr = self.arrays
        t = arr.arrival[self._next_arrival] if self._next_arrival < arr.n else math.inf
        if self._online and self._online[0][0] < t:
            return self._online[0][0]
        return t

    def _pop_arrival(self) -> Request:
        arr = self.arrays
        nxt = self._next_arrival
        if nxt < arr.n and (not self._online or arr.arrival[nxt] <= self._online[0][0]):
            self._next_arrival = nxt + 1
            return arr.make_request(nxt)
        return heapq.heappop(self._online)[2]

    def _copy(self, r: Request) -> Request:
        """A fresh request with ``r``'s trace fields: the other leg, or a decode leg started over."""
        if r.idx < self.arrays.n:
            return self.arrays.make_request(r.idx)
        o = self._origin[r.idx]
        ids = None if o.hash_ids is None else list(o.hash_ids)
        return Request(
            o.idx, o.req_id, o.arrival, o.prompt_len, o.max_tokens, o.priority, -1, 0, ids, o.hash_block_size
        )

    def _is_alive(self, slot: int) -> bool:
        n_p = len(self.p_alive)
        return self.p_alive[slot] if slot < n_p else self.d_alive[slot - n_p]

    def _stuck(self) -> bool:
        """No arrival or failure is left, every step in flight schedules nothing, and no KV
        transfer will ever end: the empty steps vLLM takes while transfers are pending would go on
        for ever. (``check_pd_invariants`` then names any request that did not finish.)"""
        if any(p is not None and not _empty(p) for p in self.inflight):
            return False
        views = self.p_views + self.d_views
        for k, e in enumerate(self.p_eng + self.d_eng):
            if not self._is_alive(k):
                continue
            conn = self._conn(e)
            if views[k].num_running or views[k].num_waiting or conn.finished_recving:
                return False
            if conn.next_due() < math.inf:
                return False
        return True

    # -- routing -----------------------------------------------------------------------------
    def _alive(self, pool: str) -> list[int]:
        flags = self.p_alive if pool == "prefill" else self.d_alive
        return [k for k, a in enumerate(flags) if a]

    def _arrive(self, r: Request, d_copy: Request) -> None:
        run = self.run_
        t = r.arrival
        run.decode_req[r.idx] = d_copy
        if r.prompt_len < self.short or not self._alive("prefill"):
            run.local.add(r.idx)
            self._to_decode(d_copy, t)
            return
        run.prefill_req[r.idx] = r
        r.max_tokens = 1  # the prefill leg: one token, its KV kept for the decode replica
        self._to_prefill(r, t)  # the decode leg is submitted when the prefill leg finishes

    def _to_prefill(self, r: Request, t: float) -> str:
        run = self.run_
        k = self.p_router.pick(r, self.p_views, self._alive("prefill"))
        self._conn(self.p_eng[k]).mark_remote_decode(r.idx)
        run.prefill_of[r.idx] = k
        self.p_eng[k].submit(r, t)
        if r.outcome in REJECTED:
            self._reject(r)
        return self.p_specs[k].name

    def _reject(self, r: Request) -> None:
        """The prefill replica refused the prefill leg (a prompt past its ``max_model_len``, or a
        queue timeout): the proxy returns that error to the client, and no decode leg runs."""
        d = self.run_.decode_req[r.idx]
        d.outcome, d.status, d.finish_time = r.outcome, r.status, r.finish_time

    def _hand_off(self, r: Request, t: float) -> None:
        """The prefill leg finished at ``t``: the proxy sends the request to a decode replica."""
        self._to_decode(self.run_.decode_req[r.idx], t)

    def _prefill_holds(self, idx: int, t: float) -> bool:
        p = self.run_.prefill_of.get(idx)
        return p is not None and self.p_alive[p] and self._conn(self.p_eng[p]).holds(idx, t)

    def _to_decode(
        self, d: Request, t: float, target: int | None = None, remote: bool | None = None
    ) -> str | None:
        """Submit the decode leg to ``target`` (else the router's least-KV pick), pulling its KV
        from the prefill side when that still holds it; parked when no decode replica is up."""
        alive = self._alive("decode")
        if not alive:
            self._parked.append(d)
            p = self.run_.prefill_of.get(d.idx)
            if not self._decode_back_after(t) and p is not None and self._prefill_holds(d.idx, t):
                self._conn(self.p_eng[p]).send_done(d.idx, t)  # nobody will ever read it
            return None
        k = target if target is not None else self.d_router.pick(d, self.d_views, alive)
        if remote is None:
            remote = self._prefill_holds(d.idx, t)
        if remote:
            self._conn(self.d_eng[k]).mark_remote_prefill(d.idx)
        self.run_.decode_of[d.idx] = k
        self.d_eng[k].submit(d, t)
        p = self.run_.prefill_of.get(d.idx)
        if d.outcome in REJECTED and remote and p is not None:  # refused here: nobody reads the KV
            self._conn(self.p_eng[p]).send_done(d.idx, t)
        return self.d_specs[k].name

    # -- failures ----------------------------------------------------------------------------
    def _decode_back_after(self, t: float) -> bool:
        return any(e[3] == "recover" and e[4] == "decode" and e[0] >= t for e in self._events)

    def _note(self, r: Request, t: float, node: str, action: str, target: str | None, why: str = "") -> None:
        self.run_.recoveries.append(PDRecovery(r.req_id, t, node, action, target, why))

    def _failure(self, node: str, t: float) -> PDFailure:
        for f in self.run_.failures:
            if f.node == node and f.time_s == t:
                return f
        raise InternalError(f"invariant broken: no failure of {node} at {t}")

    def _fail(self, pool: str, k: int, t: float) -> None:
        if pool == "prefill":
            self._fail_prefill(k, t)
        else:
            self._fail_decode(k, t)

    def _fail_prefill(self, k: int, t: float) -> None:
        """Its prefill legs run again on another prefill replica (none: on their decode replica);
        the KV it held for transfers is lost: those requests' decode replicas recompute the prompt
        (vLLM's load-failure "recompute"), whether the read had started or not."""
        run = self.run_
        name = self.p_specs[k].name
        eng = self.p_eng[k]
        conn = self._conn(eng)
        self.p_alive[k] = False
        victims = [r for r, _ in eng.evict_all()]
        touched = len(victims)
        for idx in conn.pending_sends():
            if not conn.holds(idx, t):
                continue  # landed already: its blocks were only waiting to be freed
            touched += 1
            dk = run.decode_of.get(idx)
            d = run.decode_req[idx]
            if (
                dk is None or not self.d_alive[dk]
            ):  # parked since its decode replica was lost: it will prefill there
                self._note(d, t, name, "prefill-on-decode", None, "parked: no decode replica up")
                continue
            dconn = self._conn(self.d_eng[dk])
            if idx in dconn.remote_prefill:  # not allocated yet: it prefills there instead
                dconn.remote_prefill.discard(idx)
            elif dconn.receiving(idx):
                dconn.fail_recv(idx, t)
                self._cut(idx, t)
            self._note(d, t, name, "prefill-on-decode", self.d_specs[dk].name)
        for r in victims:
            if self._alive("prefill"):
                self._note(r, t, name, "re-prefill", self._to_prefill(r, t))
            else:
                d = run.decode_req[r.idx]
                run.prefill_req.pop(r.idx, None)
                run.prefill_of.pop(r.idx, None)
                run.local.add(r.idx)
                self._note(d, t, name, "prefill-on-decode", self._to_decode(d, t, remote=False))
        run.retired.append(eng)
        self._failure(name, t).requests = touched

    def _fail_decode(self, k: int, t: float) -> None:
        """Each request on it: queued ones go to another decode replica; those whose KV the
        prefill side still holds (the read had not landed) are re-transferred or recomputed, as
        the recovery planner's cost model decides; the rest recompute prompt and outputs."""
        run = self.run_
        name = self.d_specs[k].name
        eng = self.d_eng[k]
        conn = self._conn(eng)
        self.d_alive[k] = False
        evicted = eng.evict_all()
        holding: list[Request] = []
        while len(conn.holding):
            holding.append(conn.holding.pop())
        touched = len(evicted) + len(holding)
        for r, computed in evicted:
            if computed == 0 and r.num_output == 0:  # queued, never scheduled here
                self._note(r, t, name, "re-route", self._to_decode(r, t))
            else:
                self._recover_decode(r, t, name, with_kv=self._prefill_holds(r.idx, t))
        for r in holding:
            idx = r.idx
            fresh = self._copy(r)
            run.decode_req[idx] = fresh
            if idx in run.transfers and conn.receiving(idx):
                self._cut(idx, t)
            self._recover_decode(fresh, t, name, with_kv=self._prefill_holds(idx, t))
        run.retired.append(eng)
        self._failure(name, t).requests = touched

    def _recover_decode(self, r: Request, t: float, node: str, *, with_kv: bool) -> None:
        """The planner's choice for a decode leg whose KV was lost: re-transfer it from the
        prefill side (``with_kv``: that still holds it) or recompute, and where."""
        from servesim.cluster.planning import target_state
        from servesim.cluster.recovery import JobSpec, decide_job

        alive = self._alive("decode")
        p = self.run_.prefill_of.get(r.idx)
        if not alive:
            if with_kv and p is not None:
                self._conn(self.p_eng[p]).resend(r.idx)  # kept until a decode replica reads it
            self._to_decode(r, t)
            self._note(r, t, node, "re-transfer" if with_kv else "recompute", None, "no decode replica up")
            return
        tokens = r.prompt_len
        spec = JobSpec(
            job_id=r.req_id,
            prompt_tokens=tokens,
            generated_tokens=r.num_output,
            kv_cache_checkpointed=with_kv,
            checkpoint_offset_tokens=tokens if with_kv else None,
        )
        out_wait = max(0.0, self._out_free[p] - t) if p is not None else 0.0
        targets = [
            target_state(self.d_views[j], str(j), r, max(out_wait, self._in_free[j] - t, 0.0)) for j in alive
        ]
        d = decide_job(spec, self.link, targets, weigh_load=True)
        target = int(d.target) if d.target is not None else alive[0]
        migrate = with_kv and d.strategy == "MIGRATE_STATE" and d.moved_tokens > 0
        if with_kv and p is not None:
            p_conn = self._conn(self.p_eng[p])
            if migrate:
                p_conn.resend(r.idx)
            else:
                p_conn.send_done(r.idx, t)  # nobody will read it: freed at its next step
        where = self._to_decode(r, t, target=target, remote=migrate)
        self._note(r, t, node, "re-transfer" if migrate else "recompute", where, d.reason)

    def _recover(self, pool: str, k: int, t: float) -> None:
        """The replica comes back empty (cold prefix cache) and takes work again."""
        if pool == "prefill":
            self.p_eng[k] = self._engine(self.p_specs[k], None)
            self.p_eng[k].now = t
            self.p_views[k] = ReplicaView(self.p_eng[k])
            self.p_alive[k] = True
            return
        self.d_eng[k] = self._engine(self.d_specs[k], k)
        self.d_eng[k].now = t
        self.d_views[k] = ReplicaView(self.d_eng[k])
        self.d_alive[k] = True
        parked, self._parked = self._parked, []
        for d in parked:
            self._to_decode(d, t)


#: A request's outcomes that close it without output (the client gets an error).
REJECTED = frozenset({OUTCOME_REJECTED_TOO_LONG, OUTCOME_REJECTED_TIMEOUT})
#: A request whose client went away (``PDCluster.abort``): both legs aborted.
ABORTED = frozenset({OUTCOME_ABORTED})
#: Outcomes of a request served to the end (``finished_max_model_len`` included).
SERVED = frozenset({OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED})


def _empty(p: PendingStep) -> bool:
    """A step that computes nothing (vLLM steps so while KV transfers are pending)."""
    return p.plan.num_group_decodes == 0 and not p.plan.scheduled


def check_pd_invariants(run: PDRun) -> None:
    """docs/invariants.md (P/D): none lost (each request finished on a decode replica, or is
    reported parked when no decode replica was ever up again); each request's KV landed at most
    once, and exactly once for a disaggregated request that did not recompute its prompt (a
    re-transfer after a lost decode replica is a new leg; the cut-off one did not land); none
    decoded before its KV landed; no prefill replica freed a request's blocks before its transfer."""
    parked = set(run.parked)
    for idx, d in run.decode_req.items():
        if idx not in parked and d.outcome not in SERVED and d.outcome not in REJECTED | ABORTED:
            raise InternalError(f"invariant broken: {d.req_id} did not finish (outcome {d.outcome})")
    landed: dict[str, int] = {}
    for leg in run.legs:
        if leg.landed:
            landed[leg.req_id] = landed.get(leg.req_id, 0) + 1
    twice = sorted(k for k, v in landed.items() if v > 1)
    if twice:
        raise InternalError(f"invariant broken: {twice[0]}'s KV transferred twice")
    recomputed = {r.req_id for r in run.recoveries if r.action in ("prefill-on-decode", "recompute")}
    retired = {id(e.kv_connector) for e in run.retired}
    for idx, d in run.decode_req.items():
        if idx in run.local or idx in parked or d.outcome in REJECTED | ABORTED:
            continue
        x = run.transfers.get(idx)
        if x is None:
            if d.req_id not in recomputed:
                raise InternalError(f"invariant broken: {d.req_id}'s KV never transferred")
            continue
        conn = run.receiver[idx]
        p_conn = run.sender[idx]
        got = conn.recv_done.get(idx, math.inf)
        if got < x.end_s or d.first_token < got:
            raise InternalError(f"invariant broken: {d.req_id} decoded before its KV landed")
        if id(p_conn) not in retired and p_conn.sent.get(idx, -1.0) < x.end_s:
            raise InternalError(f"invariant broken: {d.req_id}'s prefill blocks freed before the transfer")
    if len(landed) != len(run.transfers):
        raise InternalError("invariant broken: transfers and landed legs differ")
    if len(run.decode_req) != len(run.trace) + run.num_online:
        raise InternalError("invariant broken: requests lost")


__all__ = [
    "RECOVERY_ACTIONS",
    "DisaggSpec",
    "PDCluster",
    "PDFailure",
    "PDRecovery",
    "PDRun",
    "PoolSpec",
    "Transfer",
    "check_pd_invariants",
    "link_preset",
    "link_presets",
    "parse_pool_node",
    "pd_context",
]
