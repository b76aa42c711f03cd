"""Bounded least squares over ln-coefficients with a weak prior, solved by SciPy.

Every calibrated coefficient is a positive scale (an efficiency, seconds), so fits work in
ln(coefficient): relative changes are the natural step and bounds keep coefficients positive.
``scipy.optimize.least_squares`` (trust-region reflective, ``method="trf"``) does the solving:
bounds, robust losses (``soft_l1``, ``cauchy``, ... at ``loss_scale`` in ln units) and
finite-difference or callable Jacobians. It is handed offsets from the start, ln(c / c_start),
so that its unit trust radius, its unit ``x_scale`` and its relative finite-difference step are
all in e-folds whatever a coefficient's magnitude (ln of 3 µs is -12.7).

A weak Gaussian prior (``prior_weight``: extra residuals ``prior_weight * ln(c / c_prior)``)
pulls coefficients the data cannot determine towards their prior instead of letting them drift;
with ``prior_weight=0`` the fit is plain least squares. The robust loss applies to those rows as
to the data ones; at the sim2real settings (weight 0.05, scale 0.1) the prior's pull on a
coefficient within a factor 2 of its prior stays within 11 % of the quadratic one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servesim.errors import shown
from servesim.perf.errors import CalibrationError

#: SciPy's robust losses (``least_squares(loss=...)``).
LOSSES = ("linear", "soft_l1", "huber", "cauchy", "arctan")


@dataclass
class LogFit:
    x: np.ndarray  # ln(coefficient) at the optimum
    cost: float  # SciPy's cost at the optimum: 0.5 * sum of the loss over data and prior rows
    residuals: np.ndarray  # data residuals at the optimum
    jacobian: np.ndarray  # data rows of the Jacobian the solver ended with (robust loss applied)
    iterations: int  # trust-region iterations (each accepted step takes a new Jacobian)
    evaluations: int  # calls of the residual function, finite differences included
    converged: bool
    message: str

    def relative_std_errors(self) -> np.ndarray:
        """Approximate 1-sigma relative uncertainty of each coefficient (from J^T J and the
        residual variance the loss sees); ``inf`` for directions the data do not determine."""
        j = self.jacobian
        n, p = j.shape
        dof = max(n - p, 1)
        s2 = 2.0 * self.cost / dof
        jtj = j.T @ j
        try:
            cov = np.linalg.pinv(jtj, rcond=1e-10) * s2
        except np.linalg.LinAlgError:
            return np.full(p, np.inf)
        out = np.sqrt(np.maximum(np.diag(cov), 0.0))
        sing = np.linalg.svd(jtj, compute_uv=False)
        if sing.size and sing[-1] <= 1e-12 * max(sing[0], 1e-300):
            # rank-deficient: mark the directions J^T J cannot see
            null = np.abs(np.diag(jtj)) <= 1e-12 * max(float(np.max(np.abs(np.diag(jtj)))), 1e-300)
            out[null] = np.inf
        return out


def fit_log_coefficients(
    fun: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    lower: np.ndarray,
    upper: np.ndarray,
    prior_weight: float = 0.0,
    prior_center: np.ndarray | None = None,
    jacobian: Callable[[np.ndarray], np.ndarray] | None = None,
    diff_step: float | None = None,
    loss: str = "linear",
    loss_scale: float = 1.0,
    max_iter: int = 50,
    ftol: float = 1e-10,
    xtol: float = 1e-9,
) -> LogFit:
    """Minimise the ``loss`` of ``fun(x)`` and of the prior rows over ``lower <= x <= upper``.

    ``x`` are ln-coefficients. ``jacobian(x)``, if given, returns d fun / d x (data rows only);
    otherwise SciPy takes forward differences with relative step ``diff_step`` (its default when
    None; a few hundredths for simulation-based objectives, which are piecewise smooth).
    ``max_iter`` bounds the accepted steps (each takes a new Jacobian).
    """
    from scipy.optimize import least_squares

    if loss not in LOSSES:
        raise CalibrationError(f"unknown loss {shown(loss)}: use one of {', '.join(LOSSES)}")
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    start = np.clip(np.asarray(x0, dtype=np.float64), lower, upper)
    center = start.copy() if prior_center is None else np.asarray(prior_center, dtype=np.float64)
    p = start.size
    evaluations = 0

    def data(x: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        return np.asarray(fun(x), dtype=np.float64)

    r0 = data(start)
    if not np.all(np.isfinite(r0)):
        raise CalibrationError("the fit's residuals are not finite at its starting point")
    n_data = r0.size

    def residuals(u: np.ndarray) -> np.ndarray:
        x = start + u
        r = r0 if not np.any(u) else data(x)
        return np.concatenate([r, prior_weight * (x - center)]) if prior_weight > 0 else r

    jac: Callable[[np.ndarray], np.ndarray] | str = "2-point"
    if jacobian is not None:
        user_jacobian = jacobian

        def jac_rows(u: np.ndarray) -> np.ndarray:
            j = np.asarray(user_jacobian(start + u), dtype=np.float64)
            return np.vstack([j, prior_weight * np.eye(p)]) if prior_weight > 0 else j

        jac = jac_rows

    accepted = 0

    def stop_after_max_iter(intermediate_result: object) -> None:
        nonlocal accepted
        accepted += 1
        if accepted >= max_iter:
            raise StopIteration

    res = least_squares(
        residuals,
        np.zeros(p),
        jac=jac,
        bounds=(lower - start, upper - start),
        method="trf",
        loss=loss,
        f_scale=loss_scale,
        x_scale=1.0,
        diff_step=diff_step,
        ftol=ftol,
        xtol=xtol,
        max_nfev=12 * max_iter + 1,
        callback=stop_after_max_iter,
    )
    halted = res.status == -2
    return LogFit(
        x=start + res.x,
        cost=float(res.cost),
        residuals=np.asarray(res.fun[:n_data], dtype=np.float64),
        jacobian=np.asarray(res.jac[:n_data], dtype=np.float64),
        iterations=accepted,
        evaluations=evaluations,
        converged=bool(res.status > 0),
        message="maximum iterations reached" if halted else str(res.message),
    )
