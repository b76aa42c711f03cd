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

**Execution.** The driver keeps the study: it asks ``batch`` trials (``n_jobs`` by default),
samples their parameters, sends them to the executor (local, process pool or Ray), waits for the
whole batch and tells the results in trial order. Because asks and tells happen in the same order
whatever order the jobs finish in, a study is **reproducible for a given seed and batch size,
with any executor**: the same trials, values and best trial (``test_ray_matches_local``).

**Storage.** ``storage="sqlite:///study.db"`` keeps the study in SQLite (Optuna's RDB storage):
running the same command again resumes it (``n_trials`` more), and several processes given the
same storage and study name work on one study at once, each with its own sampler. Those
concurrent workers interleave their trials in an order the operating system decides, so a shared
study is not reproducible trial by trial (its trial count is exact). A resumed study seeds its
sampler with (seed, trials already stored), so resuming is itself deterministic.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError, InternalError, shown
from servesim.io import file_lock
from servesim.tuning.choice import Candidate, Choice, binding_metric, choose, model_tolerance
from servesim.tuning.deployment import Deployment, vllm_default_deployment
from servesim.tuning.evaluate import EvalSettings
from servesim.tuning.executors import Executor, ExecutorKind, make_executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import (
    EvalContext,
    LatencyMetric,
    Objective,
    TrialJob,
    TrialOutcome,
    TrialRuns,
    TrialSpec,
    constraint_names,
    finish_trial,
    plan_trial,
)
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import KNOBS, OFF_WHEN_ABSENT, SearchSpace, present_knobs
from servesim.tuning.workload import Workload

Progress = Callable[[int, int], None]
Direction = Literal["minimize", "maximize"]


class TuneSettings(BaseModel):
    """The study: objective, trials, seeds, sampler."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Objective = "goodput_per_gpu"
    n_trials: int = Field(40, ge=1, description="Trials this run adds to the study.")
    seed: int = Field(0, ge=0, description="Sampler seed.")
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1], min_length=1, description="Replicate seeds per trial."
    )
    probe_factor: float = Field(50.0, gt=1, description="Capacity probe at this x the target rate.")
    latency_metric: LatencyMetric = Field("ttft", description="The Pareto front's latency (p99).")
    max_gpus: int | None = Field(None, ge=1, description="GPU budget (replicas x TP).")
    batch: int | None = Field(None, ge=1, description="Trials asked per round (default: n_jobs).")
    n_startup_trials: int = Field(10, ge=1, description="TPE: random trials before modelling.")
    exhaustive_limit: int = Field(
        64, ge=0, description="Evaluate every combination when the space has at most max(this, n_trials)."
    )
    population_size: int = Field(16, ge=2, description="NSGA-II population.")


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
    trials: list[TrialRecord]

    def shortlist(self, n: int = 3) -> list[int]:
        """The first ``n`` trials to verify: the choice's order (fewest changes among the
        equivalent first), else the ranking."""
        order = self.choice.order if self.choice is not None else self.ranked
        return order[:n]


def directions(objective: Objective) -> list[Direction]:
    return ["maximize"] if objective == "goodput_per_gpu" else ["maximize", "minimize", "minimize"]


#: Optuna 5 reads constraints the trial sets; older releases take a sampler ``constraints_func``.
_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


def _constraints(trial: FrozenTrial) -> list[float]:
    return list(trial.user_attrs.get("constraints", [1.0]))


def _sampler_kwargs() -> dict[str, Any]:
    return {} if _SET_CONSTRAINT else {"constraints_func": _constraints}


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
        "space": space.model_dump(mode="json", exclude=_off_knobs(space)),
        "trial": spec.model_dump(mode="json"),
        "settings": settings.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _off_knobs(space: SearchSpace) -> set[str]:
    """Knobs at their 'off' default, left out of a study's fingerprint: a study that does not
    search speculation keeps the name it had before the knob existed."""
    return {"num_speculative_tokens"} if space.num_speculative_tokens.choices == [0] else set()


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


def rdb_storage(url: str, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for ``url``. Workers that start together on a new SQLite file race to
    create its tables and schema version (one gets "table ... already exists" or a UNIQUE
    constraint failure): such a failure is retried, and the retry finds the schema made. SQLite
    waits up to 60 s for a lock before giving up."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    for attempt in range(attempts):
        try:
            storage = optuna.storages.RDBStorage(url, **kwargs)
            if url.startswith("sqlite") and _sqlite_file(url):
                fast_sqlite(storage.engine)
            return storage
        except Exception as exc:  # sqlalchemy's errors, wrapped or not
            text = str(exc)
            racing = ("already exists", "locked", "UNIQUE constraint failed", "IntegrityError")
            if attempt == attempts - 1 or not any(r in text for r in racing):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def fast_sqlite(engine: Any) -> None:
    """Write-ahead logging with ``synchronous=NORMAL`` on every connection to a SQLite study: a
    commit appends to the log without waiting for the disk to flush (an Optuna trial is some 20
    commits: its parameters, attributes, constraints and state, one each), readers and the
    writer no longer block each other, and the file stays consistent through a crash (the last
    commits may be lost, never half-written). Not for a database in memory (``_sqlite_file``)."""
    from sqlalchemy import event

    def pragmas(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    event.listen(engine, "connect", pragmas)
    engine.dispose()  # the connections made while creating the schema reconnect with them


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (None: in memory)."""
    from sqlalchemy.engine import make_url

    db = make_url(url).database
    return db if db and db != ":memory:" else None


def seeding_lock(storage: str | None) -> AbstractContextManager[None]:
    """Workers sharing a SQLite study take turns to open and seed it. Optuna's
    ``enqueue_trial(skip_if_exists=True)`` reads then writes, and SQLite has no row locks: two
    workers seeding together each enqueued the baseline, and the duplicate was left waiting for
    ever. A server database (PostgreSQL, MySQL) is not locked here."""
    if storage is None or not storage.startswith("sqlite"):
        return nullcontext()
    db = _sqlite_file(storage)
    return nullcontext() if db is None else file_lock(f"{db}.servesim-lock")


def open_study(
    storage: str | None,
    study_name: str,
    objective: Objective,
    seed: int,
    settings: TuneSettings,
    fingerprint: str,
) -> optuna.Study:
    """Create or load the study, with a sampler seeded by (seed, trials already stored)."""
    rdb: optuna.storages.BaseStorage | None = None
    existing = 0
    if storage is not None:
        rdb = rdb_storage(storage)
        probe = optuna.create_study(
            storage=rdb, study_name=study_name, directions=directions(objective), load_if_exists=True
        )
        if list(probe.directions) != [_direction(d) for d in directions(objective)]:
            raise InputError(
                f"study {shown(study_name)} in {storage} has other objectives; use another --study-name"
            )
        stored = probe.user_attrs.get("servesim_fingerprint")
        if stored is None:
            probe.set_user_attr("servesim_fingerprint", fingerprint)
        elif stored != fingerprint:
            raise InputError(
                f"study {shown(study_name)} in {storage} was created for another workload, SLO, space or "
                "objective; use another --study-name (or the same settings) to resume it"
            )
        existing = len(probe.get_trials(deepcopy=False))
    sampler_seed = int(np.random.SeedSequence([seed, existing]).generate_state(1)[0])
    sampler: optuna.samplers.BaseSampler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if objective == "goodput_per_gpu":
            sampler = optuna.samplers.TPESampler(
                seed=sampler_seed, n_startup_trials=settings.n_startup_trials, **_sampler_kwargs()
            )
        else:
            sampler = optuna.samplers.NSGAIISampler(
                seed=sampler_seed, population_size=settings.population_size, **_sampler_kwargs()
            )
    if rdb is None:
        study = optuna.create_study(study_name=study_name, directions=directions(objective), sampler=sampler)
        study.set_user_attr("servesim_fingerprint", fingerprint)
        return study
    return optuna.load_study(study_name=study_name, storage=rdb, sampler=sampler)


def _direction(name: Direction) -> optuna.study.StudyDirection:
    return (
        optuna.study.StudyDirection.MAXIMIZE if name == "maximize" else optuna.study.StudyDirection.MINIMIZE
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
    ``EvalContext`` (kept open, e.g. to reuse it for ``recommend``). ``storage`` is an Optuna RDB
    URL (``sqlite:///study.db``) or None (in memory); ``study_name`` defaults to a name derived
    from everything that defines the study, so the same command resumes the same study.

    ``baseline`` is the user's current deployment (default: ``vllm serve``'s defaults on this
    hardware): the space is widened to hold it, and it is the study's first trial, followed by the
    cheapest candidates (fewest GPUs), before the sampler draws anything. A space of at most
    ``max(exhaustive_limit, n_trials)`` combinations is evaluated exhaustively instead.
    """
    st = settings or TuneSettings()
    ev = eval_settings or EvalSettings()
    spec = trial_spec(workload, st, target_rate=target_rate, max_model_len=max_model_len, fixed=fixed)
    mml = int(spec.fixed["max_model_len"])
    base = baseline or vllm_default_deployment(hardware, mml, **(fixed or {}))
    sp = (space or SearchSpace()).effective(hardware).including(knob_values(base, hardware))
    check_speculation(sp, fixed, base)
    fp = study_fingerprint(workload, hardware, slo, sp, spec, ev)
    name = study_name or f"servesim-tune-{fp}"
    ctx = EvalContext(workload, hardware, slo, ev)
    with seeding_lock(storage):
        study = open_study(storage, name, st.objective, st.seed, st, fp)
        plan = seed_study(study, sp, base, hardware, spec, st)
    if isinstance(executor, str):
        with make_executor(executor, ctx, n_jobs=n_jobs, address=address) as ex:
            reused = _run_trials(study, ex, ctx, sp, spec, st, st.batch or n_jobs, progress, plan.n_trials)
    else:
        check_executor(executor, ctx)
        reused = _run_trials(study, executor, ctx, sp, spec, st, st.batch or n_jobs, progress, plan.n_trials)
    res = summarize_study(study, name, storage, st.objective, spec.target_rate, sp, slo)
    return finish_summary(res, plan, reused, slo)


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
            _key(TrialOutcome.model_validate(t.user_attrs["outcome"]).params)
            for t in study.get_trials(deepcopy=False)
            if "outcome" in t.user_attrs
        }
        order = sorted(grid, key=lambda v: not _same(v, bvals))  # the baseline first
        todo = [v for v in order if _key(v) not in done]
        for values in todo:
            role = "baseline" if _same(values, bvals) else "grid"
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
            (t for t in res.trials if s.note is None and s.role != "grid" and _same(t.params, s.params)), None
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


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _knobs(a) == _knobs(b)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(_knobs(params), sort_keys=True, default=str)


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
            known.setdefault(_key(o.params), o)
    done = reused = 0
    if progress is not None:
        progress(0, n_trials)
    while done < n_trials:
        k = min(batch, n_trials - done)
        asked = [study.ask() for _ in range(k)]
        params = [sp.suggest(t, max_model_len=mml, max_gpus=spec.max_gpus) for t in asked]
        fresh: dict[str, TrialJob] = {}
        for t, p in zip(asked, params, strict=True):
            key = _key(p)
            if key not in known and key not in fresh:
                fresh[key] = TrialJob(t.number, p, spec)
        known.update(zip(fresh.keys(), evaluate_batch(ex, ctx, list(fresh.values())), strict=True))
        outcomes = []
        for t, p in zip(asked, params, strict=True):
            o = known[_key(p)]
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


def evaluate_batch(ex: Executor, ctx: EvalContext, trials: list[TrialJob]) -> list[TrialOutcome]:
    """The trials' outcomes, in order. Each valid trial's runs (its seeds and its probe) go to the
    executor as separate jobs, all the batch's in one ``map``: the workers share them out, instead
    of each taking a whole trial and the batch waiting for the slowest. The outcomes are those
    ``evaluate_trial`` gives (``finish_trial`` of the same runs; jobs are deterministic)."""
    plans = [plan_trial(ctx, t) for t in trials]
    runs = [j for p in plans if isinstance(p, TrialRuns) for j in p.jobs]
    results = iter(ex.map(runs) if runs else [])
    out: list[TrialOutcome] = []
    for t, p in zip(trials, plans, strict=True):
        if isinstance(p, TrialOutcome):
            out.append(p)
        else:
            out.append(finish_trial(ctx, t, p, [next(results) for _ in p.jobs]))
    return out


def _tell(study: optuna.Study, trial: optuna.Trial, out: TrialOutcome, cnames: list[str]) -> None:
    """Record one trial's outcome in the study (values, or PRUNED with the reason)."""
    trial.set_user_attr("outcome", out.model_dump(mode="json"))
    trial.set_user_attr("constraints", out.constraints)
    if _SET_CONSTRAINT:
        for cname, value in zip(cnames, out.constraints, strict=True):
            trial.set_constraint(cname, value)
    if out.valid:
        if out.values is None:
            raise InternalError("invariant broken: out.values is None")
        study.tell(trial, out.values, skip_if_finished=True)
    else:
        trial.set_user_attr("invalid_reason", out.reason)
        study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)


def _record(t: FrozenTrial) -> TrialRecord:
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
    records = [_record(t) for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
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
        if r.outcome is not None and not r.outcome.valid:
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
