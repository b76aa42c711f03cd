"""``tune``: an Optuna study over vLLM scheduler flags, parallelism and replicas.

**Objectives.** ``goodput_per_gpu`` (one objective, TPE): maximise good requests per second per
GPU at the target load, subject to the SLOs, a stable queue and no KV thrashing there (Optuna
constraints, ``jobs.evaluate_trial``). Feasible trials are ranked (``rank_key``) by goodput per
GPU (to 0.1 % of the target rate: feasible trials of one GPU count differ only in noise there,
so in effect the fewest GPUs that meet the SLOs win), then by capacity per GPU (the overload
probe: the most throughput headroom), then by the SLO margin at the target (the lowest worst-seed
p99 / cap), then by trial number; the first is the study's best trial. ``pareto``
(NSGA-II): capacity (req/s) up, the chosen p99 latency at the target load down, GPUs down, under
the same constraints; the recommendation is the front's member with the best goodput per GPU.

**Invalid combinations** (``max_num_batched_tokens < max_num_seqs``, chunked prefill off with a
budget below ``max_model_len``, weights that do not fit, TP that does not divide the heads, a GPU
budget exceeded) are told to Optuna as PRUNED, with ``invalid_reason`` as a trial attribute.

**Execution.** The driver keeps the study: it asks ``batch`` trials (``tune_defaults.BATCH`` by
default, never the number of workers: ``--jobs`` changes the speed, not the answer), samples their
parameters, sends them to the executor (local, process pool or Ray), waits for the whole batch
and tells the results in trial order. Because asks and tells happen in the same order whatever
order the jobs finish in, a study is **reproducible for a given seed and batch size, with any
executor and any number of jobs**: the same trials, values and best trial
(``test_ray_matches_local``).

**Storage.** ``storage="study.journal"`` keeps the study in a journal file (Optuna's
``JournalStorage``; ``servesim.tuning.storage`` says why it is the default),
``"sqlite:///study.db"`` in SQLite (any Optuna RDB URL): running the same command again resumes
it (``n_trials`` more), and several processes given the same storage and study name work on one
study at once, each with its own sampler. Those concurrent workers interleave their trials in an
order the operating system decides, so a shared study is not reproducible trial by trial (its
trial count is exact). A resumed study seeds its sampler with (seed, trials already stored), so
resuming is itself deterministic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import TrialState

from servesim import tune_defaults
from servesim.errors import InputError, InternalError
from servesim.tuning.climb import evaluate_batch, evaluate_rungs
from servesim.tuning.deployment import Deployment, vllm_default_deployment
from servesim.tuning.evaluate import EvalSettings
from servesim.tuning.executors import Executor, ExecutorKind, make_executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import (
    EvalContext,
    TrialJob,
    TrialOutcome,
    TrialSpec,
    constraint_names,
)
from servesim.tuning.ranking import (
    breaches,
    infeasibility,
    pareto_front,
    rank_key,
    record_of,
    summarize_study,
)
from servesim.tuning.rungs import RungReport, best_rank, prefix_pays, rung_report
from servesim.tuning.seeding import (
    SeedPlan,
    cheapest_candidates,
    finish_summary,
    knob_values,
    seed_study,
    study_key,
)
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import SearchSpace
from servesim.tuning.storage import _SET_CONSTRAINT, fast_sqlite, open_study, rdb_storage, seeding_lock
from servesim.tuning.study import (
    Breach,
    Direction,
    InfeasibleTrial,
    InvalidRule,
    SeededTrial,
    TrialRecord,
    TuneResult,
    TuneSettings,
    directions,
)
from servesim.tuning.workload import Workload

Progress = Callable[[int, int], None]


def study_fingerprint(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    space: SearchSpace,
    spec: TrialSpec,
    settings: EvalSettings,
) -> str:
    """What a study is about; a resumed study must match (else its trials mean something else)."""
    data = {
        "workload": workload.describe(),
        "hardware": hardware.describe(),
        "slo": slo.model_dump(mode="json") if slo else None,
        "space": space.model_dump(mode="json", exclude=set(space.knobs_off())),
        "trial": spec.model_dump(mode="json"),
        "settings": settings.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_speculation(space: SearchSpace, fixed: dict[str, Any] | None, base: Deployment) -> None:
    """A space that searches ``num_speculative_tokens`` > 0 needs the method and acceptance
    (``speculative_config`` among the fixed fields, or the baseline's): say so up front."""
    knob = space.num_speculative_tokens
    values = knob.choices if knob.choices is not None else [knob.low, knob.high]
    if (
        any(v for v in values)
        and (fixed or {}).get("speculative_config") is None
        and base.speculative_config is None
    ):
        raise InputError(
            "--space num_speculative_tokens searches speculative decoding: give its method and acceptance "
            'with --speculative-config (e.g. \'{"method": "eagle3", "num_speculative_tokens": 3}\')'
        )


def trial_spec(
    workload: Workload,
    settings: TuneSettings,
    *,
    target_rate: float | None = None,
    max_model_len: int | None = None,
    fixed: dict[str, Any] | None = None,
) -> TrialSpec:
    """How the study's trials are evaluated (target rate, seeds, the fields that are not searched)."""
    rate = target_rate or workload.base_rate
    if rate is None:
        raise InputError(f"{workload.name} has no arrival rate: give a target rate")
    return TrialSpec(
        objective=settings.objective,
        target_rate=rate,
        seeds=settings.seeds,
        probe_factor=settings.probe_factor,
        latency_metric=settings.latency_metric,
        max_gpus=settings.max_gpus,
        fixed={"max_model_len": max_model_len or workload.default_max_model_len(), **(fixed or {})},
    )


def check_executor(ex: Executor, ctx: EvalContext) -> None:
    """An executor made for another context would simulate something else: refuse it."""
    theirs = getattr(ex, "ctx", None)
    if not isinstance(theirs, EvalContext) or not (
        theirs.workload is ctx.workload
        and theirs.hardware is ctx.hardware
        and theirs.slo == ctx.slo
        and theirs.settings == ctx.settings
    ):
        raise InputError("the executor was made for another workload, hardware, SLO or settings")


@dataclass(frozen=True)
class StudyDefinition:
    """What defines a study: how trials are evaluated, the baseline, the space (widened to hold
    the baseline) and the fingerprint its derived name comes from."""

    spec: TrialSpec
    base: Deployment
    space: SearchSpace
    fingerprint: str

    @property
    def name(self) -> str:
        """The study's derived name: the same settings resume the same study."""
        return f"servesim-tune-{self.fingerprint}"


def define_study(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None = None,
    *,
    target_rate: float | None = None,
    space: SearchSpace | None = None,
    settings: TuneSettings | None = None,
    eval_settings: EvalSettings | None = None,
    max_model_len: int | None = None,
    fixed: dict[str, Any] | None = None,
    baseline: Deployment | None = None,
) -> StudyDefinition:
    """The study ``tune`` runs for these arguments (see ``tune``), defined before any trial: an
    interface knows the study's name (to follow its trials) before it starts."""
    st = settings or TuneSettings()
    ev = eval_settings or EvalSettings()
    spec = trial_spec(workload, st, target_rate=target_rate, max_model_len=max_model_len, fixed=fixed)
    mml = int(spec.fixed["max_model_len"])
    base = baseline or vllm_default_deployment(hardware, mml, **(fixed or {}))
    sp = (space or SearchSpace()).effective(hardware).including(knob_values(base, hardware))
    check_speculation(sp, fixed, base)
    return StudyDefinition(spec, base, sp, study_fingerprint(workload, hardware, slo, sp, spec, ev))


def derived_study_name(
    workload: Workload, hardware: Hardware, slo: PercentileSLO | None = None, **kwargs: Any
) -> str:
    """The name ``tune`` gives a study it is not given a name for (``define_study``'s)."""
    return define_study(workload, hardware, slo, **kwargs).name


def tune(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None = None,
    *,
    target_rate: float | None = None,
    space: SearchSpace | None = None,
    settings: TuneSettings | None = None,
    eval_settings: EvalSettings | None = None,
    max_model_len: int | None = None,
    fixed: dict[str, Any] | None = None,
    executor: ExecutorKind | Executor = "process",
    n_jobs: int = 2,
    address: str | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    progress: Progress | None = None,
    baseline: Deployment | None = None,
) -> TuneResult:
    """Run ``settings.n_trials`` more trials of the study and return the whole study's result.

    ``target_rate`` defaults to the workload's own rate; ``max_model_len`` to its longest request
    + 1; ``fixed`` sets deployment fields that are not searched (``policy``...). ``executor`` is a
    kind (made and closed here) or an executor made with ``make_executor`` for the same
    ``EvalContext`` (kept open, e.g. to reuse it for ``recommend``). ``storage`` is a journal file's
    path, an Optuna RDB URL (``sqlite:///study.db``) or None (in memory); ``study_name`` defaults
    to a name derived from everything that defines the study, so the same command resumes the same study.

    ``baseline`` is the user's current deployment (default: ``vllm serve``'s defaults on this
    hardware): the space is widened to hold it, and it is the study's first trial, followed by the
    cheapest candidates (fewest GPUs), before the sampler draws anything. A space of at most
    ``max(exhaustive_limit, n_trials)`` combinations is evaluated exhaustively instead.
    """
    st = settings or TuneSettings()
    ev = eval_settings or EvalSettings()
    study_def = define_study(
        workload,
        hardware,
        slo,
        target_rate=target_rate,
        space=space,
        settings=st,
        eval_settings=ev,
        max_model_len=max_model_len,
        fixed=fixed,
        baseline=baseline,
    )
    spec, sp, base, fp = study_def.spec, study_def.space, study_def.base, study_def.fingerprint
    name = study_name or study_def.name
    ctx = EvalContext(workload, hardware, slo, ev)
    with seeding_lock(storage):
        study = open_study(storage, name, st.objective, st.seed, st, fp)
        plan = seed_study(study, sp, base, hardware, spec, st)
    if isinstance(executor, str):
        with make_executor(executor, ctx, n_jobs=n_jobs, address=address) as ex:
            reused = _run_trials(
                study, ex, ctx, sp, spec, st, st.batch or tune_defaults.BATCH, progress, plan.n_trials
            )
    else:
        check_executor(executor, ctx)
        reused = _run_trials(
            study, executor, ctx, sp, spec, st, st.batch or tune_defaults.BATCH, progress, plan.n_trials
        )
    res = summarize_study(study, name, storage, st.objective, spec.target_rate, sp, slo)
    if st.pruning == "rungs":
        res.rungs = _rungs_of(res, workload, spec, st)
    return finish_summary(res, plan, reused, slo)


def _rungs_of(res: TuneResult, workload: Workload, spec: TrialSpec, st: TuneSettings) -> RungReport:
    outcomes = [r.outcome for r in res.trials if r.outcome is not None]
    return rung_report(
        outcomes,
        fraction=st.prefix_fraction,
        n_full=workload.num_requests,
        runs_per_trial=len(spec.seeds) + 1,
    )


def _run_trials(
    study: optuna.Study,
    ex: Executor,
    ctx: EvalContext,
    sp: SearchSpace,
    spec: TrialSpec,
    st: TuneSettings,
    batch: int,
    progress: Progress | None,
    n_trials: int,
) -> int:
    """Ask a batch, evaluate it, tell it in trial order; until ``n_trials`` are done. A
    combination already evaluated in this study is not simulated again: its outcome is told
    once more (returns how many were reused)."""
    cnames = constraint_names(ctx.slo)
    mml = int(spec.fixed["max_model_len"])
    known: dict[str, TrialOutcome] = {}
    for ft in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        raw = ft.user_attrs.get("outcome")
        if raw is not None:
            o = TrialOutcome.model_validate(raw)
            if o.valid or o.rung is None or st.pruning == "rungs":  # a stop counts only with rungs on
                known.setdefault(study_key(o.params), o)
    done = reused = 0
    if progress is not None:
        progress(0, n_trials)
    while done < n_trials:
        k = min(batch, n_trials - done)
        asked = [study.ask() for _ in range(k)]
        params = [sp.suggest(t, max_model_len=mml, max_gpus=spec.max_gpus) for t in asked]
        fresh: dict[str, TrialJob] = {}
        for t, p in zip(asked, params, strict=True):
            key = study_key(p)
            if key not in known and key not in fresh:
                fresh[key] = TrialJob(t.number, p, spec)
        jobs = list(fresh.values())
        if st.pruning == "rungs":
            told = list(known.values()) if spec.objective == "goodput_per_gpu" else []
            exempt = {t.number for t in asked if t.user_attrs.get("seeded_as") == "baseline"}
            pays = prefix_pays(list(known.values()), st.prefix_fraction, len(spec.seeds) + 1)
            evaluated = evaluate_rungs(
                ex,
                ctx,
                jobs,
                bar=best_rank(told),
                exempt=exempt,
                fraction=st.prefix_fraction,
                prefix=pays,
                told=told,
            )
        else:
            evaluated = evaluate_batch(ex, ctx, jobs)
        known.update(zip(fresh.keys(), evaluated, strict=True))
        outcomes = []
        for t, p in zip(asked, params, strict=True):
            o = known[study_key(p)]
            if o.number != t.number:
                reused += 1
                o = o.model_copy(update={"number": t.number})
            outcomes.append(o)
        for trial, out in zip(asked, outcomes, strict=True):
            try:
                _tell(study, trial, out, cnames)
            except optuna.exceptions.UpdateFinishedTrialError:
                # Another worker sharing the study took the same enqueued trial (SQLite has no
                # row locks) and finished it first; its outcome is this one (same params, seeds).
                continue
        done += k
        if progress is not None:
            progress(done, n_trials)
    return reused


def _tell(study: optuna.Study, trial: optuna.Trial, out: TrialOutcome, cnames: list[str]) -> None:
    """Record one trial's outcome in the study (values, or PRUNED with the reason)."""
    trial.set_user_attr("outcome", out.model_dump(mode="json"))
    trial.set_user_attr("constraints", out.constraints)
    if _SET_CONSTRAINT:
        _set_constraints(trial, cnames, out.constraints)
    if out.valid:
        if out.values is None:
            raise InternalError("invariant broken: out.values is None")
        study.tell(trial, out.values, skip_if_finished=True)
    else:
        trial.set_user_attr("invalid_reason", out.reason)
        study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)


def _set_constraints(trial: optuna.Trial, cnames: list[str], values: list[float]) -> None:
    """The trial's constraints, each written once. ``Trial.set_constraint`` first reads the
    trial's system attributes back (a whole-trial query on an RDB storage) to refuse a second
    value; a trial told once never has one, and those reads were a quarter of the driver's time
    on a SQLite study. The attributes written are ``set_constraint``'s own (``constraints:NAME``);
    an Optuna without the trial's id keeps the public call."""
    trial_id = getattr(trial, "_trial_id", None)
    if not isinstance(trial_id, int):
        for cname, value in zip(cnames, values, strict=True):
            trial.set_constraint(cname, value)
        return
    for cname, value in zip(cnames, values, strict=True):
        trial.storage.set_trial_system_attr(trial_id, f"{_CONSTRAINTS_KEY}:{cname}", float(value))


__all__ = [
    "Breach",
    "Direction",
    "InfeasibleTrial",
    "InvalidRule",
    "RungReport",
    "SeedPlan",
    "SeededTrial",
    "StudyDefinition",
    "TrialRecord",
    "TuneResult",
    "TuneSettings",
    "breaches",
    "cheapest_candidates",
    "check_executor",
    "check_speculation",
    "define_study",
    "derived_study_name",
    "directions",
    "evaluate_batch",
    "evaluate_rungs",
    "fast_sqlite",
    "finish_summary",
    "infeasibility",
    "knob_values",
    "open_study",
    "pareto_front",
    "rank_key",
    "rdb_storage",
    "record_of",
    "seed_study",
    "seeding_lock",
    "study_fingerprint",
    "summarize_study",
    "trial_spec",
    "tune",
]
