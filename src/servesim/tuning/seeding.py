"""What a study evaluates before sampling: the baseline (the user's configuration, or vllm serve's
defaults) and the cheapest candidates, or the whole grid of a small space; then the study's
summary completed with that plan and the fewest-changes choice (``tuning.choice``)."""

from __future__ import annotations

import json
from typing import Any

import optuna
from pydantic import BaseModel

from servesim.tuning.choice import Candidate, Choice, binding_metric, choose, model_tolerance
from servesim.tuning.deployment import Deployment
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import TrialOutcome, TrialSpec
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import KNOBS, OFF_WHEN_ABSENT, SearchSpace, present_knobs
from servesim.tuning.study import SeededTrial, TrialRecord, TuneResult, TuneSettings


class SeedPlan(BaseModel):
    """What a run evaluates before sampling, and how its budget relates to the space."""

    seeded: list[SeededTrial]
    n_trials: int
    space_size: int | None
    exhaustive: bool
    notes: list[str]


def knob_values(d: Deployment, hardware: Hardware) -> dict[str, Any]:
    """A deployment's searched knobs (TP and memory share at the hardware's when it fixes them)."""
    v = {k: getattr(d, k) for k in KNOBS}
    if "tensor_parallel_size" not in hardware.varies:
        v["tensor_parallel_size"] = hardware.default_tensor_parallel_size
    if "gpu_memory_utilization" not in hardware.varies:
        v["gpu_memory_utilization"] = hardware.default_gpu_memory_utilization
    return present_knobs(v)


def cheapest_candidates(sp: SearchSpace, base: dict[str, Any], mml: int) -> list[tuple[str, dict[str, Any]]]:
    """The baseline's flags on the fewest GPUs the space allows, and the largest batch there
    (the most sequences and tokens per step, chunked prefill on): the first places a cheaper
    answer can be."""
    tp = int(
        min(v for v in (sp.tensor_parallel_size.choices or [sp.tensor_parallel_size.low]) if v is not None)
    )
    reps = int(min(v for v in (sp.replicas.choices or [sp.replicas.low]) if v is not None))
    low = {**base, "tensor_parallel_size": tp, "replicas": reps}
    pp = sp.pipeline_parallel_size
    stages = int(min(v for v in (pp.choices or [pp.low]) if v is not None))
    low = present_knobs({**low, "pipeline_parallel_size": stages})
    seqs = [int(v) for v in (sp.max_num_seqs.choices or [sp.max_num_seqs.high]) if v is not None]
    toks = [
        int(v)
        for v in (sp.max_num_batched_tokens.choices or [sp.max_num_batched_tokens.high])
        if v is not None
    ]
    big = {
        **low,
        "max_num_seqs": max(s for s in seqs if s <= max(toks)),
        "max_num_batched_tokens": max(toks),
        "enable_chunked_prefill": True,
    }
    return [("cheapest", low), ("cheapest-large-batch", big)]


def seed_study(
    study: optuna.Study,
    sp: SearchSpace,
    base: Deployment,
    hardware: Hardware,
    spec: TrialSpec,
    st: TuneSettings,
) -> SeedPlan:
    """Enqueue the baseline and the cheapest candidates (or the whole grid of a small space)."""
    mml = int(spec.fixed["max_model_len"])
    size = sp.size(mml, spec.max_gpus)
    n = st.n_trials
    notes: list[str] = []
    seeded: list[SeededTrial] = []
    exhaustive = size is not None and size <= max(st.exhaustive_limit, n)
    bvals = knob_values(base, hardware)
    if exhaustive and size is not None:
        grid = sp.grid(mml, spec.max_gpus)
        done = {
            study_key(TrialOutcome.model_validate(t.user_attrs["outcome"]).params)
            for t in study.get_trials(deepcopy=False)
            if "outcome" in t.user_attrs
        }
        order = sorted(grid, key=lambda v: not same_knobs(v, bvals))  # the baseline first
        todo = [v for v in order if study_key(v) not in done]
        for values in todo:
            role = "baseline" if same_knobs(values, bvals) else "grid"
            study.enqueue_trial(
                sp.encode(values, max_model_len=mml, max_gpus=spec.max_gpus),
                user_attrs={"seeded_as": role},
                skip_if_exists=True,
            )
        notes.append(
            f"the space holds {size:,} valid combinations: every one is evaluated "
            f"({len(todo)} new trials), so the pick is the space's best on the search seeds"
        )
        seeded.append(SeededTrial(number=None, role="baseline", params=bvals))
        seeded.append(SeededTrial(number=None, role="grid", params={}, note=f"{size} combinations"))
        return SeedPlan(seeded=seeded, n_trials=len(todo), space_size=size, exhaustive=True, notes=notes)
    wanted = [("baseline", bvals), *cheapest_candidates(sp, bvals, mml)]
    seen: list[dict[str, Any]] = []
    for role, values in wanted:
        if values in seen:
            continue
        seen.append(values)
        try:
            params = sp.encode(values, max_model_len=mml, max_gpus=spec.max_gpus)
        except ValueError as exc:
            seeded.append(SeededTrial(number=None, role=role, params=values, note=str(exc)))
            continue
        study.enqueue_trial(params, user_attrs={"seeded_as": role}, skip_if_exists=True)
        seeded.append(SeededTrial(number=None, role=role, params=values))
    placed = sum(s.note is None for s in seeded)
    if size is None:
        notes.append(f"{n} trials over a space with a continuous range; {placed} seeded first")
    else:
        share = n / size if size else 0.0
        notes.append(
            f"{n} trials for {size:,} valid combinations ({share:.1%} of the space): the baseline and "
            f"{placed - 1} cheapest candidate(s) first, then {st.n_startup_trials} random draws before TPE "
            "models the space"
        )
        if n < placed + st.n_startup_trials + 10:
            notes.append(
                f"the budget is too small for the sampler to learn the space (fewer than {placed} seeded + "
                f"{st.n_startup_trials} random + 10 modelled trials): the pick is the best of a few "
                f"probes, not a searched optimum; give --trials {placed + st.n_startup_trials + 10} or more"
            )
    return SeedPlan(seeded=seeded, n_trials=n, space_size=size, exhaustive=False, notes=notes)


def finish_summary(
    res: TuneResult, plan: SeedPlan, reused: int, slo: PercentileSLO | None = None
) -> TuneResult:
    """The study's summary with the seeding plan, the baseline trial, the budget notes and the
    fewest-changes choice."""
    seeded: list[SeededTrial] = []
    baseline: TrialRecord | None = None
    for s in plan.seeded:
        hit = next(
            (t for t in res.trials if s.note is None and s.role != "grid" and same_knobs(t.params, s.params)),
            None,
        )
        seeded.append(s.model_copy(update={"number": hit.number if hit else None}))
        if s.role == "baseline" and hit is not None:
            baseline = hit
    return res.model_copy(
        update={
            "seeded": seeded,
            "baseline": baseline,
            "space_size": plan.space_size,
            "exhaustive": plan.exhaustive,
            "budget_notes": plan.notes,
            "reused": reused,
            "choice": fewest_changes(res, plan, baseline, slo),
        }
    )


def fewest_changes(
    res: TuneResult, plan: SeedPlan, baseline: TrialRecord | None, slo: PercentileSLO | None
) -> Choice | None:
    """``choice.choose`` over the ranked feasible trials, against the seeded baseline."""
    by_number = {r.number: r for r in res.trials}
    caps = slo.caps() if slo is not None else {}
    cands: list[Candidate] = []
    for n in res.ranked:
        o = by_number[n].outcome
        if o is None or o.gpus is None or o.goodput_per_gpu is None or o.capacity_per_gpu is None:
            continue
        spreads = {"ttft": o.ttft_p99_ms, "tpot": o.tpot_p99_ms, "e2e": o.e2e_p99_ms}
        p99 = {m: (s.max if s is not None else 0.0) for m, s in spreads.items()}
        cands.append(
            Candidate(
                number=n,
                params=o.params,
                gpus=o.gpus,
                goodput_per_gpu=o.goodput_per_gpu,
                capacity_per_gpu=o.capacity_per_gpu,
                slo_pressure=o.slo_pressure if caps else None,
                binding=binding_metric(p99, caps),
            )
        )
    base = next((s.params for s in plan.seeded if s.role == "baseline"), None)
    return choose(cands, base, baseline.number if baseline is not None else None, model_tolerance())


def _knobs(params: dict[str, Any]) -> dict[str, Any]:
    """The knobs of ``params``, speculation's k left out when off (0 or absent: the same)."""
    return present_knobs({k: params.get(k) for k in KNOBS if k in params or k not in OFF_WHEN_ABSENT})


def same_knobs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _knobs(a) == _knobs(b)


def study_key(params: dict[str, Any]) -> str:
    return json.dumps(_knobs(params), sort_keys=True, default=str)


__all__ = [
    "SeedPlan",
    "cheapest_candidates",
    "finish_summary",
    "knob_values",
    "same_knobs",
    "seed_study",
    "study_key",
]
