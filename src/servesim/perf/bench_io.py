"""``vllm bench serve --save-result`` JSON as a calibration case: the benchmark's workload
re-created (its send times seeded as vllm bench draws them) with its mean latencies as targets.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servesim.engine import EngineConfig
from servesim.errors import InputError
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, resolve_gpu, resolve_model
from servesim.perf.errors import BenchResultError, CalibrationError, PerfError
from servesim.perf.memory import kv_capacity
from servesim.perf.replay import RequestSet
from servesim.perf.workload_case import WorkloadCase

BENCH_TARGETS = {
    "mean_ttft_ms": "ttft_mean",
    "mean_tpot_ms": "tpot_mean",
    "mean_itl_ms": "itl_pooled_mean",
    "mean_e2el_ms": "e2e_mean",
}


def bench_arrivals(n: int, rate: float, burstiness: float, seed: int, rescale: bool = True) -> np.ndarray:
    """``vllm bench serve`` send times: gamma gaps (shape ``burstiness``, mean ``1/rate``) from t=0;
    with ``rescale`` the last request is sent at exactly ``n / rate`` (vLLM >= 0.3x behaviour).
    ``rate`` inf sends everything at t=0."""
    if n <= 0:
        return np.zeros(0)
    if not math.isfinite(rate):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    t = np.cumsum(gaps)
    if rescale and t[-1] > 0:
        t *= (n / rate) / t[-1]
    return t


#: The latency metrics ``vllm bench serve`` reports (``mean_<m>_ms``, ``median_<m>_ms``,
#: ``std_<m>_ms``, ``p<P>_<m>_ms``), with servesim's name of each.
BENCH_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
_STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]


_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors")


def _problems(fields: dict[str, Any], lists: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for each reported statistic that is not a finite, non-negative number of ms,
    and for per-request lists of different lengths."""
    out: list[tuple[str, str]] = []
    for name, value in fields.items():
        if _STAT.match(name) and value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                out.append((name, f"{str(value)[:40]!r} is not a finite number of milliseconds"))
            elif value < 0:
                out.append((name, f"{value} ms is negative"))
    sizes = {k: len(v) for k, v in lists.items() if isinstance(v, list)}
    if len(set(sizes.values())) > 1:
        common = max(set(sizes.values()), key=list(sizes.values()).count)
        for k, n in sizes.items():
            if n != common:
                out.append((k, f"{n} entries; the other per-request lists have {common}"))
    return out


class BenchServeResult(BaseModel):
    """A ``vllm bench serve --save-result`` JSON file (field names as vllm/benchmarks/serve.py writes
    them); ``--save-detailed`` adds the per-request lists (seconds). Other fields are kept, unread."""

    model_config = ConfigDict(extra="allow")

    model_id: str | None = None
    num_prompts: int | None = Field(None, ge=0)
    completed: int | None = Field(None, ge=0)
    failed: int | None = Field(None, ge=0)
    duration: _NonNeg | None = None
    request_rate: float | str | None = "inf"
    burstiness: float | None = Field(None, gt=0, allow_inf_nan=False)
    max_concurrency: int | None = Field(None, ge=1)
    total_input_tokens: int | None = Field(None, ge=0)
    total_output_tokens: int | None = Field(None, ge=0)
    request_throughput: _NonNeg | None = None
    output_throughput: _NonNeg | None = None
    total_token_throughput: _NonNeg | None = None
    input_lens: list[Annotated[int, Field(ge=0)]] | None = None
    output_lens: list[Annotated[int, Field(ge=0)]] | None = None
    ttfts: list[_NonNeg] | None = None
    itls: list[list[_NonNeg]] | None = None
    latencies: list[_NonNeg] | None = None
    errors: list[str | None] | None = None

    @field_validator("request_rate")
    @classmethod
    def _rate(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, str) and v.lower() not in ("inf", "infinity", "none"):
            try:
                float(v)
            except ValueError:
                raise InputError(f"{v[:40]!r} is neither a rate (req/s) nor inf") from None
        if isinstance(v, float) and (v <= 0 or math.isnan(v)):
            raise InputError("a rate is positive")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> BenchServeResult:
        problems = _problems(self.model_extra or {}, self.model_dump(include=set(_LISTS)))
        if problems:
            field, reason = problems[0]
            raise InputError(f"{field}: {reason}")
        return self

    @property
    def rate(self) -> float:
        r = self.request_rate
        return math.inf if r is None or str(r).lower() in ("inf", "infinity", "none") else float(r)

    def stats(self) -> dict[str, dict[str, float]]:
        """``{metric: {stat: ms}}`` of the reported statistics (stat: mean, median, std, p99, ...)."""
        out: dict[str, dict[str, float]] = {}
        for name, value in (self.model_extra or {}).items():
            m = _STAT.match(name)
            if m and isinstance(value, int | float):
                out.setdefault(BENCH_METRICS[m.group(2)], {})[m.group(1)] = float(value)
        return out

    @property
    def detailed(self) -> bool:
        return bool(self.ttfts) and bool(self.output_lens)


def parse_bench_result(data: Any, source: str) -> BenchServeResult:
    """Validate a ``vllm bench serve`` result; every problem is named by its field."""
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise BenchResultError(
            f"{source}: a vllm bench serve result is a JSON object, not a {kind}",
            [{"field": None, "reason": f"the file holds a {kind}"}],
        )
    errors: list[dict[str, str | None]] = [
        {"field": f, "reason": r} for f, r in _problems(data, {k: data.get(k) for k in _LISTS})
    ]
    if not errors:
        try:
            return BenchServeResult.model_validate(data)
        except ValidationError as e:
            errors = [
                {
                    "field": ".".join(str(x) for x in err["loc"][:1]) or None,
                    "reason": str(err["msg"]).removeprefix("Value error, "),
                }
                for err in e.errors()
            ][:50]
    shown = "; ".join(f"{x['field'] or 'file'}: {x['reason']}" for x in errors[:5])
    raise BenchResultError(f"{source}: not a usable vllm bench serve result: {shown}", errors)


def bench_targets(result: BenchServeResult) -> dict[str, float]:
    """The mean latencies the calibration fits (``BENCH_TARGETS``)."""
    extra = result.model_extra or {}
    return {
        ours: float(extra[theirs])
        for theirs, ours in BENCH_TARGETS.items()
        if isinstance(extra.get(theirs), int | float) and float(extra[theirs]) > 0
    }


def bench_requests(
    result: BenchServeResult,
    source: str,
    *,
    seed: int = 0,
    rescale_arrivals: bool = True,
    label: str | None = None,
    server_side: bool = False,
) -> RequestSet:
    """The benchmark's workload re-created (see ``read_bench_result``); ``server_side``: its
    latencies were measured by the server (a scrape), not by a client."""
    n = int(result.num_prompts or result.completed or 0)
    if n <= 0:
        raise BenchResultError(
            f"{source}: no num_prompts / completed count",
            [{"field": "num_prompts", "reason": "missing or 0: how many requests the benchmark sent"}],
        )
    ins, outs = result.input_lens, result.output_lens
    if ins and outs:
        prompt = np.maximum(np.asarray(ins, dtype=np.int64), 1)
        output = np.maximum(np.asarray(outs, dtype=np.int64), 1)
        n = len(prompt)
    else:
        done = int(result.completed or n)
        tin, tout = result.total_input_tokens, result.total_output_tokens
        if not tin or not tout or done <= 0:
            raise BenchResultError(
                f"{source}: needs input_lens/output_lens (--save-detailed) or "
                "total_input_tokens/total_output_tokens",
                [{"field": "total_input_tokens", "reason": "missing: the workload's lengths are unknown"}],
            )
        prompt = np.full(n, max(1, round(float(tin) / done)), dtype=np.int64)
        output = np.full(n, max(1, round(float(tout) / done)), dtype=np.int64)
    return RequestSet(
        scheduled=bench_arrivals(n, result.rate, float(result.burstiness or 1.0), seed, rescale_arrivals),
        prompt_len=prompt,
        output_len=output,
        prefix_group=[None] * n,
        prefix_len=np.zeros(n, dtype=np.int64),
        max_concurrency=result.max_concurrency,
        label=label or f"vllm bench {source}",
        server_side=server_side,
    )


def bench_samples(result: BenchServeResult) -> dict[str, np.ndarray]:
    """The measured per-request latencies in ms (``--save-detailed`` files; empty otherwise), over the
    successful requests: TTFT, TPOT ((latency - ttft) / (output - 1), as vllm bench computes it),
    E2E (``latencies``) and ITL (every gap of ``itls``, pooled)."""
    if not result.detailed:
        return {}
    ttft = np.asarray(result.ttfts, dtype=np.float64)
    outs = np.asarray(result.output_lens, dtype=np.float64)
    ok = outs > 0
    if result.errors is not None:
        ok &= np.array([not e for e in result.errors], dtype=bool)
    out: dict[str, np.ndarray] = {"ttft_ms": ttft[ok] * 1e3}
    if result.latencies:
        lat = np.asarray(result.latencies, dtype=np.float64)
        out["e2e_ms"] = lat[ok] * 1e3
        multi = ok & (outs > 1)
        out["tpot_ms"] = (lat[multi] - ttft[multi]) / (outs[multi] - 1) * 1e3
    if result.itls:
        gaps = [g for i, row in enumerate(result.itls) if ok[i] for g in row]
        out["itl_ms"] = np.asarray(gaps, dtype=np.float64) * 1e3
    return out


def read_bench_result(
    path: str | Path,
    *,
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    num_gpu_blocks: int | None = None,
    gpu_memory_utilization: float = 0.9,
    seed: int = 0,
    rescale_arrivals: bool = True,
    catalog: Catalog | None = None,
) -> WorkloadCase:
    """A ``WorkloadCase`` from a ``vllm bench serve --save-result`` JSON file.

    The workload is re-created from the file: ``num_prompts`` requests (``completed`` if the
    count of prompts is missing), arrivals from ``request_rate``/``burstiness`` (seeded; the
    file does not record send times), ``max_concurrency`` as a client-side limit, per-request
    ``input_lens``/``output_lens`` when the file has them (``--save-detailed``) or else the mean
    lengths from ``total_input_tokens``/``total_output_tokens``. No prefix sharing (vllm bench's
    random dataset). Targets are the file's mean TTFT, TPOT, ITL and E2E latency.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{p}: cannot read benchmark result: {e}") from e
    return bench_case(
        parse_bench_result(data, str(p)),
        str(p),
        p.stem,
        model=model,
        gpu=gpu,
        tp=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        num_gpu_blocks=num_gpu_blocks,
        gpu_memory_utilization=gpu_memory_utilization,
        seed=seed,
        rescale_arrivals=rescale_arrivals,
        catalog=catalog,
        label=f"vllm bench {p.name}",
    )


def bench_case(
    result: BenchServeResult,
    source: str,
    name: str,
    *,
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    num_gpu_blocks: int | None = None,
    gpu_memory_utilization: float = 0.9,
    seed: int = 0,
    rescale_arrivals: bool = True,
    catalog: Catalog | None = None,
    label: str | None = None,
    server_side: bool = False,
) -> WorkloadCase:
    """A ``WorkloadCase`` from a validated benchmark summary (``read_bench_result``; a Prometheus
    scrape of vLLM's ``/metrics`` reduced to one, ``servesim.perf.prometheus_io``, with
    ``server_side``: its latencies exclude the front end)."""
    cat = catalog or load_catalog()
    ms = resolve_model(model, cat)
    gs = resolve_gpu(gpu, cat)
    rs = bench_requests(
        result, source, seed=seed, rescale_arrivals=rescale_arrivals, label=label, server_side=server_side
    )
    targets = bench_targets(result)
    if not targets:
        raise CalibrationError(f"{source}: no latency means ({', '.join(BENCH_TARGETS)}) to fit")
    prompt, output, n = rs.prompt_len, rs.output_len, len(rs)
    rate, burst, conc = result.rate, result.burstiness or 1.0, result.max_concurrency
    longest = int(prompt.max() + output.max() + 1)
    if num_gpu_blocks is None:
        num_gpu_blocks = kv_capacity(
            ms,
            gs,
            tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=longest,
        ).num_gpu_blocks
    try:
        config = EngineConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_gpu_blocks=num_gpu_blocks,
        )
    except ValueError as e:
        raise PerfError(f"{source}: engine settings: {e}") from e
    return WorkloadCase(
        name=name,
        requests=rs,
        config=config,
        model=ms,
        gpu=gs,
        tp=tp,
        targets=targets,
        info={"request_rate": rate, "burstiness": burst, "max_concurrency": conc, "num_prompts": n},
    )
