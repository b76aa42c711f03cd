"""Statistics for capacity planning: the queue-instability test and spreads over seeds.

**Queue instability** (``queue_trend``). Below capacity the waiting queue is stationary: how
many requests wait does not depend on when you look. Above capacity (arrival rate λ, service rate
μ) it grows by ``λ - μ`` requests per second once the running batch is full. Counting it at each
arrival (which, for Poisson arrivals, sees the time average) and dividing the fitted growth by the
arrival rate gives a dimensionless overload, ``1 - μ/λ`` (0.1: the server completes 10 % less than
arrives). The waiting queue holds new *and preempted* requests, so the test also catches KV
thrashing, where requests queue again after they were first scheduled (a request's own waiting
time, first scheduled - arrival, would miss that); unlike the number of requests in the system it
is not inflated by long decodes, so it stays near zero well below capacity. The test:

1. per arrival, the requests waiting then (``evaluate.waiting_at``: every replica's queue after
   scheduling its latest step);
2. drop the first ``warmup_fraction`` of arrivals (the queue starts empty);
3. cut the rest, in arrival order, into ``batches`` groups of equal count and take each group's
   mean arrival time and mean queue length (batch means: neighbouring counts are strongly
   correlated, means of long batches much less so, which is what the t-test assumes);
4. fit length = a + b·arrival over the batch means by least squares and test b > 0 with a
   one-sided t-test (``batches - 2`` degrees of freedom);
5. the queue is **unstable** when ``b / λ >= min_slope`` *and* ``p < alpha``: the growth is both
   statistically significant and large enough to matter (1 % overload by default; a significant
   but tiny slope is a slow transient, not an overload).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servesim.engine.sums import sum_of_products


class QueueTestSettings(BaseModel):
    """Parameters of the queue-instability test (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup_fraction: float = Field(0.1, ge=0, lt=0.9, description="Share of first arrivals ignored.")
    batches: int = Field(10, ge=3, description="Batch means the regression is fitted to.")
    alpha: float = Field(0.01, gt=0, lt=1, description="Significance level of the one-sided slope test.")
    min_slope: float = Field(
        0.01, ge=0, description="Smallest overload that counts: growth of the queue / arrival rate."
    )
    min_requests: int = Field(30, ge=3, description="Fewer measured requests: no verdict (stable).")


class QueueTrend(BaseModel):
    """The outcome of the queue-instability test on one run."""

    slope: float = Field(description="Overload: fitted growth of the waiting queue / arrival rate.")
    growth_per_s: float = Field(description="Fitted growth of the waiting queue, requests per second.")
    t_stat: float
    p_value: float = Field(description="One-sided p-value of growth > 0.")
    batches: int
    growth: float = Field(description="Fitted growth over the measured window, requests.")
    unstable: bool


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (SciPy's ``special.stdtr``, the
    routine behind ``stats.t.sf``: importing ``scipy.special`` costs a fifth of ``scipy.stats``)."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


def queue_trend(
    arrival_s: np.ndarray, depth: np.ndarray, settings: QueueTestSettings | None = None
) -> QueueTrend:
    """Test whether the waiting queue (``depth`` at each arrival) grows (see the module docstring)."""
    s = settings or QueueTestSettings()
    arrival = np.asarray(arrival_s, dtype=np.float64)
    y_all = np.asarray(depth, dtype=np.float64)
    order = np.argsort(arrival, kind="stable")
    arrival, y_all = arrival[order], y_all[order]
    start = int(len(arrival) * s.warmup_fraction)
    arrival, y_all = arrival[start:], y_all[start:]
    n = len(arrival)
    flat = QueueTrend(
        slope=0.0, growth_per_s=0.0, t_stat=0.0, p_value=1.0, batches=0, growth=0.0, unstable=False
    )
    if n < s.min_requests or not arrival[-1] > arrival[0]:
        return flat
    rate = (n - 1) / float(arrival[-1] - arrival[0])
    k = min(s.batches, n // 3)
    groups = np.array_split(np.arange(n), k)
    x = np.array([arrival[g].mean() for g in groups])
    y = np.array([y_all[g].mean() for g in groups])
    xc = x - x.mean()
    sxx = sum_of_products(xc, xc)
    if sxx <= 0.0:
        return flat.model_copy(update={"batches": k})
    slope = sum_of_products(xc, y - y.mean()) / sxx
    resid = y - y.mean() - slope * xc
    df = k - 2
    s2 = sum_of_products(resid, resid) / df
    se = math.sqrt(s2 / sxx)
    scale = max(1e-12, float(np.abs(y).max()))
    if se <= 1e-12 * scale:
        t_stat = math.copysign(1e12, slope) if slope != 0.0 else 0.0  # exact fit: finite for JSON
    else:
        t_stat = slope / se
    p = t_sf(t_stat, df) if t_stat != 0.0 else 0.5
    overload = slope / rate
    return QueueTrend(
        slope=overload,
        growth_per_s=slope,
        t_stat=t_stat,
        p_value=p,
        batches=k,
        growth=slope * float(x[-1] - x[0]),
        unstable=overload >= s.min_slope and p < s.alpha,
    )


class Spread(BaseModel):
    """One quantity over several runs (seeds): mean, min, max and sample standard deviation."""

    model_config = ConfigDict(frozen=True)

    mean: float
    min: float
    max: float
    std: float = Field(description="Sample standard deviation (0 for one run).")
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return cls(mean=0.0, min=0.0, max=0.0, std=0.0, n=0)
        return cls(
            mean=float(v.mean()),
            min=float(v.min()),
            max=float(v.max()),
            std=float(v.std(ddof=1)) if v.size > 1 else 0.0,
            n=int(v.size),
        )
