"""Is a gap beyond noise? The one test behind every verdict that names a winner.

Two deployments (layouts, trials, an A/B pair) run on the same fresh seeds give *paired*
figures: seed ``s`` gives ``a_s`` and ``b_s``. The relative gap on a seed is
``g_s = (a_s - b_s) / ((a_s + b_s) / 2)`` (read so that positive means ``a`` is better); the
**gap** is the mean of the ``g_s`` and the **paired spread** their range, ``max g - min g``:
how much the comparison itself moves when only the traffic is redrawn. A winner is named only
when the gap exceeds the **band**, the larger of that spread and a floor (the step-time model's
measured error of the figure, ``choice.model_tolerance``: a closer prediction is not a finding,
whatever the seeds say). A gap beyond the range also means every seed agrees on the sign.
Otherwise the two are **equivalent**, and the caller recommends the simpler one.

With one seed (a single A/B run) the spread is unknown and the floor alone decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from servesim.errors import InputError
from servesim.tuning.choice import Tolerance, model_tolerance

Winner = Literal["a", "b", "equivalent"]


class GapVerdict(BaseModel):
    """Which of two paired sets of figures is better, or that they are equivalent."""

    winner: Winner = Field(description="a, b, or equivalent (the gap is inside the band).")
    a_mean: float
    b_mean: float
    gap: float = Field(description="Mean relative per-seed gap, positive when a is better.")
    spread: float = Field(description="Range of the relative per-seed gaps (0 with one seed).")
    floor: float = Field(description="The smallest gap that counts whatever the seeds (model error).")
    band: float = Field(description="max(spread, floor): the gap must exceed it.")
    seeds: int

    @property
    def equivalent(self) -> bool:
        return self.winner == "equivalent"


def _relative(a: float, b: float) -> float:
    mid = (abs(a) + abs(b)) / 2
    return 0.0 if mid == 0 else (a - b) / mid


def relative_spread(values: Sequence[float]) -> float:
    """``(max - min) / mean`` of one deployment's figures over the seeds (0: one seed or a zero mean)."""
    vals = list(values)
    if len(vals) < 2:
        return 0.0
    mean = sum(vals) / len(vals)
    return 0.0 if mean == 0 else (max(vals) - min(vals)) / abs(mean)


def gap_verdict(
    a: Sequence[float], b: Sequence[float], *, higher_is_better: bool = True, floor: float = 0.0
) -> GapVerdict:
    """``a`` against ``b``, seed by seed (the same seeds, in the same order): see the module."""
    if len(a) != len(b) or not a:
        raise InputError(f"paired figures need the same seeds: {len(a)} against {len(b)}")
    sign = 1.0 if higher_is_better else -1.0
    gaps = [sign * _relative(x, y) for x, y in zip(a, b, strict=True)]
    gap = sum(gaps) / len(gaps)
    spread = max(gaps) - min(gaps)
    band = max(spread, floor)
    winner: Winner = "equivalent" if abs(gap) <= band else ("a" if gap > 0 else "b")
    return GapVerdict(
        winner=winner,
        a_mean=sum(a) / len(a),
        b_mean=sum(b) / len(b),
        gap=gap,
        spread=spread,
        floor=floor,
        band=band,
        seeds=len(gaps),
    )


def metric_floor(key: str, tol: Tolerance | None = None) -> float:
    """The step-time model's measured error of a figure, as a relative gap: TTFT-like figures
    take TTFT p99's, token-time figures (TPOT, ITL) TPOT p99's, end-to-end and queueing ones
    E2E p99's, rates (throughput, goodput, capacity) and everything else the per-step error."""
    t = tol or model_tolerance()
    pct = t.percent()
    k = key.lower()
    for prefix, metric in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "tpot"), ("e2e", "e2e")):
        if k.startswith(prefix):
            return pct[metric]
    if k.startswith("queue"):
        return pct["e2e"]
    return pct["objective"]


def ab_verdict(key: str, a: float | None, b: float | None, *, higher_is_better: bool) -> GapVerdict | None:
    """One metric of an A/B comparison of two single runs: the model error of that metric is the
    band (``metric_floor``). None when a figure is missing. ``winner`` says which run is better
    beyond it, "equivalent" inside it (a colour for "better" should then stay neutral)."""
    if a is None or b is None:
        return None
    return gap_verdict([a], [b], higher_is_better=higher_is_better, floor=metric_floor(key))


__all__ = ["GapVerdict", "ab_verdict", "gap_verdict", "metric_floor", "relative_spread"]
