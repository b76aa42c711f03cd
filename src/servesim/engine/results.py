"""Simulation results: per-request records, per-step time series, and the summary metrics.

Metric definitions follow vLLM (``vllm/v1/metrics``, ``vllm bench serve``):

* TTFT = first output token - arrival; E2E = last token - arrival; queue time = first
  scheduled - arrival (a preemption does not reset it);
* TPOT = (last token - first token) / (outputs - 1), for requests with more than one output;
* ITL = every gap between consecutive outputs of a request, pooled over requests;
* percentiles are ``numpy.percentile`` (linear interpolation); latencies are in milliseconds;
* throughput divides by the span from the first arrival to the last completion;
* goodput counts requests that finished and meet every SLO given (the run's ``SLO`` and the
  request's own ``sla_ttft_ms`` / ``sla_e2e_ms``); TPOT counts as 0 for one-token outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from servesim.engine.admission import AdmissionSummary
from servesim.engine.config import EngineConfig
from servesim.engine.pooled import first_above, pooled_sample, sort_weighted
from servesim.engine.request import OUTCOMES
from servesim.engine.sums import sum_of_products
from servesim.errors import InputError, shown
from servesim.traces.schema import TraceProvenance

OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED, OUTCOME_REJECTED_TOO_LONG, OUTCOME_REJECTED_TIMEOUT = OUTCOMES[1:5]
OUTCOME_UNFINISHED = OUTCOMES[0]

PERCENTILES = (50, 90, 95, 99)


class SLO(BaseModel):
    """Latency objectives a request must meet to count towards goodput (any subset)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ttft_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    tpot_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    e2e_ms: float | None = Field(None, gt=0, allow_inf_nan=False)

    @classmethod
    def parse(cls, text: str) -> SLO:
        """Parse ``ttft_ms=500,tpot_ms=50`` (also ``ttft=500``; units are milliseconds)."""
        values: dict[str, float] = {}
        if text.strip() and not any(p.strip() for p in text.split(",")):
            raise InputError(f"SLO {shown(text)} names no cap: write ttft_p99_ms=500,tpot_p99_ms=50")
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            if not sep:
                raise InputError(f"SLO term {shown(part)} must look like name=value")
            name = key.strip().lower()
            base = name.removesuffix("_ms")
            metric, _, pct = base.partition("_")
            if metric not in ("ttft", "tpot", "e2e"):
                raise InputError(f"unknown SLO {shown(name)}: use ttft_p99_ms, tpot_p99_ms or e2e_p99_ms")
            if pct not in ("p99", ""):  # the one syntax of every command: a bare ttft_ms is the p99
                raise InputError(
                    f"SLO {shown(name)}: servesim caps the p99 (write {metric}_p99_ms); other percentiles "
                    "are reported, not capped"
                )
            try:
                values[f"{metric}_ms"] = float(val)
                if not math.isfinite(values[f"{metric}_ms"]):
                    raise ValueError
            except ValueError:
                raise InputError(
                    f"SLO {name!r}: {val.strip()[:40]!r} is not a finite number of milliseconds"
                ) from None
        return cls.model_validate(values)


class LatencyStats(BaseModel):
    """Distribution of one latency metric in milliseconds (all zero when there is no sample)."""

    count: int = 0
    mean: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, values_ms: np.ndarray, weights: np.ndarray | None = None) -> LatencyStats:
        v = np.asarray(values_ms, dtype=np.float64)
        if weights is None:
            v = v[~np.isnan(v)]
            if v.size == 0:
                return cls()
            ps = np.percentile(v, PERCENTILES)
            return cls(
                count=int(v.size),
                mean=float(v.mean()),
                p50=float(ps[0]),
                p90=float(ps[1]),
                p95=float(ps[2]),
                p99=float(ps[3]),
                max=float(v.max()),
            )
        w = np.asarray(weights, dtype=np.int64)
        keep = w > 0
        return cls.of_positive_weights(v[keep], w[keep])

    @classmethod
    def of_positive_weights(cls, v: np.ndarray, w: np.ndarray) -> LatencyStats:
        """``of(v, w)`` when every weight is > 0 (float64 values, integer weights; int32 halves
        the memory of a sample of millions of steps). Sorts ``v`` in place (pass an array of your
        own): a run of millions of steps pools millions of ITL values, and sorted copies would
        double them. The weights follow the values' stable order (the mean below sums in it)."""
        total = int(w.sum(dtype=np.int64))
        if total == 0:
            return cls()
        sort_weighted(v, w)
        wp = _weighted_percentiles(v, w, total)
        return cls(
            count=total,
            mean=sum_of_products(v, w) / total,
            p50=wp[0],
            p90=wp[1],
            p95=wp[2],
            p99=wp[3],
            max=float(v[-1]),
        )


def _weighted_percentiles(sorted_v: np.ndarray, w: np.ndarray, total: int) -> list[float]:
    """``numpy.percentile(linear)`` at ``PERCENTILES`` of the sample in which ``sorted_v[i]``
    repeats ``w[i]`` times."""
    spots = []
    for q in PERCENTILES:
        pos = (total - 1) * q / 100.0
        lo = math.floor(pos)
        spots.append((pos, lo, min(lo + 1, total - 1)))
    at = first_above(w, [i for _, lo, hi in spots for i in (lo, hi)])
    out = []
    for pos, lo, hi in spots:
        vlo = float(sorted_v[at[lo]])
        vhi = float(sorted_v[at[hi]])
        out.append(vlo + (vhi - vlo) * (pos - lo))
    return out


class ClassMetrics(BaseModel):
    """How one priority class or tenant fared."""

    num_requests: int
    num_finished: int
    num_preemptions: int
    max_preemptions_per_request: int
    num_starved: int
    recomputed_tokens: int
    reused_tokens: int
    sla_violations: int = Field(description="Requests that are not good: missed an SLO or did not finish.")
    ttft_p99_ms: float
    e2e_p99_ms: float
    token_rate: float = Field(description="Mean over finished requests of output tokens / E2E seconds.")


def class_metrics(requests: pd.DataFrame, by: str) -> dict[str, ClassMetrics]:
    """Per-class figures (keys are the class labels as strings; requests without one skipped)."""
    out: dict[str, ClassMetrics] = {}
    labels = requests[by]
    for label in sorted({x for x in labels if x is not None and x == x}, key=str):
        g = requests[labels == label]
        outcome = g["outcome"].to_numpy()
        done = (outcome == OUTCOME_FINISHED) | (outcome == OUTCOME_LENGTH_CAPPED)
        e2e_s = g["e2e_ms"].to_numpy(dtype=np.float64)[done] / 1e3
        rate = g["num_output"].to_numpy(dtype=np.float64)[done] / np.where(e2e_s > 0, e2e_s, np.nan)
        pre = g["num_preemptions"].to_numpy()
        out[str(label)] = ClassMetrics(
            num_requests=len(g),
            num_finished=int(done.sum()),
            num_preemptions=int(pre.sum()),
            max_preemptions_per_request=int(pre.max()) if len(pre) else 0,
            num_starved=int(g["starved"].sum()),
            recomputed_tokens=int(g["recomputed_tokens"].sum()),
            reused_tokens=int(g["reused_tokens"].sum()),
            sla_violations=int((~g["good"].to_numpy(dtype=bool)).sum()),
            ttft_p99_ms=LatencyStats.of(g["ttft_ms"].to_numpy(dtype=np.float64)).p99,
            e2e_p99_ms=LatencyStats.of(g["e2e_ms"].to_numpy(dtype=np.float64)).p99,
            token_rate=float(np.nanmean(rate)) if np.isfinite(rate).any() else 0.0,
        )
    return out


def jain_index(values: list[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one gets everything."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2 or not np.any(x > 0):
        return None
    return float(x.sum() ** 2 / (len(x) * np.square(x).sum()))


class OffloadSummary(BaseModel):
    """What the CPU tier did in a run (vLLM's OffloadingConnector metrics and hit split)."""

    model_config = ConfigDict(frozen=True)

    cpu_chunks: int = Field(description="CPU tier size in offload chunks.")
    blocks_per_chunk: int
    gpu_hit_rate: float | None = Field(description="GPU prefix-cache hits / prompt tokens, first admissions.")
    cpu_hit_rate: float | None = Field(
        description="CPU-tier hits / tokens asked of it beyond the GPU hit, first admissions (vLLM's "
        "connector prefix-cache stats)."
    )
    loaded_tokens: int = Field(description="Tokens loaded from the CPU tier (resumed requests included).")
    stored_tokens: int = Field(description="Tokens stored to the CPU tier.")
    recomputed_tokens: int = Field(description="Tokens computed again after a preemption.")
    load_jobs: int
    store_jobs: int
    store_failures: int = Field(description="Stores refused: every CPU chunk was in flight or being read.")
    chunks_evicted: int
    cpu_chunks_stored_at_end: int


def tokens_per_verifying_step(accepted: int, verifications: int) -> float | None:
    """Accepted tokens per step, as vLLM's spec-decode metrics define the mean acceptance length:
    tokens a verifying request emits in a step (its accepted drafts plus the bonus/target token),
    ``1 + accepted / verifications``; None when nothing was verified. The one formula the run's
    summary, its time series (views), the web and the dashboard's tile use."""
    return 1.0 + accepted / verifications if verifications > 0 else None


class LoRASummary(BaseModel):
    """What serving LoRA adapters did in a run: requests left waiting for an adapter slot
    (``max_loras``) and, timed by a GPU model, adapters brought to the GPU (``engine.adapter_cache``)."""

    model_config = ConfigDict(frozen=True)

    max_loras: int
    max_cpu_loras: int = Field(description="Adapters the host cache holds (vLLM's default: max_loras).")
    skipped_request_steps: int = Field(
        description="Times a step left a waiting request behind because its adapter would exceed max_loras."
    )
    gpu_loads: int | None = Field(
        description="Adapters copied into a GPU slot (None: not timed: fixed step time)."
    )
    disk_reads: int | None = Field(description="Of them, read from disk first (not in the host cache).")
    load_s: float | None = Field(description="Step time the copies and reads added, seconds.")


class SpeculativeSummary(BaseModel):
    """What speculative decoding did in a run (vLLM's spec-decode metrics: drafts, accepted)."""

    model_config = ConfigDict(frozen=True)

    method: str
    num_speculative_tokens: int
    verifications: int = Field(description="Request-steps that verified drafts (padding rows excluded).")
    draft_tokens: int = Field(description="Draft tokens verified.")
    accepted_tokens: int = Field(description="Of them, accepted by the target.")
    acceptance_rate: float | None = Field(description="accepted / drafted (vLLM's draft acceptance rate).")
    mean_acceptance_length: float | None = Field(
        description="Tokens emitted per verifying request-step: 1 + accepted / verifications (vLLM's)."
    )
    draft_time_s: float = Field(description="Simulated time of the drafter's passes, summed over steps.")
    draft_timing: str = Field(
        "",
        description="How the drafter's passes were timed (its roofline, or a fraction of the target's step).",
    )


#: The steps frame's per-group usage columns: ``kv_usage:<group kind>`` (``KVCacheGroup.label``).
KV_GROUP_COLUMN = "kv_usage:"


class KVGroupUsage(BaseModel):
    """How much of the shared KV block pool one kind of KV cache group held over a run (a
    hybrid model: sliding-window or chunked-local layers beside full ones). The kinds' shares
    add up to the run's KV usage."""

    model_config = ConfigDict(frozen=True)

    group: str = Field(
        description="The groups' kind: full, sliding_window(<tokens>), chunked_local(<tokens>)."
    )
    mean_usage: float = Field(
        description="Time-weighted mean of the blocks this kind's groups hold / usable KV blocks."
    )
    max_usage: float


def kv_group_usage(steps: pd.DataFrame, dur: np.ndarray, busy: float) -> list[KVGroupUsage] | None:
    """Each group kind's share of the pool from the steps frame's ``kv_usage:<kind>`` columns
    (``steps_frame_of``), weighted by step time as ``mean_kv_usage`` is; None when the steps
    have none (one block table) or not every step has them (a fleet mixing models)."""
    cols = [c for c in steps.columns if isinstance(c, str) and c.startswith(KV_GROUP_COLUMN)]
    out = []
    for col in cols:
        v = steps[col].to_numpy(dtype=np.float64)
        if np.isnan(v).any():
            return None
        out.append(
            KVGroupUsage(
                group=col.removeprefix(KV_GROUP_COLUMN),
                mean_usage=sum_of_products(v, dur) / busy if busy > 0 else 0.0,
                max_usage=float(v.max()) if len(v) else 0.0,
            )
        )
    return out or None


class SimulationSummary(BaseModel):
    """The answers of one replica simulation."""

    num_requests: int
    num_finished: int = Field(description="Finished at max_tokens or max_model_len.")
    num_length_capped: int = Field(description="Of those, stopped early by max_model_len.")
    num_rejected_prompt_too_long: int
    num_rejected_queue_timeout: int
    num_unfinished: int
    num_steps: int
    duration_s: float = Field(description="First arrival to last completion.")
    busy_s: float = Field(description="Time the engine spent in steps.")
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    itl_ms: LatencyStats
    e2e_ms: LatencyStats
    queue_ms: LatencyStats
    request_throughput: float = Field(description="Finished requests per second.")
    output_token_throughput: float
    total_token_throughput: float
    slo: SLO | None
    num_good: int = Field(description="Finished requests meeting every SLO.")
    goodput: float = Field(description="Good requests per second.")
    num_preemptions: int
    num_preempted_requests: int
    max_preemptions_per_request: int
    num_starved: int = Field(description="Requests flagged STARVED (preempted starvation_threshold times).")
    recomputed_tokens: int
    reused_tokens: int
    by_priority: dict[str, ClassMetrics]
    by_tenant: dict[str, ClassMetrics]
    fairness_priority: float | None = Field(description="Jain's index of token_rate over priority classes.")
    fairness_tenant: float | None = Field(description="Jain's index of token_rate over tenants.")
    prefix_cache_hit_rate: float | None = Field(description="vLLM's: hits/queries at first admission.")
    mean_batch_tokens: float
    mean_running: float = Field(description="Time-weighted mean of running requests.")
    max_running: int
    mean_waiting: float
    max_waiting: int
    mean_kv_usage: float = Field(description="Time-weighted mean of used / usable KV blocks.")
    max_kv_usage: float
    kv_usage_by_group: list[KVGroupUsage] | None = Field(
        None,
        description="A hybrid model's KV usage split by KV cache group kind (sliding window, chunked "
        "local, full); left out for a model with one block table.",
    )
    max_model_len: int
    offload: OffloadSummary | None = Field(
        None, description="The CPU offload tier's figures (``--kv-offloading-size``); None without one."
    )
    speculative: SpeculativeSummary | None = Field(
        None, description="Speculative decoding's figures (``--speculative-config``); left out when off."
    )
    admission: AdmissionSummary | None = Field(
        None, description="HTTP 503s of max_num_queued_reqs/tokens; left out when neither is set."
    )
    lora: LoRASummary | None = Field(
        None, description="LoRA adapters' figures (``--enable-lora``); left out when off."
    )

    @model_serializer(mode="wrap")
    def _drop_spec_when_off(self, handler: Any) -> Any:
        """Runs without speculation, admission limits, LoRA or KV cache groups keep their
        documents byte for byte (no ``speculative`` / ``admission`` / ``lora`` /
        ``kv_usage_by_group`` key)."""
        d = handler(self)
        for key in ("speculative", "admission", "lora", "kv_usage_by_group"):
            if isinstance(d, dict) and key in d and d[key] is None:
                del d[key]
        return d


REQUEST_COLUMNS = (
    "req_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "prompt_len",
    "output_len",
    "num_output",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
    "num_preemptions",
    "recomputed_tokens",
    "reused_tokens",
    "prefix_hit_tokens",
    "outcome",
    "good",
    "priority",
    "tenant",
    "starved",
)


class RequestResult(BaseModel):
    """One request's record (a row of ``SimulationResult.requests``)."""

    req_id: str
    arrival_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finish_s: float | None
    prompt_len: int
    output_len: int
    num_output: int
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    queue_ms: float | None
    num_preemptions: int
    recomputed_tokens: int
    reused_tokens: int
    prefix_hit_tokens: int
    outcome: str
    good: bool
    priority: int
    tenant: str | None
    starved: bool


_REQUEST_LIST: TypeAdapter[list[RequestResult]] = TypeAdapter(list[RequestResult])


class SimulationReport(BaseModel):
    """The JSON document ``servesim simulate --json`` prints."""

    config: EngineConfig
    step_time_model: dict[str, Any]
    summary: SimulationSummary
    requests: list[RequestResult] | None = None
    trace_provenance: TraceProvenance | None = Field(
        None, description="Where the trace came from and every row dropped while reading it."
    )


class SimulationResult:
    """Everything a simulation produced. ``requests``, ``steps``, ``preemptions`` and ``starvation``
    are DataFrames; ``summary`` is the validated answer."""

    def __init__(
        self,
        config: EngineConfig,
        step_time_model: dict[str, Any],
        summary: SimulationSummary,
        requests: pd.DataFrame,
        steps: pd.DataFrame,
        preemptions: pd.DataFrame,
        starvation: pd.DataFrame,
        token_steps: dict[str, list[int]] | None = None,
        itl: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.config = config
        self.step_time_model = step_time_model
        self.summary = summary
        self.requests = requests
        self.steps = steps
        self.preemptions = preemptions
        self.starvation = starvation  # STARVED events: when, which request, priority, context
        self._token_steps = token_steps
        # Pooled ITL samples: how many gaps each step's duration stands for, and the explicit
        # gaps in seconds (see ``summarize``); the views draw the ITL histogram from them.
        self.itl = itl

    @property
    def offload(self) -> OffloadSummary | None:
        """The CPU tier's figures (``summary.offload``; None when the run had no CPU tier)."""
        return self.summary.offload

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"SimulationResult({s.num_requests} requests, {s.num_steps} steps, "
            f"TTFT p99 {s.ttft_ms.p99:.1f} ms, TPOT p99 {s.tpot_ms.p99:.1f} ms)"
        )

    def to_pandas(self) -> pd.DataFrame:
        """Per-request records, one row per trace request."""
        return self.requests

    def token_times(self, req_id: str) -> list[float]:
        """Every output token's time of one request (needs ``record_token_times=True``)."""
        if self._token_steps is None:
            raise InputError("token times were not recorded: simulate with record_token_times=True")
        seg = self._token_steps.get(req_id, [])
        ends = (self.steps["start_s"] + self.steps["duration_s"]).to_numpy()
        out: list[float] = []
        for j in range(0, len(seg), 2):
            out.extend(float(x) for x in ends[seg[j] : seg[j] + seg[j + 1]])
        return out

    def request_rows(self) -> list[dict[str, Any]]:
        """The per-request records as JSON-ready dicts (``RequestResult``'s fields; NaN -> None).

        All at once: a large run's writers stream them instead (``servesim.engine.records``)."""
        from servesim.engine.records import REQUEST_FIELDS, rows_of

        return rows_of(self.requests, REQUEST_FIELDS)

    def report(self, include_requests: bool = False) -> SimulationReport:
        rows = _REQUEST_LIST.validate_python(self.request_rows()) if include_requests else None
        return SimulationReport(
            config=self.config, step_time_model=self.step_time_model, summary=self.summary, requests=rows
        )


def good_mask(
    requests: pd.DataFrame, slo: SLO | None, sla_ttft_ms: np.ndarray, sla_e2e_ms: np.ndarray
) -> np.ndarray:
    """Which requests finished and meet every objective that applies to them."""
    outcome = requests["outcome"].to_numpy()
    ok = (outcome == OUTCOME_FINISHED) | (outcome == OUTCOME_LENGTH_CAPPED)
    ttft = requests["ttft_ms"].to_numpy(dtype=np.float64)
    e2e = requests["e2e_ms"].to_numpy(dtype=np.float64)
    tpot = np.nan_to_num(requests["tpot_ms"].to_numpy(dtype=np.float64), nan=0.0)
    if slo is not None:
        if slo.ttft_ms is not None:
            ok &= ttft <= slo.ttft_ms
        if slo.tpot_ms is not None:
            ok &= tpot <= slo.tpot_ms
        if slo.e2e_ms is not None:
            ok &= e2e <= slo.e2e_ms
    ok &= np.isnan(sla_ttft_ms) | (ttft <= sla_ttft_ms)
    ok &= np.isnan(sla_e2e_ms) | (e2e <= sla_e2e_ms)
    return np.asarray(ok, dtype=bool)


def itl_stats(step_durations_s: np.ndarray, step_weights: np.ndarray, gaps_s: np.ndarray) -> LatencyStats:
    """Pooled ITL in ms: each step's duration counted as many times as the gaps it stands for,
    plus the explicit gaps. Equal to ``LatencyStats.of`` of the concatenated sample, without
    building the unfiltered concatenation (millions of steps)."""
    values, weights = pooled_sample(step_durations_s, step_weights, gaps_s)
    return LatencyStats.of_positive_weights(values, weights)


def per_second(count: float, duration_s: float) -> float:
    """A count over the run's duration (first arrival to last completion): every rate of the
    summary, goodput included; 0 for a run that took no time."""
    return count / duration_s if duration_s > 0 else 0.0


def rescore(
    summary: SimulationSummary,
    requests: pd.DataFrame,
    slo: SLO | None,
    sla_ttft_ms: np.ndarray,
    sla_e2e_ms: np.ndarray,
) -> SimulationSummary:
    """The same run judged against another SLO, from its per-request records alone (no engine
    run): which requests are good (``good_mask``, as the simulation decides it), how many, the
    goodput (``per_second`` over the run's duration) and each class's SLA violations. Every other
    figure (latencies, throughput, the caps' percentiles) is the run's and does not move.
    ``sla_*_ms``: the trace's per-request SLAs (NaN where none), as ``simulate`` reads them."""
    good = good_mask(requests, slo, sla_ttft_ms, sla_e2e_ms)
    scored = requests.assign(good=good)
    n_good = int(good.sum())
    return summary.model_copy(
        update={
            "slo": slo,
            "num_good": n_good,
            "goodput": per_second(n_good, summary.duration_s),
            "by_priority": class_metrics(scored, "priority"),
            "by_tenant": class_metrics(scored, "tenant"),
        }
    )


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    itl_step_weights: np.ndarray,
    itl_gaps_s: np.ndarray,
    slo: SLO | None,
    prefix_queries: int,
    prefix_hits: int,
    prefix_caching: bool,
    max_model_len: int,
    itl_ms: LatencyStats | None = None,
) -> SimulationSummary:
    """The summary of a run (``itl_ms``: the pooled ITL figures when already computed, by
    ``itl_stats`` on the same steps, before the request records took their memory)."""
    outcome = requests["outcome"].to_numpy()
    finished = (outcome == OUTCOME_FINISHED) | (outcome == OUTCOME_LENGTH_CAPPED)
    n_fin = int(finished.sum())
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    finish = requests["finish_s"].to_numpy(dtype=np.float64)
    duration = float(np.nanmax(finish[finished]) - arrival.min()) if n_fin else 0.0
    out_tokens = int(requests["num_output"].to_numpy()[finished].sum())
    in_tokens = int(requests["prompt_len"].to_numpy()[finished].sum())
    good = requests["good"].to_numpy(dtype=bool)
    dur = steps["duration_s"].to_numpy(dtype=np.float64)
    busy = float(dur.sum())

    def tw_mean(col: str) -> float:
        if busy <= 0:
            return 0.0
        # The int32 counts as they are: the products are taken in float64 (the same values as
        # of a float copy), without a float copy of every step.
        return sum_of_products(steps[col].to_numpy(), dur) / busy

    preempt = requests["num_preemptions"].to_numpy()
    by_priority = class_metrics(requests, "priority")
    by_tenant = class_metrics(requests, "tenant")
    kv_usage = steps["kv_usage"].to_numpy(dtype=np.float64)

    def rate(x: float) -> float:
        return per_second(x, duration)

    return SimulationSummary(
        num_requests=len(requests),
        num_finished=n_fin,
        num_length_capped=int((outcome == OUTCOME_LENGTH_CAPPED).sum()),
        num_rejected_prompt_too_long=int((outcome == OUTCOME_REJECTED_TOO_LONG).sum()),
        num_rejected_queue_timeout=int((outcome == OUTCOME_REJECTED_TIMEOUT).sum()),
        num_unfinished=int((outcome == OUTCOME_UNFINISHED).sum()),
        num_steps=len(steps),
        duration_s=duration,
        busy_s=busy,
        ttft_ms=LatencyStats.of(requests["ttft_ms"].to_numpy(dtype=np.float64)),
        tpot_ms=LatencyStats.of(requests["tpot_ms"].to_numpy(dtype=np.float64)),
        itl_ms=itl_ms if itl_ms is not None else itl_stats(dur, itl_step_weights, itl_gaps_s),
        e2e_ms=LatencyStats.of(requests["e2e_ms"].to_numpy(dtype=np.float64)),
        queue_ms=LatencyStats.of(requests["queue_ms"].to_numpy(dtype=np.float64)),
        request_throughput=rate(n_fin),
        output_token_throughput=rate(out_tokens),
        total_token_throughput=rate(in_tokens + out_tokens),
        slo=slo,
        num_good=int(good.sum()),
        goodput=rate(int(good.sum())),
        num_preemptions=int(preempt.sum()),
        num_preempted_requests=int((preempt > 0).sum()),
        max_preemptions_per_request=int(preempt.max()) if len(preempt) else 0,
        num_starved=int(requests["starved"].sum()),
        recomputed_tokens=int(requests["recomputed_tokens"].sum()),
        reused_tokens=int(requests["reused_tokens"].sum()),
        by_priority=by_priority,
        by_tenant=by_tenant,
        fairness_priority=jain_index([c.token_rate for c in by_priority.values()]),
        fairness_tenant=jain_index([c.token_rate for c in by_tenant.values()]),
        prefix_cache_hit_rate=(prefix_hits / prefix_queries if prefix_queries else 0.0)
        if prefix_caching
        else None,
        mean_batch_tokens=float(steps["num_tokens"].mean()) if len(steps) else 0.0,
        mean_running=tw_mean("num_running"),
        max_running=int(steps["num_running"].max()) if len(steps) else 0,
        mean_waiting=tw_mean("num_waiting"),
        max_waiting=int(steps["num_waiting"].max()) if len(steps) else 0,
        mean_kv_usage=sum_of_products(kv_usage, dur) / busy if busy > 0 else 0.0,
        max_kv_usage=float(kv_usage.max()) if len(kv_usage) else 0.0,
        kv_usage_by_group=kv_group_usage(steps, dur, busy),
        max_model_len=max_model_len,
    )


__all__ = [
    "KV_GROUP_COLUMN",
    "REQUEST_COLUMNS",
    "SLO",
    "KVGroupUsage",
    "LatencyStats",
    "LoRASummary",
    "RequestResult",
    "SimulationReport",
    "SimulationResult",
    "SimulationSummary",
    "good_mask",
    "itl_stats",
    "kv_group_usage",
    "per_second",
    "rescore",
    "summarize",
]
