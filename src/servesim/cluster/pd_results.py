"""A disaggregated run's figures: TTFT/TPOT/E2E over every leg, and each request's time split
into prefill queue, prefill, decode queue, transfer and decode (the five add up to its E2E).

With an SLO (``pd_result(..., slo=)``) each request is judged good or not by the engine's own test
(``engine.results.good_mask``: finished, and within every threshold the run's SLO and the trace's
per-request SLAs set; a one-token output's TPOT counts as 0), and goodput is ``per_second`` of the
good ones over the run's span, as ``simulate`` and ``cluster`` count them. Without one the
summary and the rows carry no SLO field at all (the document is byte for byte as before).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, model_serializer

from servesim.cluster.pd.records import REJECTED, PDRun, leg_split
from servesim.cluster.pd.state import LEGS
from servesim.engine.request import Request
from servesim.engine.results import (
    OUTCOME_FINISHED,
    OUTCOME_UNFINISHED,
    SLO,
    good_mask,
    per_second,
)


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
    recovered: list[str] = Field(
        default_factory=list,
        description="What became of it after a lost replica (cluster.pd.RECOVERY_ACTIONS).",
    )
    good: bool | None = Field(
        None, description="Met every SLO threshold (``good_mask``); left out when the run had no SLO."
    )

    @model_serializer(mode="wrap")
    def _drop_good_without_slo(self, handler: Any) -> Any:
        d = handler(self)
        if isinstance(d, dict) and d.get("good", 0) is None:
            del d["good"]
        return d


class LegStats(BaseModel):
    mean_ms: float
    p50_ms: float
    p99_ms: float


class PDFailureRow(BaseModel):
    node: str
    pool: str
    time_s: float
    recover_after_s: float | None
    requests: int = Field(description="Requests on it or waiting for its KV when it was lost.")


class PDRecoveryRow(BaseModel):
    req_id: str
    time_s: float
    node: str
    action: str
    target: str | None
    reason: str


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
    link_wait_p99_ms: float = Field(description="Time transfers queued behind others on their links.")
    transfer_legs: int = Field(0, description="Transfers started, the cut-off ones included.")
    cut_transfers: int = Field(0, description="Transfers cut off by a lost replica (not landed).")
    num_unfinished: int = Field(0, description="Parked: no decode replica was up again to take them.")
    num_rejected: int = Field(
        0, description="Refused (prompt past max_model_len, or a queue timeout): no latency counted."
    )
    recoveries: dict[str, int] = Field(default_factory=dict, description="Requests per recovery action.")
    slo: SLO | None = Field(None, description="The per-request thresholds; left out when none was given.")
    num_good: int | None = Field(None, description="Requests meeting every threshold (with an SLO).")
    good_fraction: float | None = Field(
        None, description="SLO attainment: good over every request of the trace, unfinished ones included."
    )
    goodput: float | None = Field(None, description="Good requests per second over the run's span.")

    @model_serializer(mode="wrap")
    def _drop_slo_when_off(self, handler: Any) -> Any:
        """A run without an SLO keeps its document byte for byte (no SLO keys)."""
        d = handler(self)
        if isinstance(d, dict) and d.get("slo", 0) is None:
            for key in _SLO_KEYS:
                d.pop(key, None)
        return d


_SLO_KEYS = ("slo", "num_good", "good_fraction", "goodput")


class PDResult(BaseModel):
    summary: PDSummary
    requests: list[PDRequestRow]
    failures: list[PDFailureRow] = Field(default_factory=list)
    recoveries: list[PDRecoveryRow] = Field(default_factory=list)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q) * 1000.0) if xs else 0.0


def pd_good(run: PDRun, rows: list[PDRequestRow], slo: SLO) -> np.ndarray:
    """Which requests of the trace are good, in trace order: ``good_mask`` over each finished
    request's TTFT/TPOT/E2E (every leg counted) and the trace's per-request SLAs; a parked request
    (never decoded) is unfinished and so not good."""
    n = len(run.trace)
    ttft = np.full(n, np.nan)
    tpot = np.full(n, np.nan)
    e2e = np.full(n, np.nan)
    outcome = np.full(n, OUTCOME_UNFINISHED, dtype=object)
    index = {r.req_id: i for i, r in run.decode_req.items()}
    for row in rows:
        i = index[row.req_id]
        outcome[i] = OUTCOME_FINISHED
        ttft[i] = row.ttft_s * 1000.0
        e2e[i] = row.e2e_s * 1000.0
        tpot[i] = np.nan if row.tpot_s is None else row.tpot_s * 1000.0
    frame = pd.DataFrame({"outcome": outcome, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e})
    df = run.trace.df
    return good_mask(
        frame, slo, df["sla_ttft_ms"].to_numpy(dtype=np.float64), df["sla_e2e_ms"].to_numpy(dtype=np.float64)
    )


def pd_result(run: PDRun, bytes_per_token_all_ranks: int, slo: SLO | None = None) -> PDResult:
    """The run's rows and summary; ``slo``: also which requests are good and the goodput."""
    parked = set(run.parked)
    rejected = {i for i, d in run.decode_req.items() if d.outcome in REJECTED}
    rows = _rows(run, parked | rejected)
    done = [r for i, r in run.decode_req.items() if i not in parked and i not in rejected]
    span = max((r.finish_time for r in done), default=0.0) - min((r.arrival for r in done), default=0.0)
    scored: dict[str, Any] = {}
    if slo is not None:
        good = pd_good(run, rows, slo)
        index = {r.req_id: i for i, r in run.decode_req.items()}
        rows = [r.model_copy(update={"good": bool(good[index[r.req_id]])}) for r in rows]
        n_good = int(good.sum())
        scored = {
            "slo": slo,
            "num_good": n_good,
            "good_fraction": n_good / len(good) if len(good) else 0.0,
            "goodput": per_second(n_good, span),
        }
    summary = _summary(run, rows, done, span, bytes_per_token_all_ranks, len(parked), len(rejected), scored)
    return PDResult(
        summary=summary,
        requests=rows,
        failures=[
            PDFailureRow(
                node=f.node, pool=f.pool, time_s=f.time_s, recover_after_s=f.recover_s, requests=f.requests
            )
            for f in run.failures
        ],
        recoveries=[
            PDRecoveryRow(
                req_id=r.req_id,
                time_s=r.time_s,
                node=r.node,
                action=r.action,
                target=r.target,
                reason=r.reason,
            )
            for r in run.recoveries
        ],
    )


def _rows(run: PDRun, skipped: set[int]) -> list[PDRequestRow]:
    """One row per served request (``skipped``: parked and rejected ones), in request order."""
    actions: dict[str, list[str]] = {}
    for rec in run.recoveries:
        actions.setdefault(rec.req_id, []).append(rec.action)
    rows: list[PDRequestRow] = []
    for idx in sorted(run.decode_req):
        if idx in skipped:
            continue
        d = run.decode_req[idx]
        dk = run.decode_of[idx]
        arrival = d.arrival
        out = d.num_output
        tpot = (d.finish_time - d.first_token) / (out - 1) if out > 1 else None
        prefill_name, legs, tokens, _ = leg_split(run, idx)
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
                recovered=actions.get(d.req_id, []),
            )
        )
    return rows


def _summary(
    run: PDRun,
    rows: list[PDRequestRow],
    done: list[Request],
    span: float,
    bytes_per_token_all_ranks: int,
    num_parked: int,
    num_rejected: int,
    scored: dict[str, Any],
) -> PDSummary:
    dis = [r for r in rows if r.prefill_replica is not None]
    ttft = [r.ttft_s for r in rows]
    tpots = [r.tpot_s for r in rows if r.tpot_s is not None]
    e2e = [r.e2e_s for r in rows]
    legs_stats = {}
    for leg in LEGS:
        xs = [getattr(r, f"{leg}_s") for r in dis]
        legs_stats[leg] = LegStats(
            mean_ms=float(np.mean(xs) * 1000.0) if xs else 0.0, p50_ms=_pct(xs, 50), p99_ms=_pct(xs, 99)
        )
    waits = [x.start_s - x.ready_s for x in run.legs]
    counts: dict[str, int] = {}
    for rec in run.recoveries:
        counts[rec.action] = counts.get(rec.action, 0) + 1
    return PDSummary(
        num_requests=len(rows),
        num_disaggregated=len(dis),
        num_local=len(rows) - len(dis),
        ttft_p50_ms=_pct(ttft, 50),
        ttft_p99_ms=_pct(ttft, 99),
        tpot_p50_ms=_pct(tpots, 50) if tpots else None,
        tpot_p99_ms=_pct(tpots, 99) if tpots else None,
        e2e_p50_ms=_pct(e2e, 50),
        e2e_p99_ms=_pct(e2e, 99),
        output_tokens_per_s=sum(r.num_output for r in done) / span if span > 0 else 0.0,
        legs=legs_stats,
        transfer_gb=sum(x.tokens for x in run.transfers.values()) * bytes_per_token_all_ranks / 1e9,
        link_wait_p99_ms=_pct(waits, 99),
        transfer_legs=len(run.legs),
        cut_transfers=sum(1 for x in run.legs if not x.landed),
        num_unfinished=num_parked,
        num_rejected=num_rejected,
        recoveries=counts,
        **scored,
    )


__all__ = [
    "LEGS",
    "LegStats",
    "PDFailureRow",
    "PDRecoveryRow",
    "PDRequestRow",
    "PDResult",
    "PDSummary",
    "pd_good",
    "pd_result",
]
