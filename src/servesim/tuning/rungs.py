"""Search rungs (``--pruning rungs``): stop a trial early when a cheap look proves it can be
neither the study's best nor equivalent to it, so it need not run in full.

A trial climbs four rungs; each stop is a bound, never a ratio (a "keep the top third" rule on a
prefix would stop trials the full trace ranks first: a prefix of a bursty trace is not the trace):

* **rung 0, GPU bound** (free; objective ``goodput_per_gpu``): goodput per GPU is at most the
  target rate / GPUs (every request good). A trial whose bound is below the best feasible trial
  already run in full (by more than the 0.001 rounding of ``goodput_rank``) has more GPUs than the
  final best, which then beats it (``choice.clearly_better``: fewer GPUs win): it is stopped.
* **rung 1, prefix**: the trial runs once (the first search seed, at the target rate) on the first
  ``prefix_fraction`` of the requests. Those requests arrive first, so in the full run they meet
  the same requests before them and more after them (more contention): each one over a cap, or not
  good, on the prefix is so in the full run too. When the prefix alone has more requests over a
  p99 cap than 1 % of the *full* trace (+ 2 for the percentile's interpolation), the full run's
  p99 is over the cap on that seed, hence on the worst seed: the trial is infeasible and stopped.
  Likewise when the prefix has more requests not good than ``1 - min_good_fraction`` of the full
  trace allows. The prefix's own p99 is never compared with the cap, so a light (or heavy) start
  of the trace biases nothing: the count is over the whole trace's denominator.
* **rung 2, capacity** (objective ``goodput_per_gpu``): the trial's capacity probe, which its full
  evaluation needs anyway, runs before its seeds. Among feasible trials of one goodput the study
  ranks by capacity per GPU, and ``choice.clearly_better`` counts a capacity per GPU higher by more
  than the model's per-step error (``Tolerance.objective_ratio``) as a real difference. A trial is
  stopped when a feasible trial already run in full has at least the goodput rank this trial's
  GPUs allow (``1 / GPUs``: every request good) and a capacity per GPU above this trial's by more
  than that error: the final best then has this trial's GPUs or fewer and at least that capacity
  (it ranks at or above that trial), so it clearly beats this one, which can be neither the best
  nor equivalent to it (never the recommendation). The probe is the full run's own (same job,
  same seed), so the capacity compared is exactly the one the full run would report.
* **rung 3, full**: the trial's seeds (its probe already ran at rung 2).

The assumption is *monotone contention*: adding later requests never makes an earlier one faster
(vLLM schedules first come, first served and preempts the latest arrival first; a router sees the
same earlier requests). The baseline runs in full (it is the comparison the recommendation makes).
Stopped trials are told to Optuna as PRUNED (their rung and reason as attributes), like invalid
combinations. Decisions use only trials told before the batch, so a study stays reproducible for a
seed and batch size with any executor.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from servesim.tuning.jobs import PrefixCounts, TrialOutcome
from servesim.tuning.slo import PercentileSLO

Pruning = Literal["rungs", "none"]

RUNG_NAMES = {0: "GPU bound", 1: "prefix", 2: "capacity", 3: "full"}
FULL = 3

#: goodput_rank is rounded to 0.001: a bound must miss the best by more to be a miss
_RANK_SLACK = 0.0011
#: capacity is ranked to 3 significant figures: a bar must beat a capacity by more
_CAP_SLACK = 0.001


def prefix_size(n_full: int, fraction: float) -> int:
    """Requests in the prefix rung (at least one)."""
    return max(1, math.ceil(n_full * fraction))


def gpu_bound_stop(gpus: int, best_rank: float | None) -> str | None:
    """Why rung 0 stops a trial of ``gpus`` GPUs (None: it goes on), given the best feasible
    ``goodput_rank`` run in full so far."""
    if best_rank is None or not 1.0 / gpus < best_rank - _RANK_SLACK:
        return None
    return (
        f"{gpus} GPUs: at most {1.0 / gpus:.3f} of the target rate per GPU, below the "
        f"{best_rank:.3f} a feasible trial already reached with fewer GPUs"
    )


def capacity_bar(outcomes: list[TrialOutcome], gpus: int) -> float | None:
    """The highest capacity per GPU among feasible trials run in full whose goodput rank a trial of
    ``gpus`` GPUs cannot exceed (None: no such trial yet, or ranks too coarse to tell ``gpus`` from
    ``gpus + 1``, so a larger trial could outrank it)."""
    top = round(1.0 / gpus, 3)
    if round(1.0 / (gpus + 1), 3) >= top:
        return None
    caps = [
        o.capacity_per_gpu
        for o in outcomes
        if o.valid and o.feasible and o.capacity_per_gpu is not None and o.goodput_rank >= top
    ]
    return max(caps, default=None)


def capacity_stop(capacity_per_gpu: float, bar: float | None, ratio: float) -> str | None:
    """Why rung 2 stops a trial (None: it goes on): ``bar`` (``capacity_bar``) exceeds its
    capacity per GPU by more than ``ratio`` (the model's per-step error; the 0.1 % covers the
    ranking's rounding of capacity to 3 significant figures)."""
    if bar is None or not capacity_per_gpu * ratio < bar * (1 - _CAP_SLACK):
        return None
    return (
        f"{capacity_per_gpu:.3f} req/s per GPU of capacity, below the {bar:.3f} a feasible trial with "
        f"at least its goodput already reached, by more than the model's {ratio - 1:.0%} error"
    )


def over_cap_needed(n_full: int) -> int:
    """Requests over a cap that put the full trace's p99 over it (linear interpolation)."""
    return math.floor(0.01 * n_full) + 2


def prefix_stop(
    counts: PrefixCounts, n_full: int, slo: PercentileSLO | None, shed_limit: float | None = None
) -> str | None:
    """Why rung 1 stops a trial (None: it goes on): its prefix already makes the full run infeasible.

    ``shed_limit`` (the deployment has a queue timeout: ``EvalSettings.max_shed_fraction``): a
    request over a cap on the prefix may be shed in the full run instead, leaving the p99's
    sample; then it takes enough of them that either the p99 is over the cap or more than the
    limit are shed (the queue counts as saturated: infeasible too)."""
    if slo is None:
        return None
    need = over_cap_needed(n_full)
    if shed_limit is not None:
        need += math.floor(shed_limit * n_full)
    for m, k in sorted(counts.over_cap.items()):
        if k >= need:
            return (
                f"{k} of the first {counts.n} requests over the {m} p99 cap: "
                f"the {n_full}-request run's p99 is over it ({need} suffice)"
            )
    if slo.min_good_fraction is not None:
        allowed = (1.0 - slo.min_good_fraction) * n_full
        if counts.not_good > allowed + 1:
            return (
                f"{counts.not_good} of the first {counts.n} requests not good: the {n_full}-request "
                f"run's good fraction is below {slo.min_good_fraction}"
            )
    return None


def prefix_pays(outcomes: list[TrialOutcome], fraction: float, runs_per_trial: int) -> bool:
    """Whether the prefix rung is worth its cost: it costs ``fraction / runs_per_trial`` of a full
    trial and saves the rest of one when it stops a trial, so it pays while the share of trials
    past the GPU bound that missed the SLO (stopped at the prefix, or infeasible in full) is at
    least its cost. True with no such trial yet. Skipping it never loses a trial (nothing is
    stopped), and it reads only trials already told, so studies stay reproducible."""
    past = [o for o in outcomes if o.valid or o.rung == 1]
    if not past:
        return True
    missed = sum(1 for o in past if not o.feasible)
    return missed / len(past) >= fraction / runs_per_trial


def best_rank(outcomes: list[TrialOutcome]) -> float | None:
    """The best ``goodput_rank`` of the feasible trials run in full (None: none yet)."""
    ranks = [o.goodput_rank for o in outcomes if o.valid and o.feasible]
    return max(ranks, default=None)


class RungRow(BaseModel):
    rung: int
    name: str = Field(description="GPU bound | prefix | capacity | full.")
    entered: int = Field(description="Trials that reached this rung.")
    stopped: int = Field(description="Trials stopped at it.")


class RungReport(BaseModel):
    """The rungs of a study with ``pruning="rungs"`` (``tuning.rungs``)."""

    prefix_fraction: float
    prefix_requests: int = Field(description="Requests of the prefix rung.")
    full_requests: int = Field(description="Requests of the full trace.")
    rungs: list[RungRow]
    stopped: int = Field(description="Trials stopped before the full run.")
    prefix_skipped: int = Field(
        0, description="Trials past the GPU bound run in full without the prefix (it did not pay)."
    )
    simulated_requests: int = Field(description="Requests the study's trials simulated (rungs included).")
    unpruned_requests: int = Field(description="Requests the same trials would simulate without rungs.")
    saved_fraction: float = Field(description="1 - simulated / unpruned.")


def rung_report(
    outcomes: list[TrialOutcome], *, fraction: float, n_full: int, runs_per_trial: int
) -> RungReport:
    """Count the rungs over the study's outcomes (valid or stopped). A trial run in full reached
    rung 3 (a study stored before the capacity rung recorded it as 2); every trial past the prefix
    ran its capacity probe first (rung 2), with or without a bar to stop it."""
    full = n_full * runs_per_trial
    reached = [FULL if o.valid else o.rung for o in outcomes if o.rung is not None]
    stops = [o.rung for o in outcomes if o.rung is not None and not o.valid]
    # past the bound without the prefix (``prefix_pays`` was false): only the probe, or the full runs
    skipped = sum(
        1
        for o in outcomes
        if o.rung is not None
        and (o.valid or o.rung == 2)
        and o.simulated_requests <= (full if o.valid else n_full)
    )
    entered = [sum(x >= r for x in reached) for r in RUNG_NAMES]
    entered[1] -= skipped
    rows = [
        RungRow(rung=r, name=RUNG_NAMES[r], entered=entered[r], stopped=stops.count(r)) for r in RUNG_NAMES
    ]
    simulated = [o for o in outcomes if o.valid or o.rung is not None]
    sim = sum(o.simulated_requests for o in simulated)
    unpruned = len(simulated) * n_full * runs_per_trial
    return RungReport(
        prefix_fraction=fraction,
        prefix_requests=prefix_size(n_full, fraction),
        full_requests=n_full,
        rungs=rows,
        stopped=len(stops),
        prefix_skipped=skipped,
        simulated_requests=sim,
        unpruned_requests=unpruned,
        saved_fraction=round(1 - sim / unpruned, 4) if unpruned else 0.0,
    )


__all__ = [
    "FULL",
    "RUNG_NAMES",
    "Pruning",
    "RungReport",
    "RungRow",
    "best_rank",
    "capacity_bar",
    "capacity_stop",
    "gpu_bound_stop",
    "over_cap_needed",
    "prefix_pays",
    "prefix_size",
    "prefix_stop",
    "rung_report",
]
