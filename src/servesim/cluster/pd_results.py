"""A disaggregated run's figures: TTFT/TPOT/E2E over every leg, and each request's time split
into prefill queue, prefill, decode queue, transfer and decode (the five add up to its E2E)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from servesim.cluster.pd import PDRun

LEGS = ("prefill_queue", "prefill", "decode_queue", "transfer", "decode")


class PDRequestRow(BaseModel):
    req_id: str
    prefill_replica: str | None = Field(description="None: a short prompt prefilled on its decode replica.")
    decode_replica: str
    ttft_s: float
    tpot_s: float | None
    e2e_s: float
    prefill_queue_s: float = Field(description="Arrival to first scheduled on the prefill replica.")
    prefill_s: float = Field(description="First scheduled to finished on the prefill replica.")
    decode_queue_s: float = Field(description="Prefill finished to blocks allocated on the decode replica.")
    transfer_s: float = Field(description="Blocks allocated to the KV reported landed (link queue + wire).")
    decode_s: float = Field(description="KV landed to the last token.")
    transfer_tokens: int


class LegStats(BaseModel):
    mean_ms: float
    p50_ms: float
    p99_ms: float


class PDSummary(BaseModel):
    num_requests: int
    num_disaggregated: int
    num_local: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    e2e_p50_ms: float
    e2e_p99_ms: float
    output_tokens_per_s: float
    legs: dict[str, LegStats] = Field(description="Per leg, over disaggregated requests.")
    transfer_gb: float = Field(description="KV moved, all TP ranks together, GB.")
    link_wait_p99_ms: float = Field(description="Time transfers queued behind others on their link.")


class PDResult(BaseModel):
    summary: PDSummary
    requests: list[PDRequestRow]


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q) * 1000.0) if xs else 0.0


def pd_result(run: PDRun, bytes_per_token_all_ranks: int) -> PDResult:
    rows: list[PDRequestRow] = []
    for idx in sorted(run.decode_req):
        d = run.decode_req[idx]
        dk = run.decode_of[idx]
        dconn = run.decode[dk].kv_connector
        arrival = d.arrival
        out = d.num_output
        tpot = (d.finish_time - d.first_token) / (out - 1) if out > 1 else None
        if idx in run.local:
            legs = (d.first_scheduled - arrival, 0.0, 0.0, 0.0, d.finish_time - d.first_scheduled)
            prefill_name = None
            tokens = 0
        else:
            p = run.prefill_req[idx]
            x = run.transfers[idx]
            landed = dconn.recv_done[idx]  # type: ignore[union-attr]
            legs = (
                p.first_scheduled - arrival,
                p.finish_time - p.first_scheduled,
                x.ready_s - p.finish_time,
                landed - x.ready_s,
                d.finish_time - landed,
            )
            prefill_name = x.prefill
            tokens = x.tokens
        rows.append(
            PDRequestRow(
                req_id=d.req_id,
                prefill_replica=prefill_name,
                decode_replica=run.decode[dk].name or str(dk),
                ttft_s=d.first_token - arrival,
                tpot_s=tpot,
                e2e_s=d.finish_time - arrival,
                prefill_queue_s=legs[0],
                prefill_s=legs[1],
                decode_queue_s=legs[2],
                transfer_s=legs[3],
                decode_s=legs[4],
                transfer_tokens=tokens,
            )
        )
    dis = [r for r in rows if r.prefill_replica is not None]
    ttft = [r.ttft_s for r in rows]
    tpots = [r.tpot_s for r in rows if r.tpot_s is not None]
    e2e = [r.e2e_s for r in rows]
    span = max((r.finish_time for r in run.decode_req.values()), default=0.0) - min(
        (r.arrival for r in run.decode_req.values()), default=0.0
    )
    legs_stats = {}
    for leg in LEGS:
        xs = [getattr(r, f"{leg}_s") for r in dis]
        legs_stats[leg] = LegStats(
            mean_ms=float(np.mean(xs) * 1000.0) if xs else 0.0, p50_ms=_pct(xs, 50), p99_ms=_pct(xs, 99)
        )
    waits = [x.start_s - x.ready_s for x in run.transfers.values()]
    summary = PDSummary(
        num_requests=len(rows),
        num_disaggregated=len(dis),
        num_local=len(rows) - len(dis),
        ttft_p50_ms=_pct(ttft, 50),
        ttft_p99_ms=_pct(ttft, 99),
        tpot_p50_ms=_pct(tpots, 50) if tpots else None,
        tpot_p99_ms=_pct(tpots, 99) if tpots else None,
        e2e_p50_ms=_pct(e2e, 50),
        e2e_p99_ms=_pct(e2e, 99),
        output_tokens_per_s=sum(r.num_output for r in run.decode_req.values()) / span if span > 0 else 0.0,
        legs=legs_stats,
        transfer_gb=sum(x.tokens for x in run.transfers.values()) * bytes_per_token_all_ranks / 1e9,
        link_wait_p99_ms=_pct(waits, 99),
    )
    return PDResult(summary=summary, requests=rows)


__all__ = ["LEGS", "LegStats", "PDRequestRow", "PDResult", "PDSummary", "pd_result"]
