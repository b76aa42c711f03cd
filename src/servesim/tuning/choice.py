"""Fewest changes first: among trials the step-time model cannot tell apart, the smallest change.

The simulation is exact given its step times, but the step times are a model whose error on real
vLLM runs was measured (``uncertainty``: RMS of ``ln(1 + APE)`` per metric, sim2real leave-one-out).
Two predictions closer than that error are not a finding, so a study's best trial is not worth six
flag changes when a one-flag trial is as good within it. The **tolerance** is that error:

* latency: trial ``a`` is clearly better than ``b`` on the SLO when its pressure (the worst seed's
  max over the capped metrics of p99 / cap) is below ``b``'s by more than ``exp(-sigma)`` of the
  metric that binds ``b`` (TTFT p99 about 24 %, TPOT 12 %, E2E 16 %);
* the objective (goodput per GPU at the target) and capacity per GPU scale with the time of a
  step: a ratio beyond ``exp(sigma_tpot)`` (the per-step error) is a difference, below it is not.

``choose`` takes a study's ranked feasible trials and the baseline: every trial the best does not
clearly beat is *equivalent*; among those the one changing the fewest knobs from the baseline wins
(then the fewest GPUs, then the study's rank). The baseline itself, when equivalent, wins with
zero changes: "keep what you have". ``recommend`` applies the same tolerance to the fresh-seed
comparison with the baseline (``explain.beats``).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from pydantic import BaseModel, Field

from servesim.tuning.space import KNOBS, knob_value
from servesim.tuning.uncertainty import sigma_ln

METRICS = ("ttft", "tpot", "e2e")


class Tolerance(BaseModel):
    """The step-time model's measured error, as the margin a difference must exceed."""

    source: str = Field(description="Where the error was measured.")
    sigma_ln: dict[str, float] = Field(description="ttft / tpot / e2e: RMS of ln(1 + APE) of the p99.")
    objective_sigma_ln: float = Field(
        description="Goodput and capacity per GPU: the per-step time error (TPOT p99's)."
    )

    def latency_ratio(self, metric: str) -> float:
        """A p99 (or pressure) bound by ``metric`` must be lower by this factor to be better."""
        return math.exp(-self.sigma_ln.get(metric, 0.0))

    @property
    def objective_ratio(self) -> float:
        return math.exp(self.objective_sigma_ln)

    def percent(self) -> dict[str, float]:
        """The tolerances as the relative differences they allow, for the output."""
        out = {m: 1 - self.latency_ratio(m) for m in self.sigma_ln}
        out["objective"] = self.objective_ratio - 1
        return out


@cache
def model_tolerance() -> Tolerance:
    """The tolerance from the sim2real leave-one-out error (``data/perf/sim2real_loo.json``)."""
    from servesim.tuning.uncertainty import _loo

    sig = {m: sigma_ln(f"{m}_p99") for m in METRICS}
    return Tolerance(source=str(_loo()["source"]), sigma_ln=sig, objective_sigma_ln=sig["tpot"])


def binding_metric(p99: dict[str, float], caps: dict[str, float]) -> str | None:
    """The capped metric with the highest p99 / cap (None without caps)."""
    if not caps:
        return None
    return max(caps, key=lambda m: (p99[m] / caps[m], m))


def pressure_clearly_lower(
    a_pressure: float | None, b_pressure: float | None, b_binding: str | None, tol: Tolerance
) -> bool:
    """``a``'s SLO pressure is below ``b``'s by more than the model error of ``b``'s binding metric."""
    if a_pressure is None or b_pressure is None or b_binding is None:
        return False
    return a_pressure < b_pressure * tol.latency_ratio(b_binding)


def changed_knobs(values: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """The searched knobs whose value differs from the baseline's, in ``KNOBS`` order."""
    return [k for k in KNOBS if knob_value(values, k) != knob_value(baseline, k)]


class Candidate(BaseModel):
    """One feasible trial, reduced to what the choice needs."""

    number: int
    params: dict[str, Any]
    gpus: int
    goodput_per_gpu: float
    capacity_per_gpu: float
    slo_pressure: float | None = Field(description="Worst seed's max over caps of p99 / cap (None: no SLO).")
    binding: str | None = Field(description="The capped metric behind slo_pressure.")


def clearly_better(a: Candidate, b: Candidate, tol: Tolerance) -> bool:
    """``a`` beats ``b`` by more than the model's error: fewer GPUs, a higher objective or
    capacity per GPU beyond the per-step error, or a lower SLO pressure beyond the binding
    metric's error."""
    if a.gpus != b.gpus:
        return a.gpus < b.gpus
    if a.goodput_per_gpu > b.goodput_per_gpu * tol.objective_ratio:
        return True
    if a.capacity_per_gpu > b.capacity_per_gpu * tol.objective_ratio:
        return True
    return pressure_clearly_lower(a.slo_pressure, b.slo_pressure, b.binding, tol)


class Choice(BaseModel):
    """Which trial to recommend, and why it is not simply the study's best."""

    tolerance: Tolerance
    best: int = Field(description="The study's best trial (its ranking rule).")
    chosen: int = Field(description="The trial recommended: fewest changes among the equivalent.")
    chosen_changes: list[str] = Field(description="Knobs it changes from the baseline.")
    best_changes: list[str] = Field(description="Knobs the best trial changes from the baseline.")
    equivalent: list[int] = Field(
        description="Trials the best does not clearly beat, in the order chosen (fewest changes first)."
    )
    keep: bool = Field(description="The chosen trial is the baseline: no change beats it beyond the error.")
    order: list[int] = Field(description="Trials to verify, in order: the equivalent ones, then the rest.")


def choose(
    ranked: list[Candidate], baseline: dict[str, Any] | None, baseline_number: int | None, tol: Tolerance
) -> Choice | None:
    """Fewest changes from ``baseline`` among the trials equivalent to ``ranked[0]`` (None: no trial)."""
    if not ranked:
        return None
    best = ranked[0]
    base = baseline or best.params
    rank = {c.number: i for i, c in enumerate(ranked)}
    equivalent = [c for c in ranked if c is best or not clearly_better(best, c, tol)]

    def key(c: Candidate) -> tuple[int, int, int]:
        n_changes = 0 if c.number == baseline_number else len(changed_knobs(c.params, base))
        return (n_changes, c.gpus, rank[c.number])

    equivalent.sort(key=key)
    chosen = equivalent[0]
    eq_numbers = [c.number for c in equivalent]
    rest = [c.number for c in ranked if c.number not in set(eq_numbers)]
    return Choice(
        tolerance=tol,
        best=best.number,
        chosen=chosen.number,
        chosen_changes=[] if chosen.number == baseline_number else changed_knobs(chosen.params, base),
        best_changes=changed_knobs(best.params, base),
        equivalent=eq_numbers,
        keep=chosen.number == baseline_number,
        order=eq_numbers + rest,
    )
