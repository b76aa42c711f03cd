"""Measured against simulated: a ``vllm bench serve`` result beside servesim's run of the same workload.

For each latency metric the benchmark reports (TTFT, TPOT, ITL, E2E) the table puts every
statistic it wrote (mean, median, p99, ... in ms) next to the same statistic of the simulated
sample, computed the way ``vllm bench serve`` computes it (numpy's linear percentiles, TPOT per
request as ``(e2e - ttft) / (output - 1)``, ITL pooled over every token gap), with the relative
error ``(simulated - measured) / measured``. With ``--save-detailed`` per-request lists the two
distributions are drawn on shared bins (``<metric>.measured`` / ``<metric>.simulated`` histograms);
without them, each metric's reported percentiles are drawn against the simulated ones
(``<metric>.measured`` / ``<metric>.simulated`` series over the percentile).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from servesim.errors import InputError
from servesim.perf.replay import ReplayOutcome
from servesim.views.glossary import define
from servesim.views.model import Column, Histogram, Kpi, Section, Series, Table, Verdict
from servesim.views.shape import histogram

#: Display order and labels of the compared metrics.
METRICS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
#: Throughputs compared beside the latencies: (our key, vllm bench's key, unit).
THROUGHPUTS = (
    ("request_throughput", "request_throughput", "req/s"),
    ("output_token_throughput", "output_throughput", "tok/s"),
)
#: A sample: values and (for ITL, where a step's duration stands for many token gaps) weights.
Sample = tuple[np.ndarray, np.ndarray | None]


def stat_of(sample: Sample, stat: str) -> float | None:
    """One statistic (mean, median, std, p<P>) of a sample, as numpy computes it for vllm bench."""
    values, weights = sample
    v = np.asarray(values, dtype=np.float64)
    if weights is not None:
        v = np.repeat(v, np.maximum(np.asarray(weights, dtype=np.int64), 0))
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    if stat == "mean":
        return float(v.mean())
    if stat == "median":
        return float(np.median(v))
    if stat == "std":
        return float(v.std())
    if stat.startswith("p"):
        return float(np.percentile(v, float(stat[1:])))
    raise InputError(f"unknown statistic {stat!r}")


def replay_samples(out: ReplayOutcome) -> tuple[dict[str, Sample], dict[str, float | None]]:
    """The simulated samples of a client-side replay (``servesim.perf.replay``) and its throughputs:
    TTFT and E2E per finished request as the client saw them, TPOT per request with more than one
    output token, ITL from the engine's steps (``simulation.itl_values``)."""
    from servesim.views.simulation import itl_values

    fin = out.finished
    ttft = out.ttft[fin] * 1e3
    e2e = out.e2e[fin] * 1e3
    nout = out.num_output[fin].astype(np.float64)
    multi = nout > 1
    sim: dict[str, Sample] = {
        "ttft_ms": (ttft, None),
        "e2e_ms": (e2e, None),
        "tpot_ms": ((e2e[multi] - ttft[multi]) / (nout[multi] - 1), None),
    }
    if out.result is not None:
        sim["itl_ms"] = itl_values(out.result)
    span = float(np.max((out.send + out.e2e)[fin]) - np.min(out.send)) if fin.any() else 0.0
    return sim, _throughputs(float(fin.sum()), float(nout.sum()), span)


def records_samples(requests: pd.DataFrame) -> tuple[dict[str, Sample], dict[str, float | None]]:
    """The samples of a simulation's per-request records (``SimulationResult.to_pandas()``); no ITL
    (the records keep no per-step data)."""
    done = requests["finish_s"].notna()
    sim: dict[str, Sample] = {
        k: (requests.loc[done, k].to_numpy(dtype=np.float64), None) for k in ("ttft_ms", "tpot_ms", "e2e_ms")
    }
    span = float(requests["finish_s"].max() - requests["arrival_s"].min()) if done.any() else 0.0
    return sim, _throughputs(float(done.sum()), float(requests.loc[done, "num_output"].sum()), span)


def _throughputs(finished: float, tokens: float, span_s: float) -> dict[str, float | None]:
    """Finished requests and output tokens per second of the run's span (first send to last token)."""
    ok = span_s > 0
    return {
        "request_throughput": finished / span_s if ok else None,
        "output_token_throughput": tokens / span_s if ok else None,
    }


def _stat_order(stat: str) -> tuple[int, float]:
    order = {"mean": (0, 0.0), "median": (1, 50.0), "std": (3, 0.0)}
    return order.get(stat, (2, float(stat[1:]) if stat[1:].replace(".", "", 1).isdigit() else 0.0))


def _error(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated is None or measured == 0:
        return None
    return (simulated - measured) / measured


def overlay_view(
    measured_stats: Mapping[str, Mapping[str, float]],
    measured_samples: Mapping[str, np.ndarray],
    simulated: Mapping[str, Sample],
    *,
    measured_throughput: Mapping[str, float | None] | None = None,
    simulated_throughput: Mapping[str, float | None] | None = None,
    title: str = "measured vs simulated",
    text: list[str] | None = None,
    bins: int = 40,
    extra_rows: Mapping[str, tuple[float | None, float | None]] | None = None,
) -> Section:
    """The comparison as one Section (table of errors, KPI per metric's mean error, overlays).
    ``extra_rows``: further (measured, simulated) figures with their own definition, by label."""
    rows: list[list[Any]] = []
    kpis: list[Kpi] = []
    errors: list[float] = []
    for key, label in METRICS.items():
        stats = measured_stats.get(key, {})
        sample = simulated.get(key)
        for stat in sorted(stats, key=_stat_order):
            sim = stat_of(sample, stat) if sample is not None else None
            err = _error(stats[stat], sim)
            if err is not None and stat != "std":
                errors.append(abs(err))
            rows.append([f"{label} {stat}", stats[stat], sim, err])
        if "mean" in stats and sample is not None:
            err = _error(stats["mean"], stat_of(sample, "mean"))
            kpis.append(
                Kpi(
                    key=f"{key}_mean_error",
                    label=f"{label} mean error",
                    value=err,
                    unit="%",
                    decimals=1,
                    help="(simulated - measured) / measured, of the benchmark's mean " + label,
                )
            )
    for ours, theirs, unit in THROUGHPUTS:
        m = (measured_throughput or {}).get(theirs)
        s = (simulated_throughput or {}).get(ours)
        if m is None and s is None:
            continue
        err = _error(m, s)
        if err is not None:
            errors.append(abs(err))
        rows.append([f"{ours.replace('_', ' ')} ({unit})", m, s, err])
    for label, (m, sv) in (extra_rows or {}).items():
        err = _error(m, sv)
        if err is not None:
            errors.append(abs(err))
        rows.append([label, m, sv, err])
    table = Table(
        key="measured_vs_simulated",
        title="measured vs simulated (ms unless stated)",
        columns=[
            Column(key="metric", label="metric", kind="str"),
            Column(key="measured", label="measured", kind="float", help="From the vllm bench serve file."),
            Column(
                key="simulated", label="simulated", kind="float", help="servesim's run of the same workload."
            ),
            Column(key="error", label="error", kind="pct", help="(simulated - measured) / measured."),
        ],
        rows=rows,
        notes=[] if rows else ["the file reports no latency statistic servesim can compare"],
    )
    verdicts = []
    if errors:
        med = float(np.median(errors))
        verdicts.append(
            Verdict(
                key="overlay_error",
                label="simulation error",
                status="pass" if med <= 0.1 else ("warn" if med <= 0.25 else "fail"),
                text=f"median |error| {med:.1%} over {len(errors)} statistics (largest {max(errors):.1%})",
            )
        )
    histograms: list[Histogram] = []
    series: list[Series] = []
    for key, label in METRICS.items():
        sample = simulated.get(key)
        if sample is None:
            continue
        if key in measured_samples and len(measured_samples[key]):
            histograms += _pair(key, label, measured_samples[key], sample, bins)
        elif measured_stats.get(key):
            series += _percentile_pair(key, label, measured_stats[key], sample)
    return Section(
        key="overlay",
        title=title,
        kpis=kpis,
        tables=[table],
        histograms=histograms,
        series=series,
        verdicts=verdicts,
        text=text or [],
    )


def _pair(key: str, label: str, measured: np.ndarray, sample: Sample, bins: int) -> list[Histogram]:
    """Both distributions on the same bins (the range covering both), so the bars line up."""
    sim_v, sim_w = sample
    both = np.concatenate([np.asarray(measured, dtype=np.float64), np.asarray(sim_v, dtype=np.float64)])
    both = both[np.isfinite(both)]
    span = (float(both.min()), float(both.max())) if both.size else None
    return [
        histogram(
            f"{key}.{who}",
            f"{label}: {who}",
            values,
            "ms",
            bins=bins,
            weights=weights,
            help=define(key),
            value_range=span,
        )
        for who, values, weights in (("measured", measured, None), ("simulated", sim_v, sim_w))
    ]


def _percentile_pair(key: str, label: str, stats: Mapping[str, float], sample: Sample) -> list[Series]:
    pcts = sorted(
        {
            50.0 if s == "median" else float(s[1:])
            for s in stats
            if s == "median" or s[1:].replace(".", "", 1).isdigit()
        }
    )
    if not pcts:
        return []
    measured = [stats["median"] if p == 50.0 and "median" in stats else stats[_pname(p)] for p in pcts]
    simulated = [stat_of(sample, f"p{p:g}") or 0.0 for p in pcts]
    return [
        Series(
            key=f"{key}.{who}",
            title=f"{label} percentiles: measured vs simulated",
            x_label="percentile",
            x_unit=None,
            y_label=label,
            y_unit="ms",
            x=pcts,
            y=[float(y) for y in ys],
            kind="line",
            help=define(key),
        )
        for who, ys in (("measured", measured), ("simulated", simulated))
    ]


def _pname(p: float) -> str:
    return f"p{int(p)}" if p == int(p) else f"p{p:g}"


__all__ = ["METRICS", "Sample", "overlay_view", "records_samples", "replay_samples", "stat_of"]
