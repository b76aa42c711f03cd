"""A small bounded Levenberg-Marquardt least-squares solver (numpy only).

Parameters are fitted in log space (they are all positive scales: efficiencies, seconds), which
makes relative changes the natural step and keeps them positive; bounds are enforced by
clipping. A weak Gaussian prior in log space (``prior_weight``) pulls parameters that the data
cannot determine towards their starting values instead of letting them drift; with
``prior_weight=0`` the fit is plain least squares. The Jacobian is taken by forward
differences with step ``diff_step`` (in log units): small for smooth models (step-level fits),
a few percent for simulation-based objectives whose outputs are piecewise smooth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class LMResult:
    x: np.ndarray  # log-parameters at the optimum
    cost: float  # 0.5 * sum of squared residuals (data + prior)
    data_cost: float  # 0.5 * sum of squared data residuals
    residuals: np.ndarray  # data residuals at the optimum
    jacobian: np.ndarray  # data Jacobian at the last point it was taken (w.r.t. log-parameters)
    iterations: int
    evaluations: int
    converged: bool
    message: str

    def relative_std_errors(self) -> np.ndarray:
        """Approximate 1-sigma relative uncertainty of each parameter (from J^T J and the residual
        variance); ``inf`` for directions the data do not determine."""
        j = self.jacobian
        n, p = j.shape
        dof = max(n - p, 1)
        s2 = float(self.residuals @ self.residuals) / dof
        jtj = j.T @ j
        try:
            cov = np.linalg.pinv(jtj, rcond=1e-10) * s2
        except np.linalg.LinAlgError:
            return np.full(p, np.inf)
        diag = np.diag(cov)
        out = np.sqrt(np.maximum(diag, 0.0))
        sing = np.linalg.svd(jtj, compute_uv=False)
        if sing.size and sing[-1] <= 1e-12 * max(sing[0], 1e-300):
            # rank-deficient: mark the directions J^T J cannot see
            null = np.abs(np.diag(jtj)) <= 1e-12 * max(float(np.max(np.abs(np.diag(jtj)))), 1e-300)
            out[null] = np.inf
        return out


def levenberg_marquardt(
    fun: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    lower: np.ndarray,
    upper: np.ndarray,
    prior_weight: float = 0.0,
    prior_center: np.ndarray | None = None,
    diff_step: float = 1e-4,
    max_iter: int = 50,
    ftol: float = 1e-10,
    xtol: float = 1e-9,
    jacobian: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> LMResult:
    """Minimise ``0.5 * (|fun(x)|^2 + prior_weight^2 |x - center|^2)`` over ``lower <= x <= upper``.

    ``jacobian(x, r)``, if given, returns d fun / d x at ``x`` (whose residuals are ``r``);
    otherwise forward differences are used, one call of ``fun`` per parameter.
    """
    x = np.clip(np.asarray(x0, dtype=np.float64), lower, upper)
    center = x.copy() if prior_center is None else np.asarray(prior_center, dtype=np.float64)
    p = x.size
    evals = 0

    def full(xv: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float]:
        pr = prior_weight * (xv - center)
        return pr, 0.5 * float(r @ r + pr @ pr)

    def jac(xv: np.ndarray, r: np.ndarray) -> np.ndarray:
        nonlocal evals
        if jacobian is not None:
            return jacobian(xv, r)
        cols = []
        for k in range(p):
            step = diff_step if xv[k] + diff_step <= upper[k] else -diff_step
            xk = xv.copy()
            xk[k] += step
            rk = fun(xk)
            evals += 1
            cols.append((rk - r) / step)
        return np.column_stack(cols) if cols else np.zeros((r.size, 0))

    r = fun(x)
    evals += 1
    if not np.all(np.isfinite(r)):
        raise ValueError("the residuals are not finite at the starting point")
    _, cost = full(x, r)
    mu = 1e-3
    message = "maximum iterations reached"
    converged = False
    iterations = 0
    j = jac(x, r)
    for iterations in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        pr, _ = full(x, r)
        jp = prior_weight * np.eye(p)
        jj = np.vstack([j, jp]) if prior_weight > 0 else j
        rr = np.concatenate([r, pr]) if prior_weight > 0 else r
        a = jj.T @ jj
        g = jj.T @ rr
        improved = False
        for _ in range(12):
            d = np.diag(a).copy()
            d[d <= 0] = 1.0
            try:
                delta = np.linalg.solve(a + mu * np.diag(d), -g)
            except np.linalg.LinAlgError:
                mu *= 10
                continue
            x_new = np.clip(x + delta, lower, upper)
            r_new = fun(x_new)
            evals += 1
            if not np.all(np.isfinite(r_new)):
                mu *= 10
                continue
            _, cost_new = full(x_new, r_new)
            if cost_new < cost:
                rel = (cost - cost_new) / max(cost, 1e-300)
                step_norm = float(np.max(np.abs(x_new - x)))
                x, r, cost = x_new, r_new, cost_new
                mu = max(mu / 3.0, 1e-12)
                improved = True
                if rel < ftol or step_norm < xtol:
                    converged = True
                    message = "converged (cost or step below tolerance)"
                break
            mu *= 4.0
        if not improved:
            converged = True
            message = "converged (no further decrease)"
            break
        if converged:
            break
        j = jac(x, r)
    return LMResult(
        x=x,
        cost=cost,
        data_cost=0.5 * float(r @ r),
        residuals=r,
        jacobian=j,
        iterations=iterations,
        evaluations=evals,
        converged=converged,
        message=message,
    )
