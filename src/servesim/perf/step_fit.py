"""Step-level calibration: fit a profile's coefficients to measured step durations.

The roofline is evaluated for every measured step (``servesim.perf.step_io``) and the fit
minimises the relative (log) errors (``servesim.perf.fit``). ``default_step_fit`` picks what the
data can determine: weight streaming and the fixed step overhead, say, only separate with two or
more weight sizes (models or TP degrees).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servesim.perf.calibration import (
    CalibrationReport,
    ErrorStats,
    check_fit_names,
    fitted_parameters,
    implausible,
    ln_bounds,
    profile_at,
    stamp_fitted,
)
from servesim.perf.errors import CalibrationError
from servesim.perf.fit import fit_log_coefficients
from servesim.perf.memory import weight_bytes_per_gpu
from servesim.perf.profile import FittedRange, HardwareProfile
from servesim.perf.step_io import StepGroup


def default_step_fit(groups: Sequence[StepGroup]) -> tuple[list[str], list[str]]:
    """The coefficients the step data can determine, and notes on those left out."""
    notes: list[str] = []
    names: list[str] = []
    has_prefill = any(b.prefill_chunks for g in groups for b in g.batches)
    has_decode_only = any(not b.prefill_chunks for g in groups for b in g.batches)
    has_ctx = any(b.decode_ctx_sum > 0 for g in groups for b in g.batches)
    weights = {round(weight_bytes_per_gpu(g.model, g.tp)) for g in groups}
    layers = {g.model.num_layers for g in groups}
    if has_prefill:
        names += ["gemm_compute_efficiency", "attention_compute_efficiency"]
    else:
        notes.append("no prefill steps: compute efficiencies are not fitted")
    if len(weights) > 1:
        names.append("gemm_bandwidth_efficiency")
    else:
        notes.append(
            "one weight size (one model and TP degree): weight-streaming time and the fixed step overhead "
            "cannot be told apart, so gemm_bandwidth_efficiency keeps its start value"
        )
    if has_ctx:
        names.append("attention_bandwidth_efficiency")
    names += ["step_overhead_s", "per_sequence_overhead_s"]
    if len(layers) > 1:
        names.append("per_layer_overhead_s")
    if has_prefill and has_decode_only:
        names.append("mixed_step_overhead_s")
    if any(g.tp > 1 for g in groups):
        names.append("allreduce_latency_s")
    return names, notes


def step_fitted_range(groups: Sequence[StepGroup]) -> FittedRange:
    toks = [b.num_tokens for g in groups for b in g.batches]
    ctx = [b.decode_ctx_sum / b.num_decodes for g in groups for b in g.batches if b.num_decodes]
    w = [weight_bytes_per_gpu(g.model, g.tp) for g in groups]
    gpus = {g.gpu.name for g in groups}
    return FittedRange(
        gpu=gpus.pop() if len(gpus) == 1 else None,
        tp=sorted({g.tp for g in groups}),
        models=sorted({g.model.name for g in groups}),
        weight_bytes_per_gpu=(float(min(w)), float(max(w))),
        tokens_per_step=(float(min(toks)), float(max(toks))),
        decode_ctx_per_seq=(float(min(ctx)), float(max(ctx))) if ctx else None,
    )


def calibrate_steps(
    groups: Sequence[StepGroup],
    *,
    base: HardwareProfile | None = None,
    fit: Sequence[str] | None = None,
    prior_weight: float = 1e-3,
    max_iter: int = 100,
    name: str | None = None,
) -> CalibrationReport:
    """Fit ``fit`` coefficients (default: what the data determine) to measured step durations."""
    if not groups or not any(len(g.batches) for g in groups):
        raise CalibrationError("no step measurements to fit")
    base = base or HardwareProfile()
    notes: list[str] = []
    if fit is None:
        names, notes = default_step_fit(groups)
    else:
        names = check_fit_names(fit)
    n_rows = sum(len(g.batches) for g in groups)
    if n_rows < len(names) + 1:
        raise CalibrationError(
            f"{n_rows} steps cannot determine {len(names)} coefficients; measure more steps"
        )
    measured = np.concatenate([g.durations for g in groups])

    def predict(prof: HardwareProfile) -> np.ndarray:
        return np.concatenate([g.predict(prof) for g in groups])

    def residuals(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(predict(profile_at(base, names, x)) / measured)
        return out

    x0 = np.log([getattr(base, n) for n in names])
    lo, hi = ln_bounds(names)
    before = ErrorStats.of(predict(base), measured)
    res = fit_log_coefficients(
        residuals, x0, lower=lo, upper=hi, prior_weight=prior_weight, max_iter=max_iter
    )
    fitted = profile_at(base, names, res.x)
    pred = predict(fitted)
    per_group: dict[str, ErrorStats] = {}
    k = 0
    for g in groups:
        n = len(g.batches)
        per_group[g.key] = ErrorStats.of(pred[k : k + n], measured[k : k + n])
        k += n
    after = ErrorStats.of(pred, measured)
    rng = step_fitted_range(groups)
    fitted = stamp_fitted(
        fitted,
        name,
        rng,
        {
            "method": "step-level least squares on ln(predicted/measured) (scipy.optimize.least_squares)",
            "fitted": names,
            "rows": n_rows,
            "mape_after": after.mape,
        },
    )
    return CalibrationReport(
        kind="steps",
        profile=fitted,
        parameters=(params := fitted_parameters(names, base, res)),
        before=before,
        after=after,
        per_group=per_group,
        iterations=res.iterations,
        evaluations=res.evaluations,
        converged=res.converged,
        message=res.message,
        notes=[*notes, *implausible(params)],
    )
