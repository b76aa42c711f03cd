"""Error bars from the step-time model's measured error (sim2real leave-one-out).

The simulation is exact given its step times; the step times are a model, and its error on real
vLLM runs was measured out of sample (``docs/perf.md``, Results: each H100 run predicted by a
profile fitted without it; ``data/perf/sim2real_loo.json``). Signs are not recorded, so the real
value of a predicted p99 is taken as ``predicted x exp(e)`` with ``e ~ Normal(0, sigma)``, sigma the
root mean square of ``ln(1 + APE)`` over the runs, per metric. Then:

* the 80 % interval of a p99: ``predicted x exp(+-1.2816 sigma)``;
* the probability that a cap holds: ``Phi(ln(cap / predicted) / sigma)``; for several caps their
  product (the errors taken as independent; the smallest single probability is an upper bound);
* the headroom for >= 90 %: the predicted p99 must be at most ``cap x exp(-1.2816 sigma)``.

The predicted p99 is the worst fresh seed's (seed noise is already in it).

Where the GPU has no calibrated profile the step times are the roofline on generic priors, and the
H100 runs say nothing of their error. There sigma is measured on the published vLLM figures servesim
was checked against on such GPUs (``data/perf/uncalibrated_errors.json``, written by
``benchmarks/published.py``; docs/perf.md, Published measurements): the root mean square of
``ln(servesim / published)`` over the rows of the metric's kind (TTFT; TPOT and ITL; end-to-end
latency and throughput). Those rows include DeepSeek-R1, predicted up to 13 times too fast, so
the intervals are wide: the error measured there, not a guess.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources

from pydantic import BaseModel, Field

from servesim.errors import InternalError
from servesim.perf.profile import resolve_profile
from servesim.tuning.slo import PercentileSLO

Z80 = 1.2815515655446004  # the 90th percentile of the standard normal


class MetricErrorBar(BaseModel):
    metric: str = Field(description="ttft_p99_ms, tpot_p99_ms, e2e_p99_ms.")
    predicted: float = Field(description="Worst fresh seed, ms.")
    sigma_ln: float = Field(
        description="Measured model error: RMS of ln(1 + APE) over the sim2real runs (calibrated), or of "
        "ln(servesim / published) over the published figures from GPUs without a calibrated profile."
    )
    low_80: float = Field(description="80 % interval, ms.")
    high_80: float
    cap: float | None = None
    probability_within_cap: float | None = Field(
        None, description="P(real p99 <= cap) under the error model."
    )
    max_predicted_for_90: float | None = Field(
        None, description="The predicted p99 that keeps P >= 90 %: cap x exp(-1.28 sigma)."
    )


class ErrorBars(BaseModel):
    """The recommendation's predictions with the step-time model's measured error."""

    source: str
    runs: int = Field(description="sim2real runs (or published measurements) the error was measured on.")
    calibrated: bool = Field(
        True,
        description="The step times came from a calibrated profile (the error measured on H100 vLLM "
        "runs); False: generic priors (the error measured on published figures from such GPUs).",
    )
    basis: str = Field("", description="What the error was measured on, in words.")
    metrics: list[MetricErrorBar]
    probability_slo_holds: float | None = Field(
        None, description="Product over the caps (independent errors); None: no SLO."
    )
    within_model_error: bool = Field(
        False, description="Meets the SLO as predicted, but with probability below 90 % under the error."
    )
    notes: list[str] = Field(default_factory=list)


@cache
def _loo() -> dict[str, object]:
    text = (resources.files("servesim") / "data" / "perf" / "sim2real_loo.json").read_text(encoding="utf-8")
    data: dict[str, object] = json.loads(text)
    return data


def sigma_ln(metric: str) -> float:
    """RMS of ln(1 + APE) of ``metric`` (ttft_p99, tpot_p99, e2e_p99) over the LOO runs."""
    apes = _loo()["ape_percent"]
    if not isinstance(apes, dict):
        raise InternalError("invariant broken: isinstance(apes, dict)")
    vals = [math.log1p(float(a) / 100.0) for a in apes[metric]]
    return math.sqrt(sum(v * v for v in vals) / len(vals))


#: A published figure's metric -> the p99 whose error it stands for.
_KIND = {"ttft": "ttft", "tpot": "tpot", "itl": "tpot", "e2e": "e2e", "output": "e2e", "total": "e2e"}


@cache
def _uncalibrated() -> dict[str, object]:
    path = resources.files("servesim") / "data" / "perf" / "uncalibrated_errors.json"
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return data


@cache
def _uncalibrated_errors() -> tuple[tuple[str, float], ...]:
    """(kind, ln(servesim / published)) of each shipped row, its kind the p99 it stands for."""
    rows = _uncalibrated()["rows"]
    if not isinstance(rows, list):
        raise InternalError("invariant broken: isinstance(rows, list)")
    out = []
    for r in rows:
        kind = _KIND.get(str(r["metric"]).split("_")[0])
        if kind is None:
            raise InternalError(f"uncalibrated_errors.json: no kind for the metric {r['metric']}")
        out.append((kind, math.log(float(r["servesim"]) / float(r["published"]))))
    return tuple(out)


def uncalibrated_sigma_ln(metric: str) -> float:
    """RMS of ln(servesim / published) over the published figures of ``metric``'s kind (ttft_p99,
    tpot_p99, e2e_p99) on GPUs without a calibrated profile."""
    kind = metric.split("_")[0]
    logs = [e for k, e in _uncalibrated_errors() if k == kind]
    if not logs:
        raise InternalError(f"no published figure of the kind of {metric}")
    return math.sqrt(sum(v * v for v in logs) / len(logs))


def _calibrated(gpu: str | None, profile: str | None) -> bool:
    """Whether the step times of ``gpu`` with ``profile`` (None: the GPU's own) come from a
    calibrated profile rather than the generic priors."""
    if gpu is None and profile is None:
        return True  # no roofline GPU named: the caller's step times, not the priors'
    return resolve_profile(profile, gpu).gpu is not None


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def error_bars(
    worst: dict[str, float], slo: PercentileSLO | None, gpu: str | None, profile: str | None = None
) -> ErrorBars:
    """Intervals, the probability the SLO holds and the headroom for 90 %, from worst-seed p99s:
    the error measured on H100 runs where the step times come from a calibrated profile, the
    error on published figures from GPUs without one where they come from the generic priors."""
    caps = slo.caps() if slo is not None else {}
    calibrated = _calibrated(gpu, profile)
    out: list[MetricErrorBar] = []
    probs: list[float] = []
    for m in ("ttft", "tpot", "e2e"):
        s = sigma_ln(f"{m}_p99") if calibrated else uncalibrated_sigma_ln(f"{m}_p99")
        pred = worst[m]
        cap = caps.get(m)
        p = None
        limit = None
        if cap is not None:
            p = 1.0 if s == 0 else (_phi(math.log(cap / pred) / s) if pred > 0 else 1.0)
            limit = cap * math.exp(-Z80 * s)
            probs.append(p)
        out.append(
            MetricErrorBar(
                metric=f"{m}_p99_ms",
                predicted=pred,
                sigma_ln=s,
                low_80=pred * math.exp(-Z80 * s),
                high_80=pred * math.exp(Z80 * s),
                cap=cap,
                probability_within_cap=p,
                max_predicted_for_90=limit,
            )
        )
    joint = math.prod(probs) if probs else None
    meets = all(worst[m] <= c for m, c in caps.items()) if caps else False
    notes = []
    runs = _loo()["runs"]
    if not isinstance(runs, list):
        raise InternalError("invariant broken: isinstance(runs, list)")
    if calibrated:
        source, n = str(_loo()["source"]), len(runs)
        basis = f"model error measured out of sample on {n} H100 vLLM runs (docs/perf.md)"
        if gpu is not None and gpu.lower() != str(_loo()["gpu"]):
            notes.append(
                f"the error was measured on H100 runs; on {gpu} it may be larger than these intervals"
            )
    else:
        errors = _uncalibrated_errors()
        source, n = str(_uncalibrated()["source"]), len(errors)
        worst_factor = math.exp(max(abs(e) for _, e in errors))
        basis = (
            f"uncalibrated timing: no calibrated profile for {gpu}, so roofline step times on generic "
            f"priors; error measured on {n} published vLLM figures from GPUs without one (docs/perf.md, "
            f"Published measurements; up to {worst_factor:.1f}x off)"
        )
    return ErrorBars(
        source=source,
        runs=n,
        calibrated=calibrated,
        basis=basis,
        metrics=out,
        probability_slo_holds=joint,
        within_model_error=bool(meets and joint is not None and joint < 0.9),
        notes=notes,
    )
