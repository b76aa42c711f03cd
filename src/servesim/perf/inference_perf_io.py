"""An inference-perf stage report (``stage_<N>_lifecycle_metrics.json``) as a calibration case:
re-created as the ``vllm bench serve`` summary it amounts to and fitted as one
(``servesim.perf.bench_io.bench_case``).

Why: inference-perf (the Kubernetes serving benchmark) writes one such file per load stage, and
it holds what the fit needs: ``load_summary`` (``count`` requests sent, ``requested_rate``, and
``concurrency`` for a concurrency stage), ``successes`` (``count``; ``latency`` means in seconds
of ``time_to_first_token``, ``time_per_output_token``, ``inter_token_latency`` (every gap
pooled) and ``request_latency``; ``prompt_tokens`` and ``output_tokens``, the server-reported
usage) and ``failures.count`` (inference-perf 0.7 ``summarize_requests``).

What the file cannot say is assumed and stated: inference-perf's default ``constant`` load type
sends exponential gaps rescaled to the stage's duration, i.e. vllm bench's burstiness 1 with the
last request at ``count / rate`` (seeded: no send times are kept; its ``poisson`` type is the
same process); every request at the mean prompt and output length (the stage file keeps no
per-request lengths). When the client's token count disagreed with the server's
(``successes.token_count_mismatches``: its tokenizer is not the model's), inference-perf spread
the streamed chunks over the client's tokens, so its TPOT and ITL are per client token: they are
not fitted, only TTFT and E2E.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.perf.bench_io import BenchServeResult, bench_case
from servesim.perf.errors import BenchResultError, CalibrationError
from servesim.perf.workload_case import WorkloadCase

_S = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Mean(_Loose):
    mean: _S


class _Latency(_Loose):
    request_latency: _Mean
    time_to_first_token: _Mean
    time_per_output_token: _Mean | None = None
    inter_token_latency: _Mean | None = None


class _Successes(_Loose):
    count: int = Field(ge=1)
    latency: _Latency
    prompt_tokens: _Mean
    output_tokens: _Mean
    token_count_mismatches: int = Field(0, ge=0)


class _Load(_Loose):
    count: int = Field(ge=1)
    requested_rate: float = Field(gt=0, allow_inf_nan=False)
    concurrency: int | None = Field(None, ge=1)


class _Failures(_Loose):
    count: int = Field(0, ge=0)


class InferencePerfStage(_Loose):
    """One inference-perf stage report: the fields the calibration reads."""

    load_summary: _Load
    successes: _Successes
    failures: _Failures = Field(default_factory=_Failures)


def is_inference_perf(data: Any) -> bool:
    """An inference-perf lifecycle report by content (a JSON object with both sections)."""
    return isinstance(data, dict) and "load_summary" in data and "successes" in data


def parse_stage(data: Any, source: str) -> InferencePerfStage:
    """Validate a stage report; the first problem is named by its JSON path."""
    try:
        return InferencePerfStage.model_validate(data)
    except ValidationError as e:
        errors: list[dict[str, str | None]] = [
            {"field": ".".join(str(x) for x in err["loc"]) or None, "reason": str(err["msg"])}
            for err in e.errors()
        ][:50]
        shown = "; ".join(f"{x['field'] or 'file'}: {x['reason']}" for x in errors[:3])
        raise BenchResultError(
            f"{source}: not a usable inference-perf stage report: {shown}", errors
        ) from None


def stage_summary(stage: InferencePerfStage) -> BenchServeResult:
    """The ``vllm bench serve`` summary a stage amounts to (see the module doc)."""
    ok, lat = stage.successes, stage.successes.latency
    fields: dict[str, Any] = {
        "num_prompts": stage.load_summary.count,
        "completed": ok.count,
        "failed": stage.failures.count,
        "request_rate": stage.load_summary.requested_rate,
        "burstiness": 1.0,
        "max_concurrency": stage.load_summary.concurrency,
        "total_input_tokens": round(ok.prompt_tokens.mean * ok.count),
        "total_output_tokens": round(ok.output_tokens.mean * ok.count),
        "mean_ttft_ms": lat.time_to_first_token.mean * 1e3,
        "mean_e2el_ms": lat.request_latency.mean * 1e3,
    }
    if ok.token_count_mismatches == 0:
        if lat.time_per_output_token is not None:
            fields["mean_tpot_ms"] = lat.time_per_output_token.mean * 1e3
        if lat.inter_token_latency is not None:
            fields["mean_itl_ms"] = lat.inter_token_latency.mean * 1e3
    return BenchServeResult.model_validate(fields)


def read_stage_report(path: str | Path, **settings: Any) -> WorkloadCase:
    """A ``WorkloadCase`` from an inference-perf stage report (``settings``: ``bench_case``'s)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{p}: cannot read benchmark result: {e}") from e
    return bench_case(
        stage_summary(parse_stage(data, str(p))),
        str(p),
        p.stem,
        label=f"inference-perf {p.name}",
        **settings,
    )
