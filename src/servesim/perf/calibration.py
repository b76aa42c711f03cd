"""What every calibration shares: which coefficients may be fitted and within which bounds, the
error statistics before and after, and the report (``CalibrationReport``).

Two kinds of fit produce it: step timings (``servesim.perf.step_fit``: the roofline evaluated
per measured step) and whole benchmark runs (``servesim.perf.workload_fit``: every run
re-simulated per evaluation). Both report the error before and after, each coefficient's
approximate relative standard error, and which coefficients the data could not determine (they
stay near their starting values, pulled there by a weak prior). The fitted profile records the
range the data covered (``FittedRange``); using it far outside warns (``ExtrapolationWarning``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from servesim.perf.errors import CalibrationError
from servesim.perf.fit import LogFit
from servesim.perf.profile import FIT_BOUNDS, PLAUSIBLE_MIN, FittedRange, HardwareProfile


class ErrorStats(BaseModel):
    """Relative errors of predictions against measurements (percent)."""

    n: int
    mape: float = Field(description="Mean absolute percentage error.")
    median_ape: float
    p90_ape: float
    max_ape: float
    rms_log_error: float = Field(description="Root mean square of ln(predicted / measured).")

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> ErrorStats:
        p = np.asarray(predicted, dtype=np.float64)
        m = np.asarray(measured, dtype=np.float64)
        ok = np.isfinite(p) & np.isfinite(m) & (m != 0)
        if not np.any(ok):
            return cls(
                n=0,
                mape=math.nan,
                median_ape=math.nan,
                p90_ape=math.nan,
                max_ape=math.nan,
                rms_log_error=math.nan,
            )
        ape = 100.0 * np.abs(p[ok] - m[ok]) / np.abs(m[ok])
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(p[ok] / m[ok])
        lr = lr[np.isfinite(lr)]
        return cls(
            n=int(ok.sum()),
            mape=float(ape.mean()),
            median_ape=float(np.median(ape)),
            p90_ape=float(np.percentile(ape, 90)),
            max_ape=float(ape.max()),
            rms_log_error=float(np.sqrt(np.mean(lr**2))) if lr.size else math.nan,
        )


class FittedParameter(BaseModel):
    name: str
    start: float
    value: float
    relative_std_error: float | None = Field(description="Approximate 1-sigma relative uncertainty.")
    determined: bool = Field(description="False when the data barely constrain it (it stays near its start).")


class CalibrationReport(BaseModel):
    """What a calibration fitted, how well, and the resulting profile."""

    kind: str = Field(description="'steps' or 'workloads'.")
    profile: HardwareProfile
    parameters: list[FittedParameter]
    before: ErrorStats
    after: ErrorStats
    per_group: dict[str, ErrorStats] = Field(default_factory=dict)
    iterations: int
    evaluations: int
    converged: bool
    message: str
    notes: list[str] = Field(default_factory=list)
    predictions: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Workload fits: each case's predicted metrics (ms) with the fitted profile.",
    )
    jacobian: dict[str, list[list[float]]] = Field(
        default_factory=dict,
        description="Workload fits: each case's rows of d residual / d ln(coefficient) near the optimum.",
    )


def ln_bounds(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """ln of each coefficient's calibration bounds (``FIT_BOUNDS``)."""
    lo = np.log([FIT_BOUNDS[n][0] for n in names])
    hi = np.log([FIT_BOUNDS[n][1] for n in names])
    return lo, hi


def check_fit_names(names: Iterable[str]) -> list[str]:
    """The coefficients to fit, deduplicated; an error names any that cannot be calibrated."""
    out = list(dict.fromkeys(names))
    unknown = [n for n in out if n not in FIT_BOUNDS]
    if unknown:
        raise CalibrationError(f"cannot fit {unknown}: calibratable coefficients are {sorted(FIT_BOUNDS)}")
    if not out:
        raise CalibrationError("nothing to fit: give at least one coefficient")
    return out


def profile_at(base: HardwareProfile, names: Sequence[str], x: np.ndarray) -> HardwareProfile:
    """``base`` with the coefficients ``names`` set to ``exp(x)``."""
    return base.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, x, strict=True)})


def fitted_parameters(names: list[str], start: HardwareProfile, res: LogFit) -> list[FittedParameter]:
    """Each coefficient's start, fitted value, uncertainty and whether the data determine it."""
    rse = res.relative_std_errors()
    jn = np.linalg.norm(res.jacobian, axis=0) if res.jacobian.size else np.zeros(len(names))
    scale = float(np.max(jn)) if jn.size else 0.0
    out = []
    for k, n in enumerate(names):
        se = float(rse[k]) if np.isfinite(rse[k]) else None
        determined = bool(scale > 0 and jn[k] > 1e-3 * scale and (se is None or se < 0.5))
        out.append(
            FittedParameter(
                name=n,
                start=float(getattr(start, n)),
                value=float(math.exp(res.x[k])),
                relative_std_error=se,
                determined=determined,
            )
        )
    return out


def implausible(parameters: Sequence[FittedParameter]) -> list[str]:
    """One line per fitted coefficient below what a GPU reaches (``PLAUSIBLE_MIN``): the fit
    explains the measurements, but not with the GPU's numbers."""
    return [
        f"{p.name} fitted at {p.value:.3g}, below the {PLAUSIBLE_MIN[p.name]:g} any GPU's kernels reach: "
        "the measurements hold latency the step-time model does not have (the client, the server's "
        "front end, a loaded host), and the fit bent a GPU coefficient to absorb it; do not use this "
        "profile to predict the GPU"
        for p in parameters
        if p.name in PLAUSIBLE_MIN and p.value < PLAUSIBLE_MIN[p.name]
    ]


def stamp_fitted(
    fitted: HardwareProfile, name: str | None, covered: FittedRange, calibration: dict[str, Any]
) -> HardwareProfile:
    """The fitted profile, named (``calibrated-<gpu>`` by default), with the range its data
    covered (later use far outside warns) and how it was fitted."""
    return fitted.model_copy(
        update={
            "name": name or f"calibrated-{covered.gpu or 'mixed'}",
            "gpu": covered.gpu,
            "fitted_range": covered,
            "calibration": calibration,
        }
    )
