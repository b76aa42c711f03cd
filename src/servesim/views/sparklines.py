"""Sparklines for the KPI tiles: each headline figure over the run's time, in a few dozen bins.

A latency percentile in a bin is that percentile of the requests *observed* in the bin, as a
dashboard scraping the server would see them: TTFT at the first token, TPOT and E2E at the finish;
ITL from the steps that ran in the bin (a step's duration stands for each of its token gaps, as in
``simulation.itl_values``). Throughputs are finished requests / output tokens / good requests per
second of the bin; SLO attainment the share of the bin's finished requests that were good; the
prefix-cache hit rate that of the prompt tokens of the requests first admitted in the bin. Bins
without a sample are left out (a line through them would invent a value).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servesim.engine.results import LatencyStats, SimulationResult
from servesim.views.model import Series

PERCENTILES = ("p50", "p90", "p95", "p99")


def _bin_index(t: np.ndarray, t0: float, t1: float, bins: int) -> np.ndarray:
    width = (t1 - t0) / bins if t1 > t0 else 1.0
    k = np.floor((np.asarray(t, dtype=np.float64) - t0) / width)
    return np.where(np.isfinite(k), np.clip(k, 0, bins - 1), -1).astype(np.int64)


def _spark(key: str, label: str, unit: str | None, x: list[float], y: list[float]) -> Series:
    return Series(
        key=key, title=f"{label} over time", x_label="time", x_unit="s", y_label=label, y_unit=unit, x=x, y=y
    )


def _latency_sparks(
    req: pd.DataFrame, st: pd.DataFrame, t0: float, t1: float, bins: int, centers: list[float]
) -> dict[str, Series]:
    """Each latency's percentiles per time bin, a request counted when its metric is known (its
    first token for TTFT, its finish otherwise) and ITL weighted by the decodes of each step;
    an empty bin is left out rather than drawn as zero."""
    out: dict[str, Series] = {}
    samples: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {
        "ttft_ms": (
            req["first_token_s"].to_numpy(dtype=np.float64),
            req["ttft_ms"].to_numpy(np.float64),
            None,
        ),
        "tpot_ms": (req["finish_s"].to_numpy(dtype=np.float64), req["tpot_ms"].to_numpy(np.float64), None),
        "e2e_ms": (req["finish_s"].to_numpy(dtype=np.float64), req["e2e_ms"].to_numpy(np.float64), None),
        "itl_ms": (
            st["start_s"].to_numpy(dtype=np.float64),
            st["duration_s"].to_numpy(dtype=np.float64) * 1e3,
            st["num_decodes"].to_numpy(dtype=np.int64),
        ),
    }
    labels = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
    for metric, (when, values, weights) in samples.items():
        k = _bin_index(when, t0, t1, bins)
        ok = np.isfinite(values) & (k >= 0)
        per_bin: list[tuple[float, LatencyStats]] = []
        for b in range(bins):
            sel = ok & (k == b)
            stats = LatencyStats.of(values[sel], None if weights is None else weights[sel])
            if stats.count:
                per_bin.append((centers[b], stats))
        for p in PERCENTILES:
            out[f"{metric}_{p}"] = _spark(
                f"{metric}_{p}",
                f"{labels[metric]} {p}",
                "ms",
                [x for x, _ in per_bin],
                [round(float(getattr(s, p)), 4) for _, s in per_bin],
            )
    return out


def _prefix_hit_spark(req: pd.DataFrame, t0: float, t1: float, bins: int, centers: list[float]) -> Series:
    """The prefix cache's hit rate per time bin, by first admission as
    ``simulation.prefix_hit_bins`` bins it, so the sparkline and the chart agree."""
    admit = _bin_index(req["first_scheduled_s"].to_numpy(dtype=np.float64), t0, t1, bins)
    seen = admit >= 0
    hits = np.bincount(
        admit[seen], weights=req["prefix_hit_tokens"].to_numpy(dtype=np.float64)[seen], minlength=bins
    )
    queries = np.bincount(
        admit[seen], weights=req["prompt_len"].to_numpy(dtype=np.float64)[seen], minlength=bins
    )
    some = queries > 0
    return _spark(
        "prefix_cache_hit_rate",
        "prefix cache hit rate",
        "%",
        [c for c, h in zip(centers, some, strict=True) if h],
        _r(hits[some] / queries[some]),
    )


def kpi_sparklines(result: SimulationResult, *, bins: int = 24) -> dict[str, Series]:
    """``{kpi key: Series}`` for every tile of ``simulation.kpis`` at p50/p90/p95/p99."""
    req = result.requests
    st = result.steps
    if not len(st):
        return {}
    t0 = float(st["start_s"].iloc[0])
    t1 = float((st["start_s"] + st["duration_s"]).iloc[-1])
    width = (t1 - t0) / bins if t1 > t0 else 1.0
    centers = [round(t0 + (i + 0.5) * width, 6) for i in range(bins)]
    out = _latency_sparks(req, st, t0, t1, bins, centers)
    finish = _bin_index(req["finish_s"].to_numpy(dtype=np.float64), t0, t1, bins)
    done = finish >= 0
    finished = np.bincount(finish[done], minlength=bins).astype(np.float64)
    good = np.bincount(finish[done], weights=req["good"].to_numpy()[done].astype(np.float64), minlength=bins)
    step_end = _bin_index((st["start_s"] + st["duration_s"]).to_numpy(dtype=np.float64), t0, t1, bins)
    tokens = np.bincount(step_end, weights=st["num_decodes"].to_numpy(dtype=np.float64), minlength=bins)
    out["request_throughput"] = _spark(
        "request_throughput", "request throughput", "req/s", centers, _r(finished / width)
    )
    out["output_token_throughput"] = _spark(
        "output_token_throughput", "output token throughput", "tok/s", centers, _r(tokens / width)
    )
    if result.summary.slo is not None:
        out["goodput"] = _spark("goodput", "goodput", "req/s", centers, _r(good / width))
        has = finished > 0
        out["good_fraction"] = _spark(
            "good_fraction",
            "SLO attainment",
            "%",
            [c for c, h in zip(centers, has, strict=True) if h],
            _r(good[has] / finished[has]),
        )
    if result.summary.prefix_cache_hit_rate is not None:  # by first admission, as simulation.prefix_hit_bins
        out["prefix_cache_hit_rate"] = _prefix_hit_spark(req, t0, t1, bins, centers)
    return out


def _r(values: np.ndarray) -> list[float]:
    return [round(float(v), 4) for v in values]


__all__ = ["PERCENTILES", "kpi_sparklines"]
