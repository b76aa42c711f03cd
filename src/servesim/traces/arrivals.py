"""Arrival processes: when synthetic requests reach the server.

Time 0 is the start of the run. Like ``vllm bench serve``, the renewal processes (Poisson,
Gamma, constant) send request *i* after *i* gaps, so the first request arrives one gap after
t=0, not at t=0; ``burst`` sends everything at t=0.

* ``poisson`` / ``gamma`` follow ``vllm bench serve --request-rate λ --burstiness k``:
  gaps ~ Gamma(shape=k, scale=1/(λk)) (mean 1/λ, CV 1/√k; Poisson is k=1). vLLM then
  rescales the cumulative times so that the last of N requests arrives at exactly N/λ
  ("to stabilize throughput across seeds"; ``get_request`` in vllm/benchmarks/serve.py, the
  behaviour of the vLLM version the engine is matched against); ``rescale=True`` (the default)
  does the same, ``rescale=False`` gives the plain renewal process. Same distribution as vLLM,
  not the same random stream.
* ``constant``: request i at i/λ (vLLM's burstiness=inf).
* ``onoff``: a 2-state Markov-modulated Poisson process (exponential on/off periods).
* ``ramp`` / ``diurnal``: non-homogeneous Poisson processes (linear / sinusoidal rate),
  sampled by thinning (Lewis & Shedler).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoissonArrivals(_Model):
    """Poisson process at ``rate`` (exponential gaps), vLLM-rescaled by default."""

    kind: Literal["poisson"] = "poisson"
    rate: float = Field(gt=0, allow_inf_nan=False, description="Mean arrival rate, requests per second.")
    rescale: bool = Field(
        True, description="Stretch times so the last of N arrives at exactly N/rate (vLLM)."
    )


class GammaArrivals(_Model):
    """Gamma renewal process: ``vllm bench serve --request-rate rate --burstiness burstiness``."""

    kind: Literal["gamma"] = "gamma"
    rate: float = Field(gt=0, allow_inf_nan=False, description="Mean arrival rate, requests per second.")
    burstiness: float = Field(
        gt=0, allow_inf_nan=False, description="Gamma shape k: gap CV = 1/sqrt(k); 1 = Poisson, < 1 burstier."
    )
    rescale: bool = Field(
        True, description="Stretch times so the last of N arrives at exactly N/rate (vLLM)."
    )


class ConstantArrivals(_Model):
    """Evenly spaced: request i (1-based) at i/rate."""

    kind: Literal["constant"] = "constant"
    rate: float = Field(gt=0, allow_inf_nan=False, description="Requests per second.")


class BurstArrivals(_Model):
    """Every request at t=0 (vLLM's default ``--request-rate inf``)."""

    kind: Literal["burst"] = "burst"


class OnOffArrivals(_Model):
    """Two-state MMPP: Poisson at ``rate_on`` / ``rate_off`` during exponential on / off periods."""

    kind: Literal["onoff"] = "onoff"
    rate_on: float = Field(gt=0, allow_inf_nan=False, description="Rate while on, requests per second.")
    rate_off: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="Rate while off, requests per second."
    )
    mean_on_s: float = Field(gt=0, allow_inf_nan=False, description="Mean length of an on period, seconds.")
    mean_off_s: float = Field(gt=0, allow_inf_nan=False, description="Mean length of an off period, seconds.")
    start_on: bool = Field(True, description="Start in the on state.")

    def mean_rate(self) -> float:
        return (self.rate_on * self.mean_on_s + self.rate_off * self.mean_off_s) / (
            self.mean_on_s + self.mean_off_s
        )


class RampArrivals(_Model):
    """Poisson with a rate going linearly from ``rate_start`` to ``rate_end`` over ``duration_s``.

    After ``duration_s`` the rate stays at ``rate_end``.
    """

    kind: Literal["ramp"] = "ramp"
    rate_start: float = Field(ge=0, allow_inf_nan=False, description="Rate at t=0, requests per second.")
    rate_end: float = Field(
        ge=0, allow_inf_nan=False, description="Rate from duration_s on, requests per second."
    )
    duration_s: float = Field(gt=0, allow_inf_nan=False, description="Length of the ramp, seconds.")

    @model_validator(mode="after")
    def _some_rate(self) -> RampArrivals:
        if self.rate_start == 0 and self.rate_end == 0:
            raise InputError("rate_start and rate_end cannot both be 0")
        return self

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        frac = np.clip(t / self.duration_s, 0.0, 1.0)
        return self.rate_start + (self.rate_end - self.rate_start) * frac


class DiurnalArrivals(_Model):
    """Poisson with rate ``mean_rate * (1 + amplitude * sin(2π (t - phase_s) / period_s))``."""

    kind: Literal["diurnal"] = "diurnal"
    mean_rate: float = Field(gt=0, allow_inf_nan=False, description="Average rate, requests per second.")
    amplitude: float = Field(0.5, ge=0, le=1, description="Relative swing of the rate (0..1).")
    period_s: float = Field(86400.0, gt=0, allow_inf_nan=False, description="Period of the cycle, seconds.")
    phase_s: float = Field(0.0, allow_inf_nan=False, description="Time shift of the cycle, seconds.")

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        return self.mean_rate * (
            1.0 + self.amplitude * np.sin(2 * np.pi * (t - self.phase_s) / self.period_s)
        )


ArrivalModel = Annotated[
    PoissonArrivals
    | GammaArrivals
    | ConstantArrivals
    | BurstArrivals
    | OnOffArrivals
    | RampArrivals
    | DiurnalArrivals,
    Field(discriminator="kind"),
]


#: Independent random streams of one seed: changing the length model leaves arrivals unchanged.
STREAMS = ("arrivals", "prompt", "output", "prefix", "resample", "lora")


def stream_rng(seed: int, stream: str) -> np.random.Generator:
    """The generator of one named stream of ``seed`` (the same in seed JSON files and specs)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STREAMS.index(stream),)))


def sample_arrivals(model: ArrivalModel, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` sorted arrival times in seconds (float64)."""
    if n < 0:
        raise InputError("n must be >= 0")
    if n == 0:
        return np.zeros(0)
    if isinstance(model, PoissonArrivals):
        return _gamma(model.rate, 1.0, model.rescale, n, rng)
    if isinstance(model, GammaArrivals):
        return _gamma(model.rate, model.burstiness, model.rescale, n, rng)
    if isinstance(model, ConstantArrivals):
        return np.arange(1, n + 1, dtype=np.float64) / model.rate
    if isinstance(model, BurstArrivals):
        return np.zeros(n)
    if isinstance(model, OnOffArrivals):
        return _onoff(model, n, rng)
    if isinstance(model, RampArrivals):
        limit = None if model.rate_end > 0 else model.duration_s
        return _thinning(model.rate_at, max(model.rate_start, model.rate_end), n, rng, limit)
    return _thinning(model.rate_at, model.mean_rate * (1 + model.amplitude), n, rng, None)


def _gamma(rate: float, k: float, rescale: bool, n: int, rng: np.random.Generator) -> np.ndarray:
    """vLLM ``get_request``: cumulative Gamma(k, 1/(rate k)) gaps, optionally rescaled to N/rate."""
    times = np.cumsum(rng.gamma(shape=k, scale=1.0 / (rate * k), size=n))
    if rescale and times[-1] > 0:
        target = n / rate
        times *= target / times[-1]
        times[-1] = target  # exact, whatever the rounding of the product
    return times


def _onoff(model: OnOffArrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    """MMPP by whole batches of on/off cycles: counts per period are Poisson, times uniform."""
    parts: list[np.ndarray] = []
    count = 0
    t0 = 0.0
    per_cycle = model.rate_on * model.mean_on_s + model.rate_off * model.mean_off_s
    while count < n:
        cycles = int(min(1_000_000, max(16, 1.2 * (n - count) / per_cycle + 16)))
        on = rng.exponential(model.mean_on_s, cycles)
        off = rng.exponential(model.mean_off_s, cycles)
        first, second = (on, off) if model.start_on else (off, on)
        durations = np.column_stack([first, second]).ravel()
        rates = np.tile(
            [model.rate_on, model.rate_off] if model.start_on else [model.rate_off, model.rate_on], cycles
        )
        ends = t0 + np.cumsum(durations)
        starts = ends - durations
        counts = rng.poisson(rates * durations)
        idx = np.repeat(np.arange(len(durations)), counts)
        times = np.sort(starts[idx] + rng.uniform(0.0, 1.0, idx.size) * durations[idx])
        parts.append(times)
        count += times.size
        t0 = float(ends[-1])
    return np.concatenate(parts)[:n]


def _thinning(
    rate_at: Callable[[np.ndarray], np.ndarray],
    rate_max: float,
    n: int,
    rng: np.random.Generator,
    limit_s: float | None,
) -> np.ndarray:
    """Lewis-Shedler thinning: Poisson candidates at ``rate_max``, kept with prob rate(t)/rate_max."""
    parts: list[np.ndarray] = []
    count = 0
    t0 = 0.0
    while count < n:
        m = max(4096, 2 * (n - count))
        candidates = t0 + np.cumsum(rng.exponential(1.0 / rate_max, m))
        keep = rng.uniform(0.0, rate_max, m) < rate_at(candidates)
        accepted = candidates[keep]
        if limit_s is not None:
            accepted = accepted[accepted <= limit_s]
        parts.append(accepted)
        count += accepted.size
        t0 = float(candidates[-1])
        if limit_s is not None and t0 > limit_s and count < n:
            raise InputError(
                f"the ramp reaches rate 0 at {limit_s} s after only {count} of {n} requests; "
                "raise rate_end or lower the number of requests"
            )
    return np.concatenate(parts)[:n]
