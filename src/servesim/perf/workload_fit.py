"""Workload-level calibration: fit coefficients so that re-simulating each measured run
(``servesim.perf.workload_case``) reproduces its latency statistics, e.g. the JSON
``vllm bench serve --save-result`` writes (``servesim.perf.bench_io``) or the sim2real
experiments (``servesim.perf.sim2real``). Every evaluation of the objective re-simulates every
run, so the Jacobian is where the cost is: ``workload_jacobian`` takes it once (forward
differences), and fits on subsets can reuse it, updated along their own steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from servesim.errors import shown
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
from servesim.perf.fit import LOSSES, LogFit, fit_log_coefficients
from servesim.perf.memory import weight_bytes_per_gpu
from servesim.perf.profile import FittedRange, HardwareProfile
from servesim.perf.workload_case import CaseEvaluator, WorkloadCase, workload_residuals

DEFAULT_WORKLOAD_FIT = [
    "gemm_bandwidth_efficiency",
    "gemm_compute_efficiency",
    "step_overhead_s",
    "frontend_latency_s",
]


def workload_fitted_range(cases: Sequence[WorkloadCase]) -> FittedRange:
    w = [weight_bytes_per_gpu(c.model, c.tp) for c in cases]
    gpus = {c.gpu.name for c in cases}
    rates = []
    for c in cases:
        sched = c.requests.scheduled
        if len(sched) > 1 and sched[-1] > sched[0]:
            rates.append((len(sched) - 1) / (sched[-1] - sched[0]))
    return FittedRange(
        gpu=gpus.pop() if len(gpus) == 1 else None,
        tp=sorted({c.tp for c in cases}),
        models=sorted({c.model.name for c in cases}),
        weight_bytes_per_gpu=(float(min(w)), float(max(w))),
        tokens_per_step=(1.0, float(max(c.config.max_num_batched_tokens for c in cases))),
        requests_per_second=(float(min(rates)), float(max(rates))) if rates else None,
    )


def calibrate_workloads(
    cases: Sequence[WorkloadCase],
    *,
    base: HardwareProfile | None = None,
    fit: Sequence[str] | None = None,
    prior_weight: float = 0.05,
    diff_step: float = 0.05,
    max_iter: int = 15,
    workers: int = 1,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    start: HardwareProfile | None = None,
    frozen_jacobian: Mapping[str, np.ndarray] | None = None,
    loss: str = "soft_l1",
    loss_scale: float = 0.1,
    ftol: float = 1e-4,
) -> CalibrationReport:
    """Fit coefficients so that re-simulating each case reproduces its measured metrics.

    The prior is centred on ``base``; the search starts at ``start`` (default ``base``).
    Without ``frozen_jacobian`` every accepted step takes forward differences (step
    ``diff_step`` in ln units), one re-simulation per coefficient. ``frozen_jacobian`` (case
    name -> its rows of d residual / d ln coefficient, e.g. from ``workload_jacobian`` or a fit on
    a superset of the cases, see ``CalibrationReport.jacobian``) replaces them: each iteration
    then costs one re-simulation in all. The optimum still uses only these cases' residuals.
    Each accepted step updates that Jacobian along the step it took (Broyden's rank-one update,
    no extra re-simulation), so a coefficient that moves far from where the Jacobian was taken
    (an efficiency halves, the time it governs doubles) is steered by its real sensitivity, not
    the one at the start.

    ``loss`` is SciPy's (``least_squares``) at scale ``loss_scale`` in ln units (~10 %):
    ``"soft_l1"`` (default) makes larger errors count linearly rather than quadratically, so a
    run the model cannot explain does not drag the others; ``"cauchy"`` goes further (an
    outlier's pull falls off); ``"linear"`` is plain least squares.
    """
    if not cases:
        raise CalibrationError("no workload measurements to fit")
    base = base or HardwareProfile()
    names = check_fit_names(fit if fit is not None else DEFAULT_WORKLOAD_FIT)
    n_targets = sum(len(c.targets) for c in cases)
    if n_targets < len(names):
        raise CalibrationError(
            f"{n_targets} measured metrics cannot determine {len(names)} coefficients ({', '.join(names)}); "
            "fit fewer (--fit) or add runs"
        )
    chord = _frozen_chord(cases, names, frozen_jacobian, n_targets)
    if loss not in LOSSES:
        raise CalibrationError(f"unknown loss {shown(loss)}: use one of {', '.join(LOSSES)}")
    ev = CaseEvaluator(cases, workers)
    x_center = np.log([getattr(base, n) for n in names])
    x_start = np.log([getattr(start or base, n) for n in names])
    lo, hi = ln_bounds(names)
    objective = _Objective(cases, ev, base, names, progress, chord, hi, diff_step)
    try:
        # Closed-loop cases start every evaluation from the base profile's fixed point, so that
        # the objective is a deterministic function of the coefficients.
        pred0, ev.warm = ev(base)
        r0 = workload_residuals(cases, pred0)
        res = fit_log_coefficients(
            objective.residuals,
            x_start,
            lower=lo,
            upper=hi,
            prior_weight=prior_weight,
            prior_center=x_center,
            jacobian=objective.jacobian,
            loss=loss,
            loss_scale=loss_scale,
            max_iter=max_iter,
            ftol=ftol,
        )
        fitted = profile_at(base, names, res.x)
        pred1, _ = ev(fitted)
    finally:
        ev.close()
    j_final = objective.last_jac[0] if objective.last_jac else np.zeros((n_targets, len(names)))
    fit_run = _FitRun(names=names, base=base, result=res, fitted=fitted, evaluations=objective.count + 2)
    return _report(cases, fit_run, pred0, pred1, r0, j_final, name=name, loss=loss)


def _frozen_chord(
    cases: Sequence[WorkloadCase],
    names: Sequence[str],
    frozen_jacobian: Mapping[str, np.ndarray] | None,
    n_targets: int,
) -> np.ndarray | None:
    """The given Jacobian's rows of ``cases``, stacked (None: take forward differences)."""
    if frozen_jacobian is None:
        return None
    missing = [c.name for c in cases if c.name not in frozen_jacobian]
    if missing:
        raise CalibrationError(f"frozen_jacobian lacks the cases {missing}")
    chord = np.vstack([np.asarray(frozen_jacobian[c.name]) for c in cases])
    if chord.shape != (n_targets, len(names)):
        raise CalibrationError(f"frozen_jacobian has shape {chord.shape}, expected {(n_targets, len(names))}")
    return chord


class _Objective:
    """The fit's residuals (every case re-simulated at a point; the last point's cached, as the
    solver asks for its Jacobian next) and their Jacobian: forward differences, or the frozen
    one updated along each step taken (Broyden)."""

    def __init__(
        self,
        cases: Sequence[WorkloadCase],
        ev: CaseEvaluator,
        base: HardwareProfile,
        names: list[str],
        progress: Callable[[str], None] | None,
        chord: np.ndarray | None,
        upper: np.ndarray,
        diff_step: float,
    ) -> None:
        self.cases, self.ev, self.base, self.names = cases, ev, base, names
        self.progress, self.chord, self.upper, self.diff_step = progress, chord, upper, diff_step
        self.count = 0
        self.raw_at: dict[bytes, np.ndarray] = {}
        self.last_jac: list[np.ndarray] = []
        self.last_point: list[tuple[np.ndarray, np.ndarray]] = []

    def residuals(self, x: np.ndarray) -> np.ndarray:
        """Residuals at x; the last point's are cached (the solver asks for its Jacobian next)."""
        key = x.tobytes()
        if key in self.raw_at:
            return self.raw_at[key]
        self.count += 1
        preds, _ = self.ev(profile_at(self.base, self.names, x))
        r = workload_residuals(self.cases, preds)
        if self.progress is not None:
            self.progress(f"evaluation {self.count}: rms log error {math.sqrt(float(np.mean(r**2))):.4f}")
        self.raw_at.clear()
        self.raw_at[key] = r
        return r

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        r = self.residuals(x)
        if self.chord is None:
            j = forward_differences(self.residuals, x, self.upper, self.diff_step)
        else:
            if self.last_point:
                # Broyden: make the Jacobian exact along the step just taken.
                x_prev, r_prev = self.last_point[0]
                dx = x - x_prev
                dd = float(dx @ dx)
                if dd > 0:
                    self.chord = self.chord + np.outer(r - r_prev - self.chord @ dx, dx) / dd
            self.last_point[:] = [(x.copy(), r.copy())]
            j = self.chord
        self.last_jac[:] = [j]
        return j


@dataclass(frozen=True)
class _FitRun:
    """What a fit found: the coefficients fitted, from where, the solver's result, the profile."""

    names: list[str]
    base: HardwareProfile
    result: LogFit
    fitted: HardwareProfile
    evaluations: int


def _report(
    cases: Sequence[WorkloadCase],
    run: _FitRun,
    pred0: Sequence[Mapping[str, float]],
    pred1: Sequence[Mapping[str, float]],
    r0: np.ndarray,
    j_final: np.ndarray,
    *,
    name: str | None,
    loss: str,
) -> CalibrationReport:
    """The fit's report: errors before and after, per case, the stamped profile, the Jacobian."""
    names, res = run.names, run.result
    keys = [(i, k) for i, c in enumerate(cases) for k in sorted(c.targets)]
    meas = np.array([cases[i].targets[k] for i, k in keys])

    def flat(preds: Sequence[Mapping[str, float]]) -> np.ndarray:
        return np.array([preds[i].get(k, math.nan) for i, k in keys])

    per_case = {
        c.name: ErrorStats.of(
            np.array([pred1[i].get(k, math.nan) for k in sorted(c.targets)]),
            np.array([c.targets[k] for k in sorted(c.targets)]),
        )
        for i, c in enumerate(cases)
    }
    after = ErrorStats.of(flat(pred1), meas)
    fitted = stamp_fitted(
        run.fitted,
        name,
        workload_fitted_range(cases),
        {
            "method": f"workload re-simulation, {loss} loss on ln(predicted/measured) "
            "(scipy.optimize.least_squares)",
            "fitted": names,
            "cases": [c.name for c in cases],
            "targets": len(meas),
            "mape_after": after.mape,
            "rms_log_error_before": float(np.sqrt(np.mean(r0**2))),
        },
    )
    params = fitted_parameters(names, run.base, res)
    return CalibrationReport(
        kind="workloads",
        profile=fitted,
        parameters=params,
        notes=implausible(params),
        before=ErrorStats.of(flat(pred0), meas),
        after=after,
        per_group=per_case,
        iterations=res.iterations,
        evaluations=run.evaluations,
        converged=res.converged,
        message=res.message,
        predictions={c.name: pred1[i] for i, c in enumerate(cases)},
        jacobian={c.name: rows.tolist() for c, rows in zip(cases, case_rows(cases, j_final), strict=True)},
    )


def forward_differences(
    fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, upper: np.ndarray, step: float
) -> np.ndarray:
    """d fun / d x by SciPy's forward differences, stepping down where up would cross ``upper``."""
    from scipy.optimize import approx_fprime

    steps = np.where(x + step <= upper, step, -step)
    j: np.ndarray = np.atleast_2d(approx_fprime(x, fun, steps))
    return j


def case_rows(cases: Sequence[WorkloadCase], rows: np.ndarray) -> list[np.ndarray]:
    """Split stacked residual rows into each case's (a case's rows, its weight included, do not
    depend on the other cases, so subsets can stack them)."""
    out = []
    row = 0
    for c in cases:
        out.append(rows[row : row + len(c.targets)])
        row += len(c.targets)
    return out


def workload_jacobian(
    cases: Sequence[WorkloadCase],
    profile: HardwareProfile,
    fit: Sequence[str],
    *,
    diff_step: float = 0.05,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Each case's rows of d ln(predicted/measured) / d ln(coefficient) at ``profile``
    (forward differences). Depends on the model and the profile only, not on how well the
    targets are met, so it can serve as a chord-method Jacobian for fits on subsets."""
    names = check_fit_names(fit)
    ev = CaseEvaluator(cases, workers)
    x0 = np.log([getattr(profile, n) for n in names])
    done = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal done
        if np.array_equal(x, x0):
            return r0  # at ``profile`` itself, evaluated below
        done += 1
        preds, _ = ev(profile_at(profile, names, x))
        if progress is not None:
            progress(f"jacobian column {done}/{len(names)} ({names[done - 1]})")
        return workload_residuals(cases, preds)

    try:
        p0, ev.warm = ev(profile)
        r0 = workload_residuals(cases, p0)
        j = forward_differences(residuals, x0, ln_bounds(names)[1], diff_step)
    finally:
        ev.close()
    return {c.name: rows for c, rows in zip(cases, case_rows(cases, j), strict=True)}
