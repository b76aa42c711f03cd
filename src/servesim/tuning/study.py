"""The study's settings and its result as stored: every trial, the best, the Pareto front, why
trials were pruned, what the infeasible ones broke (``tuning.search`` runs the study,
``tuning.ranking`` summarises it into a ``TuneResult``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim import tune_defaults
from servesim.tuning.choice import Choice
from servesim.tuning.jobs import LatencyMetric, Objective, TrialOutcome
from servesim.tuning.rungs import RungReport

Direction = Literal["minimize", "maximize"]


class TuneSettings(BaseModel):
    """The study: objective, trials, seeds, sampler."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Objective = "goodput_per_gpu"
    n_trials: int = Field(tune_defaults.TRIALS, ge=1, description="Trials this run adds to the study.")
    seed: int = Field(0, ge=0, description="Sampler seed.")
    seeds: list[int] = Field(
        default_factory=lambda: list(range(tune_defaults.TRIAL_SEEDS)),
        min_length=1,
        description="Replicate seeds per trial.",
    )
    probe_factor: float = Field(50.0, gt=1, description="Capacity probe at this x the target rate.")
    latency_metric: LatencyMetric = Field("ttft", description="The Pareto front's latency (p99).")
    max_gpus: int | None = Field(None, ge=1, description="GPU budget (replicas x TP).")
    batch: int | None = Field(
        None, ge=1, description="Trials asked per round (default: tune_defaults.BATCH, whatever the workers)."
    )
    n_startup_trials: int = Field(10, ge=1, description="TPE: random trials before modelling.")
    exhaustive_limit: int = Field(
        64, ge=0, description="Evaluate every combination when the space has at most max(this, n_trials)."
    )
    population_size: int = Field(16, ge=2, description="NSGA-II population.")
    pruning: Literal["rungs", "none"] = Field(
        "none",
        description="rungs: stop trials a GPU bound, a prefix of the trace or the capacity probe proves out "
        "(tuning.rungs).",
    )
    prefix_fraction: float = Field(0.25, gt=0, lt=1, description="The prefix rung's share of the requests.")


class TrialRecord(BaseModel):
    """One trial of the study as stored."""

    number: int
    state: str
    params: dict[str, Any]
    values: list[float] | None
    feasible: bool
    invalid_reason: str | None = None
    outcome: TrialOutcome | None = None


class InvalidRule(BaseModel):
    count: int
    example: str


class Breach(BaseModel):
    """One constraint a trial broke, and by how much."""

    constraint: str = Field(
        description="ttft_p99, tpot_p99, e2e_p99, good_fraction, queue_saturated, kv_thrashing."
    )
    measured: float = Field(
        description="Worst seed's p99 (ms), lowest good fraction, saturated seeds, preemptions/request."
    )
    limit: float = Field(
        description="The cap (ms), the minimum good fraction, 0 saturated seeds, the thrash threshold."
    )
    excess: float = Field(
        description="How far beyond the limit, relative (0.25: 25 % over; seeds: share saturated)."
    )


class InfeasibleTrial(BaseModel):
    """A trial that ran but missed: what it was and which constraints it broke."""

    number: int
    params: dict[str, Any]
    gpus: int
    breaches: list[Breach]
    distance: float = Field(description="The largest relative excess: how far it is from feasible.")


class SeededTrial(BaseModel):
    """A trial evaluated before any sampling: the baseline or a cheapest candidate."""

    number: int | None = Field(description="Its trial (None: it could not be placed in the space).")
    role: str = Field(description="baseline | cheapest | cheapest-large-batch | grid")
    params: dict[str, Any]
    note: str | None = None


class TuneResult(BaseModel):
    """The study after this run: every trial, the best, the Pareto front, why trials were pruned."""

    study_name: str
    storage: str | None
    objective: Objective
    directions: list[Direction]
    constraint_names: list[str]
    target_rate_rps: float
    space: dict[str, str]
    n_trials: int = Field(description="Trials in the study (all runs, all workers).")
    n_complete: int
    n_pruned: int
    n_feasible: int
    invalid_reasons: dict[str, InvalidRule] = Field(description="Why trials were pruned, by rule.")
    best: TrialRecord | None = Field(description="Best feasible trial (see the ranking rule).")
    pareto_front: list[TrialRecord] = Field(description="Feasible non-dominated trials (pareto objective).")
    ranked: list[int] = Field(description="Feasible trial numbers, best first.")
    space_size: int | None = Field(None, description="Valid combinations in the space (None: continuous).")
    exhaustive: bool = Field(False, description="Every combination of the space was evaluated.")
    budget_notes: list[str] = Field(
        default_factory=list, description="What the budget covers, said up front."
    )
    seeded: list[SeededTrial] = Field(
        default_factory=list, description="Evaluated before sampling, in order."
    )
    baseline: TrialRecord | None = Field(None, description="The user's configuration (or vLLM's defaults).")
    reused: int = Field(0, description="Trials that repeated an evaluated combination (not simulated again).")
    infeasible: list[InfeasibleTrial] = Field(
        default_factory=list, description="Trials that ran and missed, nearest first (when none is feasible)."
    )
    nearest_miss: InfeasibleTrial | None = Field(None, description="The trial closest to feasible.")
    choice: Choice | None = Field(
        None,
        description="Fewest changes first: the trial to recommend among those the best does not beat "
        "beyond the step-time model's error (tuning.choice); None: no feasible trial.",
    )
    rungs: RungReport | None = Field(None, description="The search rungs (pruning='rungs'; None: off).")
    trials: list[TrialRecord]

    def shortlist(self, n: int = 3) -> list[int]:
        """The first ``n`` trials to verify: the choice's order (fewest changes among the
        equivalent first), else the ranking."""
        order = self.choice.order if self.choice is not None else self.ranked
        return order[:n]


def directions(objective: Objective) -> list[Direction]:
    return ["maximize"] if objective == "goodput_per_gpu" else ["maximize", "minimize", "minimize"]


#: Optuna 5 reads constraints the trial sets; older releases take a sampler ``constraints_func``.


__all__ = [
    "Breach",
    "Direction",
    "InfeasibleTrial",
    "InvalidRule",
    "SeededTrial",
    "TrialRecord",
    "TuneResult",
    "TuneSettings",
    "directions",
]
