"""``inspect_trace``: the numbers that say what a trace holds (load, burstiness, lengths, reuse).

Definitions (the same as ``compute_stats.py`` beside the public traces, so they can be
compared): time span = last - first arrival; mean rate = (n - 1) / span; inter-arrival CV =
std / mean of the gaps (population std; 1 for Poisson); dispersion = variance / mean of the
arrivals per 1-second bin from the first arrival (1 for Poisson). Percentiles use linear
interpolation. A quantity that is undefined (fewer than 2 requests, zero span) is 0.

Prefix reuse ratio = share of all prompt tokens that an earlier request already had:

* with ``hash_ids``: a request reuses its leading blocks whose whole prefix (block ids 0..j)
  appeared in an earlier request, as a prefix cache would; reused tokens are capped at the
  prompt length (the last block may be partial).
* else with ``prefix_group``: a request reuses min(its prefix_len, the longest prefix_len of
  its group seen before).
* ``None`` when the trace has neither.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from servesim.traces.schema import DroppedRow, Trace, TraceFormat


class LengthStats(BaseModel):
    """Distribution of one token-count column."""

    model_config = ConfigDict(frozen=True)

    mean: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    min: int = 0
    max: int = 0
    total: int = 0


class TraceStats(BaseModel):
    """Summary of a trace (``servesim trace inspect --json`` prints this)."""

    model_config = ConfigDict(frozen=True)

    source: str
    format: TraceFormat
    num_requests: int = Field(description="Rows in the trace.")
    num_dropped: int = Field(description="Rows the reader dropped as bad.")
    dropped_examples: list[DroppedRow] = Field(description="The first few dropped rows.")
    reordered: bool = Field(description="The reader sorted rows by arrival time.")
    time_span_s: float = Field(description="Last minus first arrival, seconds.")
    mean_rate_rps: float = Field(description="(n - 1) / time span, requests per second.")
    iat_cv: float = Field(description="Coefficient of variation of inter-arrival times (1 = Poisson).")
    dispersion_1s: float = Field(description="Variance/mean of arrivals per 1-s bin (1 = Poisson).")
    peak_1s: int = Field(description="Most arrivals in one 1-s bin.")
    prompt: LengthStats
    output: LengthStats
    prefix_reuse_ratio: float | None = Field(
        description="Share of prompt tokens seen earlier (None: no info)."
    )
    prefix_reuse_from: Literal["hash_ids", "prefix_group"] | None
    num_prefix_groups: int
    num_tenants: int
    hash_block_size: int | None


def inspect_trace(trace: Trace, *, max_examples: int = 5) -> TraceStats:
    """Summarise ``trace`` (an empty trace gives zeros)."""
    df = trace.df
    prov = trace.provenance
    t = df["arrival_time_s"].to_numpy(dtype=np.float64)
    span, rate, cv, disp, peak = _arrival_stats(t)
    reuse, reuse_from = _prefix_reuse(df, trace.hash_block_size)
    return TraceStats(
        source=prov.source,
        format=prov.format,
        num_requests=len(df),
        num_dropped=prov.num_dropped,
        dropped_examples=prov.dropped[:max_examples],
        reordered=prov.reordered,
        time_span_s=span,
        mean_rate_rps=rate,
        iat_cv=cv,
        dispersion_1s=disp,
        peak_1s=peak,
        prompt=_length_stats(df["prompt_len"].to_numpy()),
        output=_length_stats(df["output_len"].to_numpy()),
        prefix_reuse_ratio=reuse,
        prefix_reuse_from=reuse_from,
        num_prefix_groups=int(df["prefix_group"].nunique(dropna=True)),
        num_tenants=int(df["tenant"].nunique(dropna=True)),
        hash_block_size=trace.hash_block_size,
    )


def _arrival_stats(t: np.ndarray) -> tuple[float, float, float, float, int]:
    """(span, mean rate, IAT CV, 1-s dispersion, peak 1-s count) of sorted arrival times."""
    if len(t) == 0:
        return 0.0, 0.0, 0.0, 0.0, 0
    span = float(t[-1] - t[0])
    bins = np.floor(t - t[0])
    num_bins = float(bins[-1]) + 1.0
    if num_bins <= 4 * len(t) + 1_000_000:
        counts = np.bincount(bins.astype(np.int64))
        disp = float(counts.var() / counts.mean())
        peak = int(counts.max())
    else:  # sparse in time (an arrival at 1e18 s): sized by the requests, not the span
        _, occupied = np.unique(bins, return_counts=True)
        mean = len(t) / num_bins
        var = float(np.sum(occupied.astype(np.float64) ** 2)) / num_bins - mean * mean
        disp = max(var, 0.0) / mean
        peak = int(occupied.max())
    if len(t) < 2 or span <= 0:
        return span, 0.0, 0.0, disp, peak
    iat = np.diff(t)
    return span, (len(t) - 1) / span, float(iat.std() / iat.mean()), disp, peak


def _length_stats(x: np.ndarray) -> LengthStats:
    if len(x) == 0:
        return LengthStats()
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return LengthStats(
        mean=float(x.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        min=int(x.min()),
        max=int(x.max()),
        total=int(x.sum()),
    )


def _prefix_reuse(
    df: pd.DataFrame, block: int | None
) -> tuple[float | None, Literal["hash_ids", "prefix_group"] | None]:
    total = int(df["prompt_len"].sum())
    if block is not None and df["hash_ids"].notna().any():
        reused = _hash_reuse(df["hash_ids"].tolist(), df["prompt_len"].to_numpy(), block)
        return (reused / total if total else 0.0), "hash_ids"
    groups = df["prefix_group"]
    if groups.notna().any():
        plen = df["prefix_len"]
        seen_max = plen.groupby(groups).cummax().groupby(groups).shift(1).fillna(0).to_numpy()
        reused_rows = np.where(groups.notna().to_numpy(), np.minimum(plen.to_numpy(), seen_max), 0)
        return float(reused_rows.sum()) / total if total else 0.0, "prefix_group"
    return None, None


def _hash_reuse(hash_ids: list[list[int] | None], prompt_len: np.ndarray, block: int) -> int:
    """Tokens of leading blocks whose full prefix appeared earlier (a trie of block-id chains)."""
    children: dict[tuple[int, int], int] = {}  # (parent node, block id) -> node
    reused = 0
    for ids, plen in zip(hash_ids, prompt_len.tolist(), strict=True):
        if not ids:
            continue
        node, hits, matching = 0, 0, True
        for h in ids:
            key = (node, h)
            nxt = children.get(key)
            if nxt is None:
                matching = False
                nxt = len(children) + 1
                children[key] = nxt
            elif matching:
                hits += 1
            node = nxt
        reused += min(hits * block, plen)
    return reused
