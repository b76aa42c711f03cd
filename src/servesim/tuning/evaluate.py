"""One deployment on one trace: the numbers capacity planning needs, and their status.

``run_once`` simulates a deployment (one replica with ``simulate``, several with
``simulate_cluster`` behind the router) and reduces the result to ``RunMetrics``. ``RatePoint``
aggregates the runs of several seeds at one arrival rate.

**Status** of a run:

* ``QUEUE_SATURATED`` when the waiting queue keeps growing (``stats.queue_trend``), or when the
  queue timeout sheds more than ``max_shed_fraction`` of the requests (a bounded queue that
  overflows is saturated too, it just hides it in rejections);
* else ``KV_THRASHING`` when preemptions per request exceed ``thrash_preemptions_per_request``
  (requests evicted and recomputed because the KV cache is too small for the batch);
* else ``STABLE``.

At one rate over several seeds: saturated when most runs are, thrashing when the mean
preemptions per request exceed the threshold.

**KV-cache exhaustion events** (``kv_exhaustion_events``): a step is *KV-blocked* when it preempted
a request, or when with chunked prefill on it left requests waiting although the batch had a free
sequence slot and token budget to spare: vLLM's admission loop stops there only when the KV cache
cannot take the next request (with ``scheduler_reserve_full_isl`` its whole prompt + output). An
event is a maximal run of consecutive KV-blocked steps of one replica. With chunked prefill off a
waiting prompt can also be stopped by the token budget, which the step record cannot tell apart,
so only preempting steps and steps that scheduled nothing count (a lower bound).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from servesim.cluster import Replica, RouterSpec, simulate_cluster
from servesim.engine import simulate
from servesim.engine.admission import REJECTED_503
from servesim.engine.config import EngineConfig
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.results import OUTCOME_REJECTED_TIMEOUT, LatencyStats, SimulationSummary
from servesim.spec import ResolvedDeployment
from servesim.traces.schema import Trace
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.hardware import Hardware
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.stats import QueueTestSettings, QueueTrend, Spread, queue_trend

Status = Literal["STABLE", "QUEUE_SATURATED", "KV_THRASHING"]


class EvalSettings(BaseModel):
    """How runs are judged and clusters are routed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_test: QueueTestSettings = Field(default_factory=QueueTestSettings)
    thrash_preemptions_per_request: float = Field(
        0.1, ge=0, description="KV_THRASHING above this many preemptions per request."
    )
    max_shed_fraction: float = Field(
        0.01, ge=0, le=1, description="QUEUE_SATURATED when the queue timeout rejects more than this."
    )
    router: RouterSpec = Field(default_factory=RouterSpec, description="Router of multi-replica runs.")
    max_rejection_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="QUEUE_SATURATED when vLLM's API server answers 503 (max_num_queued_reqs/tokens) "
        "to more than this fraction of the requests (0: none allowed).",
    )

    @model_serializer(mode="wrap")
    def _budget_when_set(self, handler: Any) -> Any:
        """Without a rejection budget, the settings' document (a study's fingerprint) is as before."""
        d = handler(self)
        if isinstance(d, dict) and d.get("max_rejection_rate") == 0.0:
            del d["max_rejection_rate"]
        return d


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)
    mean: float
    p50: float
    p90: float
    p99: float


class RunMetrics(BaseModel):
    """One simulation, reduced (latencies in ms over finished requests, as vLLM reports them)."""

    seed: int
    rate_rps: float | None = Field(description="The nominal rate asked for (None: as given).")
    num_requests: int
    offered_rps: float = Field(description="Measured: (n - 1) / arrival span.")
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    throughput_rps: float = Field(
        description="Finished per second, 10th-90th percentile completions, at most offered_rps."
    )
    output_tokens_per_s: float = Field(description="Output tokens per second over the same window.")
    goodput_rps: float = Field(description="The engine's: good requests / (first arrival to last finish).")
    good_fraction: float = Field(description="Good requests / all requests (rejected ones are not good).")
    rejected_fraction: float = Field(description="Rejected by the queue timeout or as too long.")
    shed_fraction: float = Field(description="Rejected by the queue timeout.")
    preemptions_per_request: float
    kv_exhaustion_events: int
    kv_blocked_time_fraction: float = Field(description="Share of busy time in KV-blocked steps.")
    max_kv_usage: float
    mean_running: float
    num_steps: int
    duration_s: float
    queue: QueueTrend
    queue_saturated: bool
    kv_thrashing: bool
    status: Status
    slo_violations: list[str] = Field(default_factory=list)

    @property
    def slo_ok(self) -> bool:
        return not self.slo_violations

    def p99(self) -> dict[str, float]:
        return {"ttft": self.ttft_ms.p99, "tpot": self.tpot_ms.p99, "e2e": self.e2e_ms.p99}


def _pct(stats: LatencyStats) -> Percentiles:
    return Percentiles(mean=stats.mean, p50=stats.p50, p90=stats.p90, p99=stats.p99)


def replica_rows(steps: pd.DataFrame) -> list[slice | np.ndarray]:
    """Each replica's rows of a steps frame, in the order of the replicas' names (one slice for
    a single replica's frame), each in its original (time) order: what
    ``steps.groupby("replica", sort=True)`` gives, without splitting every column of a cluster's
    million-row frame twice per run (a tenth of a tuning trial's CPU)."""
    if "replica" not in steps:
        return [slice(0, len(steps))]
    codes, _ = pd.factorize(steps["replica"], sort=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(int(codes.max()) + 2))
    return [order[bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1) if bounds[k + 1] > bounds[k]]


def waiting_at(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Requests in the waiting queues (new and preempted, all replicas) at each of ``times``: each
    replica's count after scheduling its latest step that started by then (0 before its first)."""
    t = np.asarray(times, dtype=np.float64)
    total = np.zeros(len(t))
    if len(steps) == 0:
        return total
    start_all = steps["start_s"].to_numpy(dtype=np.float64)
    waiting_all = steps["num_waiting"].to_numpy(dtype=np.float64)
    for rows in replica_rows(steps):
        start = start_all[rows]
        waiting = waiting_all[rows]
        idx = np.searchsorted(start, t, side="right") - 1
        total += np.where(idx >= 0, waiting[np.clip(idx, 0, None)], 0.0)
    return total


def kv_blocked_steps(steps: pd.DataFrame, config: EngineConfig) -> np.ndarray:
    """Which steps were blocked by the KV cache (see the module docstring)."""
    preempted = steps["num_preempted"].to_numpy() > 0
    waiting = steps["num_waiting"].to_numpy() > 0
    running = steps["num_running"].to_numpy()
    tokens = steps["num_tokens"].to_numpy()
    if config.enable_chunked_prefill:
        blocked = waiting & (running < config.max_num_seqs) & (tokens < config.max_num_batched_tokens)
    else:
        blocked = waiting & (tokens == 0)
    return np.asarray(preempted | blocked, dtype=bool)


def kv_exhaustion(steps: pd.DataFrame, config: EngineConfig) -> tuple[int, float]:
    """(events, share of busy time blocked) over every replica's steps."""
    if len(steps) == 0:
        return 0, 0.0
    blocked_all = kv_blocked_steps(steps, config)  # a per-row test: the same on any slice of rows
    duration = steps["duration_s"].to_numpy()
    events = 0
    blocked_s = 0.0
    for rows in replica_rows(steps):
        b = blocked_all[rows]
        events += int(b[0]) + int(np.count_nonzero(b[1:] & ~b[:-1]))
        blocked_s += float(duration[rows][b].sum())
    busy = float(steps["duration_s"].sum())
    return events, (blocked_s / busy if busy > 0 else 0.0)


def replica_specs(deployment: Deployment, res: ResolvedDeployment, config: EngineConfig) -> list[Replica]:
    """The deployment's replicas for the cluster simulator, each with its own CPU tier when the
    deployment sets ``kv_offloading_size`` (``res.kv_connector``: each engine needs its own)."""
    factory = None
    if config.kv_offloading_size is not None:
        res.kv_connector()  # refuses early, with the reason

        def factory() -> OffloadingConnector | None:
            return res.kv_connector()

    return [Replica(f"replica-{i}", config, res.step_time, factory) for i in range(deployment.replicas)]


def run_once(
    trace: Trace,
    deployment: Deployment,
    hardware: Hardware,
    slo: PercentileSLO | None = None,
    settings: EvalSettings | None = None,
    *,
    seed: int = 0,
    rate: float | None = None,
) -> RunMetrics:
    """Simulate ``deployment`` on ``trace`` and judge the run (``ValueError`` if it cannot run)."""
    st = settings or EvalSettings()
    config, res = resolve_deployment(deployment, hardware)
    request_slo = slo.request_slo() if slo is not None else None
    summary: SimulationSummary
    if deployment.replicas == 1:
        conn = res.kv_connector()
        result = simulate(trace, config, res.step_time, slo=request_slo, kv_connector=conn, pooled_itl=False)
        summary, requests, steps = result.summary, result.requests, result.steps
    else:
        replicas = replica_specs(deployment, res, config)
        cres = simulate_cluster(
            trace, replicas, st.router, slo=request_slo, pooled_itl=False, replica_summaries=False
        )
        summary, requests, steps = cres.summary.cluster, cres.requests, cres.steps
    return measure(summary, requests, steps, config, slo, st, seed=seed, rate=rate)


def simulate_requests(
    trace: Trace,
    deployment: Deployment,
    hardware: Hardware,
    slo: PercentileSLO | None = None,
    settings: EvalSettings | None = None,
) -> pd.DataFrame:
    """The request records of ``deployment`` on ``trace`` (as ``run_once`` simulates them)."""
    st = settings or EvalSettings()
    config, res = resolve_deployment(deployment, hardware)
    request_slo = slo.request_slo() if slo is not None else None
    if deployment.replicas == 1:
        conn = res.kv_connector()
        return simulate(
            trace, config, res.step_time, slo=request_slo, kv_connector=conn, pooled_itl=False
        ).requests
    replicas = replica_specs(deployment, res, config)
    return simulate_cluster(
        trace, replicas, st.router, slo=request_slo, pooled_itl=False, replica_summaries=False
    ).requests


def measure(
    summary: SimulationSummary,
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    config: EngineConfig,
    slo: PercentileSLO | None,
    settings: EvalSettings,
    *,
    seed: int,
    rate: float | None,
) -> RunMetrics:
    n = summary.num_requests
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    span = float(arrival.max() - arrival.min()) if n >= 2 else 0.0
    outcome = requests["outcome"].to_numpy()
    timed_out = outcome == OUTCOME_REJECTED_TIMEOUT
    trend = queue_trend(arrival, waiting_at(arrival, steps), settings.queue_test)
    shed = float(timed_out.sum()) / n if n else 0.0
    refused = float(np.isin(outcome, REJECTED_503).sum()) / n if n else 0.0  # HTTP 503s
    rejected = (summary.num_rejected_queue_timeout + summary.num_rejected_prompt_too_long) / n if n else 0.0
    rejected += refused
    ppr = summary.num_preemptions / n if n else 0.0
    events, blocked = kv_exhaustion(steps, config)
    # 503s bound the queue (its trend looks stable): beyond the user's budget they are saturation
    saturated = trend.unstable or shed > settings.max_shed_fraction or refused > settings.max_rejection_rate
    thrashing = ppr > settings.thrash_preemptions_per_request
    status: Status = "QUEUE_SATURATED" if saturated else ("KV_THRASHING" if thrashing else "STABLE")
    good_fraction = summary.num_good / n if n else 1.0
    throughput, token_rate = steady_throughput(requests)
    metrics = RunMetrics(
        seed=seed,
        rate_rps=rate,
        num_requests=n,
        offered_rps=(n - 1) / span if span > 0 else 0.0,
        ttft_ms=_pct(summary.ttft_ms),
        tpot_ms=_pct(summary.tpot_ms),
        e2e_ms=_pct(summary.e2e_ms),
        throughput_rps=throughput,
        output_tokens_per_s=token_rate,
        goodput_rps=summary.goodput,
        good_fraction=good_fraction,
        rejected_fraction=rejected,
        shed_fraction=shed,
        preemptions_per_request=ppr,
        kv_exhaustion_events=events,
        kv_blocked_time_fraction=blocked,
        max_kv_usage=summary.max_kv_usage,
        mean_running=summary.mean_running,
        num_steps=summary.num_steps,
        duration_s=summary.duration_s,
        queue=trend,
        queue_saturated=saturated,
        kv_thrashing=thrashing,
        status=status,
    )
    if slo is not None:
        metrics.slo_violations = slo.violations(metrics.p99(), good_fraction)
    return metrics


def steady_throughput(requests: pd.DataFrame) -> tuple[float, float]:
    """(requests/s, output tokens/s) finished between the 10th and the 90th percentile of the
    completion times (the ramp-up and the draining tail of a finite trace left out), capped at the
    offered rate ``(n - 1) / arrival span``.

    Below capacity this is the arrival rate, above it the service rate. The cap is flow
    conservation: finishes cannot durably outpace arrivals, and a central window that reads
    faster than the offered rate is reading a backlog drain, not capacity. (A short overloaded
    trace drains its backlog in one lockstep batch whose finishes lie a fraction of a second
    apart: 200 requests at 134 req/s offered read 501 req/s uncapped, issue 30.)"""
    finish = requests["finish_s"].to_numpy(dtype=np.float64)
    done = ~np.isnan(finish)
    order = np.argsort(finish[done], kind="stable")
    f = finish[done][order]
    out = requests["num_output"].to_numpy(dtype=np.float64)[done][order]
    if len(f) < 10:
        if len(f) == 0 or not f[-1] > 0:
            return 0.0, 0.0
        rps, tok = float(len(f) / f[-1]), float(out.sum() / f[-1])
    else:
        lo, hi = int(0.1 * (len(f) - 1)), int(0.9 * (len(f) - 1))
        span = max(float(f[hi] - f[lo]), 1e-9)
        rps, tok = (hi - lo) / span, float(out[lo + 1 : hi + 1].sum()) / span
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    arrival_span = float(arrival.max() - arrival.min()) if len(arrival) >= 2 else 0.0
    if arrival_span > 0 and rps > (offered := (len(arrival) - 1) / arrival_span):
        return offered, tok * offered / rps
    return rps, tok


def capacity_rps(requests: pd.DataFrame) -> float:
    """Service rate of an overloaded run (``steady_throughput`` of a run far above capacity)."""
    return steady_throughput(requests)[0]


def probe_capacity(
    trace: Trace, deployment: Deployment, hardware: Hardware, settings: EvalSettings | None = None
) -> float:
    """``capacity_rps`` of ``deployment`` on ``trace`` (give it a trace far above capacity)."""
    st = settings or EvalSettings()
    config, res = resolve_deployment(deployment, hardware)
    # No queue timeout here: the probe measures the service rate, not the shedding policy.
    config = config.model_copy(update={"queue_timeout_s": None})
    if deployment.replicas == 1:
        conn = res.kv_connector()
        return capacity_rps(
            simulate(trace, config, res.step_time, kv_connector=conn, pooled_itl=False).requests
        )
    replicas = replica_specs(deployment, res, config)
    return capacity_rps(
        simulate_cluster(trace, replicas, st.router, pooled_itl=False, replica_summaries=False).requests
    )


class LatencySpread(BaseModel):
    """p50/p90/p99 (and mean) of one latency over the seeds of one rate."""

    mean: Spread
    p50: Spread
    p90: Spread
    p99: Spread

    @classmethod
    def of(cls, items: list[Percentiles]) -> LatencySpread:
        return cls(
            mean=Spread.of([x.mean for x in items]),
            p50=Spread.of([x.p50 for x in items]),
            p90=Spread.of([x.p90 for x in items]),
            p99=Spread.of([x.p99 for x in items]),
        )


class RatePoint(BaseModel):
    """One arrival rate over several seeds: a point of the throughput-latency curve."""

    rate_rps: float
    seeds: list[int]
    offered_rps: Spread
    throughput_rps: Spread
    output_tokens_per_s: Spread
    goodput_rps: Spread
    good_fraction: Spread
    ttft_ms: LatencySpread
    tpot_ms: LatencySpread
    e2e_ms: LatencySpread
    queue_slope: Spread = Field(description="Overload: growth of the waiting queue / arrival rate.")
    queue_p_value: Spread
    saturated_runs: int
    preemptions_per_request: Spread
    kv_exhaustion_events: Spread
    shed_fraction: Spread
    max_kv_usage: Spread
    queue_saturated: bool = Field(description="Most seeds' queues were saturated.")
    kv_thrashing: bool = Field(description="Mean preemptions per request above the threshold.")
    status: Status
    slo_ok: bool | None = Field(description="Every seed met the SLO (None: no SLO given).")
    slo_violations: list[str] = Field(description="What the worst seeds missed.")

    @classmethod
    def of(cls, rate: float, runs: list[RunMetrics], settings: EvalSettings, has_slo: bool) -> RatePoint:
        saturated_runs = sum(r.queue_saturated for r in runs)
        saturated = 2 * saturated_runs > len(runs)
        ppr = Spread.of([r.preemptions_per_request for r in runs])
        thrashing = ppr.mean > settings.thrash_preemptions_per_request
        status: Status = "QUEUE_SATURATED" if saturated else ("KV_THRASHING" if thrashing else "STABLE")
        violations = list(dict.fromkeys(v for r in runs for v in r.slo_violations))
        return cls(
            rate_rps=rate,
            seeds=[r.seed for r in runs],
            offered_rps=Spread.of([r.offered_rps for r in runs]),
            throughput_rps=Spread.of([r.throughput_rps for r in runs]),
            output_tokens_per_s=Spread.of([r.output_tokens_per_s for r in runs]),
            goodput_rps=Spread.of([r.goodput_rps for r in runs]),
            good_fraction=Spread.of([r.good_fraction for r in runs]),
            ttft_ms=LatencySpread.of([r.ttft_ms for r in runs]),
            tpot_ms=LatencySpread.of([r.tpot_ms for r in runs]),
            e2e_ms=LatencySpread.of([r.e2e_ms for r in runs]),
            queue_slope=Spread.of([r.queue.slope for r in runs]),
            queue_p_value=Spread.of([r.queue.p_value for r in runs]),
            saturated_runs=saturated_runs,
            preemptions_per_request=ppr,
            kv_exhaustion_events=Spread.of([float(r.kv_exhaustion_events) for r in runs]),
            shed_fraction=Spread.of([r.shed_fraction for r in runs]),
            max_kv_usage=Spread.of([r.max_kv_usage for r in runs]),
            queue_saturated=saturated,
            kv_thrashing=thrashing,
            status=status,
            slo_ok=(not violations) if has_slo else None,
            slo_violations=violations,
        )
