"""A study's trials summarised: each stored trial as a ``TrialRecord``, the feasible ones ranked
(``rank_key``), the Pareto front, why trials were pruned, and what each infeasible trial broke
(nearest to feasible first)."""

from __future__ import annotations

import math

import optuna
from optuna.trial import FrozenTrial, TrialState

from servesim.errors import InternalError
from servesim.tuning.jobs import Objective, TrialOutcome, constraint_names
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import SearchSpace
from servesim.tuning.study import (
    Breach,
    InfeasibleTrial,
    InvalidRule,
    TrialRecord,
    TuneResult,
    directions,
)


def record_of(t: FrozenTrial) -> TrialRecord:
    raw = t.user_attrs.get("outcome")
    outcome = TrialOutcome.model_validate(raw) if raw is not None else None
    return TrialRecord(
        number=t.number,
        state=t.state.name,
        params=dict(outcome.params) if outcome is not None else dict(t.params),
        values=list(t.values) if t.values is not None else None,
        feasible=bool(outcome is not None and outcome.feasible and t.state == TrialState.COMPLETE),
        invalid_reason=t.user_attrs.get("invalid_reason"),
        outcome=outcome,
    )


def _sig(x: float, digits: int = 3) -> float:
    """``x`` to ``digits`` significant figures (differences below that are noise)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def rank_key(r: TrialRecord) -> tuple[float, float, float, int]:
    """Best first: goodput per GPU at the target (to 0.1 % of the target rate), then capacity per
    GPU (3 significant figures), then the SLO margin at the target (the lowest worst-seed p99 /
    cap), then the earlier trial."""
    o = r.outcome
    if not (o is not None and o.goodput_per_gpu is not None and o.capacity_per_gpu is not None):
        raise InternalError("invariant broken: a ranked trial without goodput or capacity per GPU")
    return (-o.goodput_rank, -_sig(o.capacity_per_gpu), o.slo_pressure, r.number)


def pareto_front(records: list[TrialRecord]) -> list[TrialRecord]:
    """Feasible trials no other feasible trial dominates on (capacity up, latency down, GPUs down)."""
    pts = [(r, r.values) for r in records if r.feasible and r.values is not None and len(r.values) == 3]
    front = []
    for r, v in pts:
        dominated = any(
            w[0] >= v[0] and w[1] <= v[1] and w[2] <= v[2] and (w[0] > v[0] or w[1] < v[1] or w[2] < v[2])
            for _, w in pts
        )
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: r.number)


def summarize_study(
    study: optuna.Study,
    name: str,
    storage: str | None,
    objective: Objective,
    rate: float,
    space: SearchSpace,
    slo: PercentileSLO | None,
) -> TuneResult:
    records = [record_of(t) for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    records.sort(key=lambda r: r.number)
    feasible = [r for r in records if r.feasible]
    front = pareto_front(records) if objective == "pareto" else []
    pool = front if objective == "pareto" else feasible
    ranked = sorted(pool, key=rank_key)
    if objective == "pareto":  # the front first, then every other feasible trial
        rest = sorted((r for r in feasible if r not in front), key=rank_key)
        ranked += rest
    infeasible = [] if feasible else infeasibility(records, slo)
    reasons: dict[str, InvalidRule] = {}
    for r in records:
        if r.outcome is not None and not r.outcome.valid and r.outcome.rung is None:
            rule = r.outcome.rule or "invalid"
            if rule in reasons:
                reasons[rule].count += 1
            else:
                reasons[rule] = InvalidRule(count=1, example=r.outcome.reason or "")
    return TuneResult(
        study_name=name,
        storage=storage,
        objective=objective,
        directions=directions(objective),
        constraint_names=constraint_names(slo),
        target_rate_rps=rate,
        space=space.describe(),
        n_trials=len(records),
        n_complete=sum(r.state == "COMPLETE" for r in records),
        n_pruned=sum(r.state == "PRUNED" for r in records),
        n_feasible=len(feasible),
        invalid_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1].count, kv[0]))),
        best=ranked[0] if ranked else None,
        pareto_front=front,
        ranked=[r.number for r in ranked],
        infeasible=infeasible,
        nearest_miss=infeasible[0] if infeasible else None,
        trials=records,
    )


def breaches(o: TrialOutcome, slo: PercentileSLO | None) -> list[Breach]:
    """The constraints a valid trial broke, with the measured value, the limit and the excess."""
    out: list[Breach] = []
    cons = list(o.constraints)
    i = 0
    for m, cap in (slo.caps() if slo else {}).items():
        spread = getattr(o, f"{m}_p99_ms")
        if cons[i] > 0 and spread is not None:
            out.append(Breach(constraint=f"{m}_p99", measured=spread.max, limit=cap, excess=cons[i]))
        i += 1
    if slo is not None and slo.min_good_fraction is not None:
        if cons[i] > 0 and o.good_fraction is not None:
            lim = slo.min_good_fraction
            out.append(
                Breach(
                    constraint="good_fraction", measured=o.good_fraction.min, limit=lim, excess=cons[i] / lim
                )
            )
        i += 1
    seeds = max(1, o.ttft_p99_ms.n if o.ttft_p99_ms is not None else 1)
    if cons[i] > 0:
        out.append(Breach(constraint="queue_saturated", measured=cons[i], limit=0.0, excess=cons[i] / seeds))
    i += 1
    if cons[i] > 0 and o.preemptions_per_request is not None:
        ppr = o.preemptions_per_request.mean
        lim = ppr - cons[i]
        out.append(
            Breach(
                constraint="kv_thrashing",
                measured=ppr,
                limit=lim,
                excess=cons[i] / lim if lim > 0 else cons[i],
            )
        )
    return out


def infeasibility(records: list[TrialRecord], slo: PercentileSLO | None) -> list[InfeasibleTrial]:
    """Every trial that ran, with the constraints it broke, nearest to feasible first."""
    rows = []
    for r in records:
        o = r.outcome
        if o is None or not o.valid or o.gpus is None:
            continue
        b = breaches(o, slo)
        rows.append(
            InfeasibleTrial(
                number=r.number,
                params=o.params,
                gpus=o.gpus,
                breaches=b,
                distance=max((x.excess for x in b), default=0.0),
            )
        )
    return sorted(rows, key=lambda x: (x.distance, x.gpus, x.number))


__all__ = ["breaches", "infeasibility", "pareto_front", "rank_key", "record_of", "summarize_study"]
