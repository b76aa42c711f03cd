"""A guidellm benchmarks report (``guidellm run --output kind=json``) as calibration cases: each
benchmark of the report re-created as the ``vllm bench serve`` summary it would have been, then
re-simulated and fitted exactly as a bench result (``servesim.perf.bench_io.bench_case``).

Why: guidellm is the other common client for measuring a vLLM deployment, and its report already
holds what the fit needs. Per benchmark (``benchmarks[i]``, report schema version 2, guidellm
0.8): the scheduling strategy it ran (``config.strategy``: ``synchronous``, ``concurrent`` with
``streams``, ``throughput``, ``constant`` or ``poisson`` with ``rate``; a sweep is these in
sequence), the request counts (``metrics.request_totals``), each successful request's prompt and
output tokens (``requests.successful[*]``) and the client-measured means over successful requests
of TTFT (``metrics.time_to_first_token_ms``), inter-token latency (``inter_token_latency_ms``:
guidellm weights it by tokens, so it is vllm bench's pooled ITL) and request latency
(``request_latency``, seconds). guidellm's own "TPOT" divides the whole latency, TTFT included, by
the output tokens; vllm bench's TPOT is the per-request mean of guidellm's per-request ITL, taken
from ``requests.successful`` when the report lists every successful request.

Mapping of the arrival process: synchronous is one request at a time (concurrency 1, all queued
at t=0); concurrent is ``streams`` at a time; throughput sends everything at once (up to the
strategy's ``max_concurrency``); constant sends every ``1/rate`` s from t=0; poisson draws
exponential gaps of mean ``1/rate`` (seeded: the report keeps no send times). Only successful
requests are re-created (they alone have lengths); a rate ramp-up is not modelled.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.perf.bench_io import BenchServeResult, bench_case
from servesim.perf.errors import BenchResultError, CalibrationError
from servesim.perf.workload_case import WorkloadCase

#: Gamma shape standing in for guidellm's evenly spaced ``constant`` sends (gaps jitter 0.1 %).
CONSTANT_BURSTINESS = 1e6
_Ms = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: Keys by which a JSON object is a ``vllm bench serve`` result rather than a guidellm report.
VLLM_BENCH_KEYS = ("completed", "num_prompts", "request_rate", "mean_ttft_ms", "input_lens")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Mean(_Loose):
    mean: _Ms
    count: int = Field(ge=0)


class _OverStatus(_Loose):
    successful: _Mean


class _Totals(_Loose):
    successful: int = Field(ge=0)
    errored: int = Field(0, ge=0)
    incomplete: int = Field(0, ge=0)


class _Metrics(_Loose):
    request_totals: _Totals
    time_to_first_token_ms: _OverStatus
    inter_token_latency_ms: _OverStatus
    request_latency: _OverStatus
    prompt_token_count: _OverStatus
    output_token_count: _OverStatus


class _Strategy(_Loose):
    type_: Literal["synchronous", "concurrent", "throughput", "constant", "poisson"]
    rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    streams: int | None = Field(None, ge=1)
    max_concurrency: int | None = Field(None, ge=1)


class _Config(_Loose):
    strategy: _Strategy


class _Request(_Loose):
    prompt_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    inter_token_latency_ms: _Ms | None = None


class _Requests(_Loose):
    successful: list[_Request] = Field(default_factory=list)


class GuidellmBenchmark(_Loose):
    """One benchmark of a guidellm report: the fields the calibration reads."""

    config: _Config
    metrics: _Metrics
    requests: _Requests = Field(default_factory=_Requests)
    duration: _Ms | None = None

    @property
    def strategy(self) -> str:
        """guidellm's name of the run (``constant@4.00``, ``concurrent@8``, ``synchronous``)."""
        s = self.config.strategy
        if s.type_ in ("constant", "poisson"):
            return f"{s.type_}@{s.rate:.2f}"
        return f"concurrent@{s.streams}" if s.type_ == "concurrent" else s.type_


class GuidellmReport(_Loose):
    """A guidellm benchmarks report (``GenerativeBenchmarksReport``), only what is read."""

    benchmarks: list[GuidellmBenchmark] = Field(min_length=1)


def json_kind(path: Path) -> Literal["vllm", "guidellm", "inference-perf"]:
    """Whether a ``.json`` measurement is a guidellm report, an inference-perf stage report or a
    ``vllm bench serve`` result, by its content (all are ``.json``); none of them is a one-line
    error naming the file."""
    from servesim.perf.inference_perf_io import is_inference_perf

    data = _load(path)
    if isinstance(data, dict) and "benchmarks" in data:
        return "guidellm"
    if is_inference_perf(data):
        return "inference-perf"
    if isinstance(data, dict) and any(k in data for k in VLLM_BENCH_KEYS):
        return "vllm"
    raise CalibrationError(
        f"{path}: neither a guidellm benchmarks report (no 'benchmarks' list), an inference-perf "
        f"stage report (no 'load_summary' and 'successes') nor a vllm bench serve result (none of "
        f"{', '.join(VLLM_BENCH_KEYS)})"
    )


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{path}: cannot read benchmark result: {e}") from e


def parse_guidellm_report(data: Any, source: str) -> GuidellmReport:
    """Validate a guidellm report; the first problem is named by its JSON path."""
    try:
        report = GuidellmReport.model_validate(data)
    except ValidationError as e:
        errors: list[dict[str, str | None]] = [
            {"field": ".".join(str(x) for x in err["loc"]) or None, "reason": str(err["msg"])}
            for err in e.errors()
        ][:50]
        shown = "; ".join(f"{x['field'] or 'file'}: {x['reason']}" for x in errors[:3])
        raise BenchResultError(f"{source}: not a usable guidellm report: {shown}", errors) from None
    for i, b in enumerate(report.benchmarks):
        if b.metrics.request_totals.successful == 0 or b.metrics.time_to_first_token_ms.successful.count == 0:
            field = f"benchmarks.{i}.metrics.request_totals.successful"
            raise BenchResultError(
                f"{source}: {field}: benchmark {i} ({b.strategy}) has no successful request to fit",
                [{"field": field, "reason": "0 successful requests"}],
            )
        s = b.config.strategy
        if s.type_ in ("constant", "poisson") and s.rate is None:
            field = f"benchmarks.{i}.config.strategy.rate"
            raise BenchResultError(
                f"{source}: {field}: a {s.type_} benchmark needs its rate",
                [{"field": field, "reason": "missing"}],
            )
    return report


def guidellm_summary(b: GuidellmBenchmark) -> BenchServeResult:
    """The ``vllm bench serve`` summary a guidellm benchmark amounts to (see the module doc)."""
    m, s = b.metrics, b.config.strategy
    done = m.request_totals.successful
    listed = b.requests.successful if len(b.requests.successful) == done else []
    rate: float | str = "inf"
    burstiness, limit = 1.0, s.max_concurrency
    if s.type_ == "synchronous":
        limit = 1
    elif s.type_ == "concurrent":
        limit = s.streams or s.max_concurrency
    elif s.type_ in ("constant", "poisson") and s.rate is not None:
        rate = s.rate
        burstiness = CONSTANT_BURSTINESS if s.type_ == "constant" else 1.0
    fields: dict[str, Any] = {
        "num_prompts": done,
        "completed": done,
        "failed": m.request_totals.errored,
        "duration": b.duration,
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": limit,
        "total_input_tokens": round(m.prompt_token_count.successful.mean * done),
        "total_output_tokens": round(m.output_token_count.successful.mean * done),
        "mean_ttft_ms": m.time_to_first_token_ms.successful.mean,
        "mean_itl_ms": m.inter_token_latency_ms.successful.mean,
        "mean_e2el_ms": m.request_latency.successful.mean * 1e3,
    }
    if listed:
        fields["input_lens"] = [r.prompt_tokens for r in listed]
        fields["output_lens"] = [r.output_tokens for r in listed]
        itl = [r.inter_token_latency_ms for r in listed if r.output_tokens > 1]
        if itl and all(x is not None for x in itl):
            fields["mean_tpot_ms"] = math.fsum(x for x in itl if x is not None) / len(itl)
    return BenchServeResult.model_validate(fields)


def read_guidellm_report(path: str | Path, **settings: Any) -> list[WorkloadCase]:
    """One ``WorkloadCase`` per benchmark of a guidellm report (``settings``: ``bench_case``'s
    model, GPU and server settings). guidellm does not stretch its sends to end at ``n / rate``
    as vllm bench does, so the arrivals are not rescaled."""
    p = Path(path)
    report = parse_guidellm_report(_load(p), str(p))
    return [
        bench_case(
            guidellm_summary(b),
            f"{p}#{i}",
            f"{p.stem}-{i}-{b.strategy}",
            rescale_arrivals=False,
            label=f"guidellm {p.name} {b.strategy}",
            **settings,
        )
        for i, b in enumerate(report.benchmarks)
    ]
