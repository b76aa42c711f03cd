"""Fewest changes, by construction: which deployment ``recommend`` answers with, and why.

A study's best trial is one point of a noisy, modelled landscape; it typically changes many
settings of which one or two do the work. So the recommendation is chosen from a pool built
around the user's configuration (the **baseline**), every member run on the same fresh seeds:

* the **baseline** itself (0 changes);
* the **trials** handed in (the study's shortlist, best first);
* each **single change**: every setting a trial changes, applied alone to the baseline (what the
  "each change alone" rows measure); a change vLLM refuses alone is recorded with its reason;
* when no single change qualifies, **pairs** of the most useful changes (those closest to the
  SLO alone), and each refused change paired with the other settings of its trial.

Singles and pairs run on the first fresh seed first and on the others only if they met the SLO
there (a candidate that misses once can never qualify). **Qualifying** means meeting the SLO on
every fresh seed with a stable queue, with an objective (good requests per second per GPU at
the target load, as a trial is scored: target rate x good fraction / GPUs) within the **band**
of the best qualifying one: the larger of the step-time model's measured error
(``choice.model_tolerance``) and the best's own fresh-seed spread (``(max - min) / mean``). Among
the qualifying, the recommendation is the one with the **fewest changed settings** (replicas and
the gateway timeout count), then the **lowest cost** (GPUs), then the **closest to the baseline**
(sum over changed settings of ``|log2(new / old)|``, 1 for a switch), then a canonical order of
the values (never a trial number). The baseline qualifying means "keep what you have".

Nothing qualifying (nothing meets the SLO) leaves the choice to ``recommend``'s fallbacks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any, Literal

from pydantic import BaseModel, Field

from servesim.tuning.capacity import runs_meet
from servesim.tuning.choice import Tolerance, changed_knobs, model_tolerance
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import RunMetrics
from servesim.tuning.executors import Executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import RunJob, reason_of
from servesim.tuning.noise import relative_spread
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import KNOBS, Knob, SearchSpace

Origin = Literal["baseline", "trial", "single", "pair"]

RULE = (
    "among the candidates that meet the SLO on every fresh seed with a stable queue and whose goodput "
    "per GPU is within the band of the best (the larger of the step-time model's measured error and "
    "the best's fresh-seed spread): the fewest changed settings, then the fewest GPUs, then the "
    "closest to the baseline"
)
#: Most useful single changes combined into pairs (their pairs: at most 6).
PAIR_FROM = 4
#: Most values a knob's range gives the single changes.
MAX_RANGE_VALUES = 16


class Option(BaseModel):
    """One candidate of the pool, as it ran."""

    label: str = Field(description="'baseline', 'trial 1', 'replicas 1 -> 3', ...")
    origin: Origin
    changes: dict[str, Any] = Field(description="Each setting changed from the baseline: its new value.")
    gpus: int
    valid: bool = Field(True, description="vLLM accepts it (false: never run; reason says why).")
    reason: str | None = None
    seeds: list[int] = Field(default_factory=list, description="Fresh seeds it ran on.")
    objective: list[float] = Field(default_factory=list, description="Goodput per GPU on each seed.")
    objective_mean: float | None = None
    slo_pressure: float | None = Field(None, description="Worst seed's max over caps of p99 / cap.")
    meets_slo: bool = Field(False, description="Met the SLO with a stable queue on every seed it ran.")
    complete: bool = Field(False, description="Ran on every fresh seed (else screened out on the first).")
    in_band: bool = False
    distance: float = Field(0.0, description="Closeness to the baseline (lower: closer).")

    @property
    def n_changes(self) -> int:
        return len(self.changes)

    @property
    def qualifies(self) -> bool:
        return self.valid and self.complete and self.meets_slo and self.in_band


class Selection(BaseModel):
    """How the recommended deployment was chosen: the rule, the band, every candidate."""

    rule: str = RULE
    objective: str = Field("goodput_per_gpu", description="Target rate x good fraction / GPUs.")
    objective_best: float | None = Field(description="The best qualifying candidate's mean objective.")
    best: str | None = Field(description="Its label.")
    band: float = Field(description="Relative shortfall from the best still counted as as good.")
    band_from: Literal["model error", "fresh-seed spread"]
    model_error: float = Field(description="The step-time model's measured error of the objective.")
    seed_spread: float = Field(description="The best's (max - min) / mean over the fresh seeds.")
    chosen: str | None = Field(description="The label recommended (None: nothing met the SLO).")
    keep: bool = Field(description="The baseline qualifies: keep what you have.")
    considered: int = Field(description="Candidates in the pool (valid or not).")
    skipped: int = Field(
        0,
        description="Changes not run: more GPUs than the budget, or than any candidate within the "
        "band can have (its goodput per GPU is at most the target rate / GPUs).",
    )
    simulations: int = Field(description="Fresh-seed runs the pool took.")
    options: list[Option]

    def chosen_option(self) -> Option | None:
        return next((o for o in self.options if o.label == self.chosen), None)


def _value_text(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _knobs(d: Deployment) -> dict[str, Any]:
    return {k: getattr(d, k) for k in KNOBS}


def changes_of(d: Deployment, baseline: Deployment) -> dict[str, Any]:
    """The settings ``d`` changes from ``baseline`` (``KNOBS`` order) with their new values."""
    return {k: getattr(d, k) for k in changed_knobs(_knobs(d), _knobs(baseline))}


def distance(changes: dict[str, Any], baseline: Deployment) -> float:
    """How far the changed values are from the baseline's: ``|log2(new / old)|`` per number, 1 per
    switch or setting turned on/off."""
    total = 0.0
    for k, v in changes.items():
        old = getattr(baseline, k)
        num = isinstance(v, int | float) and isinstance(old, int | float)
        if num and not isinstance(v, bool) and not isinstance(old, bool) and v > 0 and old > 0:
            total += abs(math.log2(float(v) / float(old)))
        else:
            total += 1.0
    return round(total, 9)


def _label(changes: dict[str, Any], baseline: Deployment) -> str:
    return ", ".join(
        f"{k} {_value_text(getattr(baseline, k))} -> {_value_text(v)}" for k, v in changes.items()
    )


def choice_key(o: Option) -> tuple[int, int, float, str]:
    """Fewest changes, fewest GPUs, closest, then the values themselves (canonical JSON)."""
    return (o.n_changes, o.gpus, o.distance, json.dumps(o.changes, sort_keys=True, default=str))


class Pool:
    """The candidates and their runs (kept here, not in the document)."""

    def __init__(
        self,
        ex: Executor,
        baseline: Deployment,
        hardware: Hardware,
        rate: float,
        seeds: Sequence[int],
        slo: PercentileSLO | None,
        max_gpus: int | None = None,
    ) -> None:
        self.ex, self.baseline, self.hardware = ex, baseline, hardware
        self.rate, self.seeds, self.slo, self.max_gpus = rate, list(seeds), slo, max_gpus
        self.options: dict[str, Option] = {}
        self.deployments: dict[str, Deployment] = {}
        self.runs: dict[str, list[RunMetrics]] = {}
        self.simulations = 0
        self.skipped = 0

    def add(self, d: Deployment, origin: Origin, label: str | None = None) -> str | None:
        """Add ``d`` (a duplicate of a member: nothing); its label."""
        for key, known in self.deployments.items():
            if known == d:
                return key
        changes = changes_of(d, self.baseline)
        name = label or _label(changes, self.baseline) or "baseline"
        if name in self.options:
            return name
        try:
            resolve_deployment(d, self.hardware)
        except ValueError as exc:
            self.options[name] = Option(
                label=name, origin=origin, changes=changes, gpus=d.gpus, valid=False, reason=reason_of(exc)
            )
            return None
        self.options[name] = Option(
            label=name, origin=origin, changes=changes, gpus=d.gpus, distance=distance(changes, self.baseline)
        )
        self.deployments[name] = d
        return name

    def refused(self, changes: dict[str, Any]) -> bool:
        """vLLM refused the baseline with ``changes`` (not merely left out for its GPUs)."""
        o = self.options.get(_label(changes, self.baseline))
        return o is not None and not o.valid

    def add_changes(self, changes: dict[str, Any], origin: Origin, gpu_bound: float = math.inf) -> str | None:
        """The baseline with ``changes`` applied (refused by vLLM: recorded, None; more GPUs than
        ``gpu_bound`` or the budget: counted in ``skipped``, None)."""
        try:
            d = Deployment.model_validate({**self.baseline.model_dump(), **changes})
            if d.gpus > gpu_bound or (self.max_gpus is not None and d.gpus > self.max_gpus):
                self.skipped += 1
                return None
        except ValueError as exc:
            name = _label(changes, self.baseline)
            if name not in self.options:
                gpus = self.baseline.gpus
                self.options[name] = Option(
                    label=name, origin=origin, changes=changes, gpus=gpus, valid=False, reason=reason_of(exc)
                )
            return None
        return self.add(d, origin)

    def run(self, names: Sequence[str], seeds: Sequence[int]) -> None:
        """Run ``names`` on those of ``seeds`` they have not run on (one batch for the executor)."""
        jobs: list[tuple[str, int]] = [
            (n, s)
            for n in dict.fromkeys(names)
            for s in seeds
            if s not in self.options[n].seeds and n in self.deployments
        ]
        results: list[RunMetrics] = (
            self.ex.map([RunJob(self.deployments[n], self.rate, s) for n, s in jobs]) if jobs else []
        )
        self.simulations += len(jobs)
        for (n, _), r in zip(jobs, results, strict=True):
            self.runs.setdefault(n, []).append(r)
        for n in dict.fromkeys(n for n, _ in jobs):
            self._score(n)

    def _score(self, name: str) -> None:
        runs = sorted(self.runs[name], key=lambda r: self.seeds.index(r.seed))
        self.runs[name] = runs
        o = self.options[name]
        per_gpu = [self.rate * r.good_fraction / o.gpus for r in runs]
        caps = self.slo.caps() if self.slo is not None else {}
        pressure = max(
            (max(r.p99()[m] for r in runs) / c for m, c in caps.items()),
            default=None,
        )
        self.options[name] = o.model_copy(
            update={
                "seeds": [r.seed for r in runs],
                "objective": per_gpu,
                "objective_mean": sum(per_gpu) / len(per_gpu),
                "slo_pressure": pressure,
                "meets_slo": runs_meet(runs, self.slo),
                "complete": len(runs) == len(self.seeds),
            }
        )

    def screen(self, names: Sequence[str]) -> None:
        """``names`` on the first seed, then those that met the SLO there on the rest."""
        self.run(names, self.seeds[:1])
        self.run([n for n in names if n in self.deployments and self.options[n].meets_slo], self.seeds)


def _band(pool: Pool, tol: Tolerance) -> tuple[Option | None, float, float, float]:
    """The best complete option that meets the SLO, the band, the model error, its spread."""
    met = [o for o in pool.options.values() if o.valid and o.complete and o.meets_slo]
    model_error = tol.objective_ratio - 1
    if not met:
        return None, model_error, model_error, 0.0
    best = min(met, key=lambda o: (-(o.objective_mean or 0.0), *choice_key(o)))
    spread = relative_spread(best.objective)
    return best, max(model_error, spread), model_error, spread


def _mark(pool: Pool, tol: Tolerance) -> Option | None:
    """Mark which options are in the band; the best."""
    best, band, _, _ = _band(pool, tol)
    for name, o in pool.options.items():
        ok = (
            best is not None
            and o.objective_mean is not None
            and (best.objective_mean or 0.0) <= o.objective_mean * (1 + band)
        )
        pool.options[name] = o.model_copy(update={"in_band": bool(ok)})
    return best


def _useful(pool: Pool, names: Sequence[str]) -> list[str]:
    """Valid singles, most useful first: met the SLO on the first seed, then the lowest SLO
    pressure there, then the highest objective."""
    ran = [n for n in names if pool.options[n].seeds]

    def key(n: str) -> tuple[bool, float, float, str]:
        o = pool.options[n]
        return (
            not o.meets_slo,
            o.slo_pressure if o.slo_pressure is not None else 0.0,
            -(o.objective_mean or 0),
            n,
        )

    return sorted(ran, key=key)


def _pairs(
    pool: Pool, singles: list[str], refused: list[tuple[dict[str, Any], Deployment]], bound: float
) -> list[str]:
    """Pairs of the most useful singles, and each refused change with each other setting of its
    trial (vLLM takes some changes only together)."""
    out: list[str] = []
    top = _useful(pool, singles)[:PAIR_FROM]
    for a, b in combinations(top, 2):
        ca, cb = pool.options[a].changes, pool.options[b].changes
        if set(ca) & set(cb):
            continue
        name = pool.add_changes({**ca, **cb}, "pair", bound)
        if name is not None and name not in out:
            out.append(name)
    for change, trial in refused:
        for k, v in changes_of(trial, pool.baseline).items():
            if k in change:
                continue
            name = pool.add_changes({**change, k: v}, "pair", bound)
            if name is not None and name not in out:
                out.append(name)
    return out


def _finish(pool: Pool, tol: Tolerance) -> Selection:
    best = _mark(pool, tol)
    _, band, model_error, spread = _band(pool, tol)
    opts = list(pool.options.values())
    qualifying = sorted((o for o in opts if o.qualifies), key=choice_key)
    chosen = qualifying[0] if qualifying else None
    return Selection(
        objective_best=None if best is None else best.objective_mean,
        best=None if best is None else best.label,
        band=band,
        band_from="fresh-seed spread" if spread > model_error else "model error",
        model_error=model_error,
        seed_spread=spread,
        chosen=None if chosen is None else chosen.label,
        keep=chosen is not None and chosen.origin == "baseline",
        considered=len(opts),
        skipped=pool.skipped,
        simulations=pool.simulations,
        options=sorted(opts, key=lambda o: (not o.qualifies, *choice_key(o))),
    )


def knob_choices(space: SearchSpace, name: str) -> list[Any]:
    """The values a knob of ``space`` can take: its choices, the integers of an integer range, the
    steps of a stepped range (at most ``MAX_RANGE_VALUES``; a continuous range gives none)."""
    knob: Knob = getattr(space, name)
    if knob.choices is not None:
        return list(knob.choices)
    if knob.low is None or knob.high is None:
        return []
    if KNOBS[name] in ("int", "optional_int") and not knob.log:
        step = int(knob.step or 1)
        return list(range(int(knob.low), int(knob.high) + 1, step))[:MAX_RANGE_VALUES]
    if knob.step is None:
        return []
    n = round((knob.high - knob.low) / knob.step)
    return [round(knob.low + i * knob.step, 9) for i in range(min(n, MAX_RANGE_VALUES - 1) + 1)]


def single_changes(
    baseline: Deployment, trials: Sequence[Deployment], space: SearchSpace | None
) -> list[tuple[dict[str, Any], Deployment | None]]:
    """Each setting a trial changes, then each other value of each knob of ``space``, as one
    change to the baseline (with the trial it came from, for pairing a refused one)."""
    out: list[tuple[dict[str, Any], Deployment | None]] = []
    seen: set[str] = set()

    def put(change: dict[str, Any], source: Deployment | None) -> None:
        key = json.dumps(change, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append((change, source))

    for t in trials:
        for k, v in changes_of(t, baseline).items():
            put({k: v}, t)
    if space is not None:
        for k in KNOBS:
            for v in knob_choices(space, k):
                if changed_knobs({k: v}, {k: getattr(baseline, k)}):
                    put({k: v}, None)
    return out


def _gpu_bound(pool: Pool, tol: Tolerance) -> float:
    """No candidate with more GPUs can reach the band of the best so far: its objective is at most
    rate / GPUs (a good fraction of 1). Infinite while nothing met the SLO."""
    best, band, _, _ = _band(pool, tol)
    if best is None or not best.objective_mean:
        return math.inf
    return pool.rate * (1 + band) / best.objective_mean


def select(
    ex: Executor,
    baseline: Deployment,
    trials: Sequence[Deployment],
    hardware: Hardware,
    rate: float,
    seeds: Sequence[int],
    slo: PercentileSLO | None,
    tol: Tolerance | None = None,
    *,
    space: SearchSpace | None = None,
    max_gpus: int | None = None,
) -> tuple[Selection, Pool]:
    """The pool around ``baseline`` built, run and chosen from (module docstring). With ``space``
    (the searched space) every value of every knob joins the single changes, so that a change no
    trial happened to make alone is still tried; ``max_gpus`` leaves out singles and pairs beyond
    the budget. The pool keeps every option's deployment and runs (``Pool.deployments``,
    ``Pool.runs``)."""
    tol = tol or model_tolerance()
    pool = Pool(ex, baseline, hardware, rate, seeds, slo, max_gpus)
    base = pool.add(baseline, "baseline", "baseline")
    named = [pool.add(t, "trial", f"trial {i + 1}") for i, t in enumerate(trials)]
    full = [n for n in [base, *named] if n is not None]
    pool.run(full, seeds)
    singles: list[str] = []
    refused: list[tuple[dict[str, Any], Deployment]] = []
    bound = _gpu_bound(pool, tol)
    for change, source in single_changes(baseline, trials, space):
        name = pool.add_changes(change, "single", bound)
        if name is None:
            if source is not None and pool.refused(change):
                refused.append((change, source))
        elif name not in singles and name not in full:
            singles.append(name)
    pool.screen(singles)
    _mark(pool, tol)
    if not any(o.qualifies and o.n_changes <= 1 for o in pool.options.values()):
        pool.screen(_pairs(pool, singles, refused, _gpu_bound(pool, tol)))
    return _finish(pool, tol), pool


__all__ = ["RULE", "Option", "Pool", "Selection", "changes_of", "choice_key", "distance", "select"]
