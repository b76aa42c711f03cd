"""docs/invariants.md's prefill/decode invariants, checked over a whole run (``PDCluster.finish``)."""

from __future__ import annotations

import math

from servesim.cluster.pd.records import ABORTED, REJECTED, SERVED, PDRun
from servesim.engine.engine import PendingStep
from servesim.errors import InternalError


def empty_step(p: PendingStep) -> bool:
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


__all__ = ["check_pd_invariants", "empty_step"]
