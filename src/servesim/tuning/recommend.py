"""``SchedulerRecommendation``: what to run, what it will do, why, and how sure we are.

``recommend`` takes candidate deployments (best first, e.g. from ``tune``) and:

1. **chooses** on fresh seeds (``FRESH_SEED_BASE`` + 0, 1, 2: traffic the search never saw) at
   the target rate. With a baseline: the fewest changed settings among the candidates, the
   baseline, each candidate's changes alone and pairs of them that meet the SLO within the band
   of the best objective (``selection``: the rule, the band and every candidate are recorded).
   Without one (or when nothing meets the SLO): the first candidate that meets the SLO on every
   fresh seed with a stable queue (at most ``max_candidates``; if none does, the first is
   reported with ``meets_slo: false``). The predicted numbers are the chosen one's runs' means,
   with min/max/std: the recommendation claims only what these runs show;
2. searches its **SLO knee** and **unstable rate** (``saturation.find_saturation``, the one
   capacity search ``servesim saturate`` runs, on the same fresh seeds) for the headroom at the
   target load;
3. runs **ablations** (one fresh seed each: chunked prefill flipped, the long-prefill cap removed,
   half the sequences, half the token budget, prefix caching flipped, one replica fewer) and
   writes the rationale from the measured differences, not from rules of thumb;
4. renders the ``vllm serve`` command and the ``--config`` YAML of one replica.

Nothing is applied anywhere: the CLI's ``--out-dir`` only writes files to a folder for a human
to review (``requires_human_review`` is always true).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer, model_validator

from servesim import tune_defaults
from servesim.errors import InputError, InternalError
from servesim.tuning.capacity import CapacityAnswer, find_capacity, runs_meet
from servesim.tuning.changes import FlagChange, measure_changes
from servesim.tuning.choice import Tolerance, model_tolerance
from servesim.tuning.deploy import DeployPlan, deploy_plan
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import EvalSettings, LatencySpread, RunMetrics, Status
from servesim.tuning.executors import Executor, ExecutorKind, make_executor
from servesim.tuning.explain import (
    Ablation,
    RunSummary,
    beats,
    build_reasons,
    comparison_reason,
    run_ablations,
)
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import EvalContext, RunJob
from servesim.tuning.reasons import Reason
from servesim.tuning.saturation import SaturationReport, SaturationSettings, find_saturation
from servesim.tuning.selection import Pool, Selection, select
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import SearchSpace
from servesim.tuning.stats import Spread
from servesim.tuning.uncertainty import ErrorBars, error_bars
from servesim.tuning.workload import Workload, fresh_seeds

Progress = Callable[[int, int], None]


class VerificationRun(BaseModel):
    """One fresh-seed run of the recommended deployment at the target rate."""

    seed: int
    ttft_p99_ms: float
    tpot_p99_ms: float
    e2e_p99_ms: float
    good_fraction: float
    preemptions_per_request: float
    kv_exhaustion_events: int
    status: Status
    slo_violations: list[str]


class SchedulerRecommendation(BaseModel):
    """Recommended vLLM flags and replicas, with verified predictions and the reasons."""

    requires_human_review: Literal[True] = Field(
        True, description="Always true: a simulation's advice, to be reviewed before anything runs."
    )
    model: str = Field(description="The model argument of vllm serve.")
    hardware: dict[str, Any]
    deployment: Deployment = Field(description="The recommended flags, TP, replicas, queue timeout.")
    replicas: int
    gpus: int = Field(description="replicas x tensor_parallel_size x pipeline_parallel_size.")
    num_gpu_blocks: int = Field(description="KV blocks per replica the simulation used.")
    router: str = Field(description="How requests were spread over the replicas.")
    target_rate_rps: float
    slo: PercentileSLO | None
    meets_slo: bool | None = Field(description="Every fresh-seed run met the SLO (None: no SLO given).")
    status: Status = Field(description="At the target rate, over the fresh seeds.")
    predicted_ttft_ms: LatencySpread
    predicted_tpot_ms: LatencySpread
    predicted_e2e_ms: LatencySpread
    predicted_throughput_rps: Spread
    predicted_output_tokens_per_s: Spread
    predicted_good_fraction: Spread
    verification_seeds: list[int]
    verification: list[VerificationRun]
    saturation_rps: float | None = Field(description="Lowest rate at which the queue is unstable.")
    goodput_knee_rps: float | None = Field(description="Highest rate meeting the SLO on every fresh seed.")
    headroom: float | None = Field(description="saturation_rps / target_rate - 1.")
    knee_headroom: float | None = Field(description="goodput_knee_rps / target_rate - 1.")
    verdict: Literal["change", "keep", "add_capacity"] = Field(
        description="change: run these flags; keep: nothing beat the baseline, keep it; add_capacity: "
        "no scheduler setting meets the SLO on the GPUs searched, these replicas do."
    )
    baseline: RunSummary | None = Field(None, description="The user's configuration on the same fresh seeds.")
    best_alternative: RunSummary | None = Field(
        None, description="With verdict keep: the best candidate that did not beat the baseline."
    )
    capacity: CapacityAnswer | None = Field(None, description="With verdict add_capacity: the search.")
    selection: Selection | None = Field(
        None,
        description="How the deployment was chosen: the fewest-changes rule, the band it used, the best "
        "objective and every candidate considered (None: no baseline to count changes from, or a "
        "document written before the rule).",
    )
    error_bars: ErrorBars | None = Field(
        None,
        description="Predicted p99s with the step-time model's measured sim2real error: 80 % intervals, "
        "P(SLO holds), the headroom for 90 % (None: a user-given step-time model, error unknown).",
    )
    reasons: list[Reason] = Field(description="The measured statements behind it (views.tuning words them).")
    ablations: list[Ablation]
    tolerance: Tolerance = Field(
        default_factory=model_tolerance,
        description="The step-time model's measured error: a change must beat the baseline by more.",
    )
    changes: list[FlagChange] = Field(
        default_factory=list,
        description="Each knob changed from the baseline, measured alone (baseline + it, first fresh seed).",
    )
    deploy: DeployPlan | None = Field(
        None, description="N replicas x the command, router, gateway timeout, cost, headroom to the knee."
    )
    vllm_serve_command: str = Field(description="One replica; run `replicas` of them behind the router.")
    config_yaml: str = Field(description="The same flags for vllm serve --config.")
    source: dict[str, Any] = Field(default_factory=dict, description="Where the candidate came from.")
    warnings: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _drop_absent_selection(self, handler: Any) -> Any:
        """A recommendation made without the fewest-changes rule (no baseline) keeps its document
        byte for byte (no ``selection`` key)."""
        d = handler(self)
        if isinstance(d, dict) and d.get("selection", 0) is None:
            del d["selection"]
        return d

    @model_validator(mode="after")
    def _consistent(self) -> SchedulerRecommendation:
        d = self.deployment
        if self.replicas != d.replicas or self.gpus != d.gpus:
            raise InputError(
                f"replicas ({self.replicas}) and gpus ({self.gpus}) must equal the deployment's "
                f"({d.replicas}, {d.gpus} = replicas x TP x PP)"
            )
        if (self.meets_slo is None) != (self.slo is None):
            raise InputError("meets_slo is given exactly when an SLO is")
        if self.meets_slo:
            bad = [v for r in self.verification for v in r.slo_violations]
            if bad or not self.verification:
                raise InputError(
                    f"meets_slo claimed but re-verification shows: {'; '.join(bad) or 'no runs'}"
                )
            if self.slo is None:
                raise InternalError("invariant broken: self.slo is None")
            worst = {
                "ttft": self.predicted_ttft_ms.p99.max,
                "tpot": self.predicted_tpot_ms.p99.max,
                "e2e": self.predicted_e2e_ms.p99.max,
            }
            for m, cap in self.slo.caps().items():
                if worst[m] > cap:
                    raise InputError(f"meets_slo claimed but predicted {m} p99 {worst[m]:.1f} ms > {cap} ms")
        return self


def _resolve_executor(
    executor: ExecutorKind | Executor, ctx: EvalContext, n_jobs: int, address: str | None
) -> tuple[Executor, bool]:
    if isinstance(executor, str):
        return make_executor(executor, ctx, n_jobs=n_jobs, address=address), True
    return executor, False


def verify(ex: Executor, deployment: Deployment, rate: float, seeds: Sequence[int]) -> list[RunMetrics]:
    """The deployment at ``rate`` on each seed."""
    runs: list[RunMetrics] = ex.map([RunJob(deployment, rate, s) for s in seeds])
    return runs


_verified = runs_meet


@dataclass
class _Pick:
    """What ``recommend`` answers with, and what it was weighed against."""

    d: Deployment
    runs: list[RunMetrics]
    verdict: Literal["change", "keep", "add_capacity"] = "change"
    base_sum: RunSummary | None = None
    alt_sum: RunSummary | None = None
    b_runs: list[RunMetrics] = field(default_factory=list)
    selection: Selection | None = None
    cap: CapacityAnswer | None = None
    notes: list[str] = field(default_factory=list)


#: The start of the note that nothing verified met the SLO (dropped once replicas were added).
NONE_MET = "none of the first"


def _first_verified(
    ex: Executor,
    candidates: Sequence[Deployment],
    baseline: Deployment | None,
    rate: float,
    seeds: list[int],
    slo: PercentileSLO | None,
    max_candidates: int,
) -> _Pick:
    """The first candidate that meets the SLO on every fresh seed (else the first), kept only if
    it beats the baseline (``explain.beats``): the rule without a baseline to count changes from,
    or when nothing in the fewest-changes pool meets the SLO."""
    chosen: tuple[Deployment, list[RunMetrics], int] | None = None
    first: tuple[Deployment, list[RunMetrics], int] | None = None
    for i, d in enumerate(candidates[:max_candidates]):
        runs = verify(ex, d, rate, seeds)
        if first is None:
            first = (d, runs, i)
        if _verified(runs, slo):
            chosen = (d, runs, i)
            break
    if first is None:
        raise InternalError("invariant broken: first is None")
    d, runs, index = chosen or first
    pick = _Pick(d, runs)
    if chosen is None:
        pick.notes.append(
            f"{NONE_MET} {min(len(candidates), max_candidates)} candidates met the SLO on every fresh "
            "seed; this one is reported with meets_slo false"
        )
    elif index > 0:
        pick.notes.append(f"the {index} better-ranked candidate(s) failed re-verification on fresh seeds")
    if baseline is not None:
        try:
            pick.b_runs = runs if baseline == d else verify(ex, baseline, rate, seeds)
        except ValueError as exc:  # the baseline cannot run here (e.g. TP 1 cannot hold the weights)
            pick.notes.append(f"the baseline cannot run on this hardware, nothing is compared with it: {exc}")
            return pick
        pick.base_sum = RunSummary.of(baseline, pick.b_runs, slo)
        cand_sum = RunSummary.of(d, runs, slo)
        if baseline == d or not beats(cand_sum, pick.base_sum):
            pick.alt_sum = None if baseline == d else cand_sum
            pick.d, pick.runs, pick.verdict = baseline, pick.b_runs, "keep"
    return pick


def _selected(sel: Selection, pool: Pool, slo: PercentileSLO | None) -> _Pick | None:
    """The pick of the fewest-changes rule (None: nothing in the pool qualified)."""
    if sel.chosen is None:
        return None
    d, runs = pool.deployments[sel.chosen], pool.runs[sel.chosen]
    # no runs: the baseline cannot run here (e.g. vllm serve's TP 1 cannot hold the weights)
    b_runs = pool.runs.get("baseline", [])
    pick = _Pick(d, runs, "keep" if sel.keep else "change", selection=sel, b_runs=b_runs)
    pick.base_sum = RunSummary.of(pool.baseline, b_runs, slo) if b_runs else None
    if sel.keep:  # the evidence: the best other candidate, else the search's first trial
        other = sel.best if sel.best not in (None, "baseline") else "trial 1"
        if other in pool.runs and len(pool.runs[other]) == len(b_runs):
            pick.alt_sum = RunSummary.of(pool.deployments[other], pool.runs[other], slo)
    return pick


@dataclass(frozen=True)
class _How:
    """What choosing needs besides the candidates."""

    ex: Executor
    baseline: Deployment | None
    hardware: Hardware
    rate: float
    seeds: list[int]
    slo: PercentileSLO | None
    space: SearchSpace | None
    max_gpus: int | None
    max_candidates: int
    max_replicas: int

    def select(self, trials: Sequence[Deployment]) -> _Pick | None:
        """The fewest-changes rule over ``trials`` (None: no baseline, or nothing qualified)."""
        if self.baseline is None:
            return None
        sel, pool = select(
            self.ex,
            self.baseline,
            trials,
            self.hardware,
            self.rate,
            self.seeds,
            self.slo,
            space=self.space,
            max_gpus=self.max_gpus,
        )
        return _selected(sel, pool, self.slo)


def _choose(how: _How, candidates: Sequence[Deployment], fewest: bool, add_capacity: bool) -> _Pick:
    """The rule's pick, else the first verified candidate; then capacity if nothing met the SLO."""
    pick = how.select(candidates[: how.max_candidates]) if fewest else None
    if pick is None:
        pick = _first_verified(
            how.ex, candidates, how.baseline, how.rate, how.seeds, how.slo, how.max_candidates
        )
    if add_capacity and not _verified(pick.runs, how.slo):
        pick = _capacity(how, pick, fewest)
    return pick


def _capacity(how: _How, pick: _Pick, fewest: bool) -> _Pick:
    """Nothing met the SLO: replicas of the pick's flags until they do (``find_capacity``); then,
    with a baseline, the fewest-changes rule once more around that replica count, so that the
    flags change only where the added replicas alone do not suffice."""
    cap, more, more_runs = find_capacity(
        how.ex, pick.d, how.rate, how.seeds, how.slo, max_replicas=how.max_replicas
    )
    pick.cap = cap
    if more is None or more_runs is None:
        return pick
    pick.d, pick.runs, pick.verdict = more, more_runs, "add_capacity"
    pick.alt_sum = None  # a "keep what you have" comparison belonged to the verdict replaced here
    pick.notes = [n for n in pick.notes if not n.startswith(NONE_MET)]  # the added replicas meet it
    # The GPUs the answer needs are the budget now: a budget below them left out exactly the
    # baseline's flags on more replicas, and the pick kept every change of the search's trial.
    budget = None if how.max_gpus is None else max(how.max_gpus, more.gpus)
    again = replace(how, max_gpus=budget).select([more]) if fewest else None
    if again is not None:
        pick.d, pick.runs, pick.selection = again.d, again.runs, again.selection
    return pick


def recommend(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    candidates: Sequence[Deployment],
    *,
    target_rate: float | None = None,
    verify_seeds: Sequence[int] = tuple(fresh_seeds(tune_defaults.VERIFY_SEEDS)),
    eval_settings: EvalSettings | None = None,
    saturation: SaturationSettings | None = None,
    max_candidates: int = 3,
    executor: ExecutorKind | Executor = "local",
    n_jobs: int = 2,
    address: str | None = None,
    source: dict[str, Any] | None = None,
    progress: Progress | None = None,
    baseline: Deployment | None = None,
    add_capacity: bool = False,
    max_replicas: int = 64,
    usd_per_gpu_hour: float | None = None,
    price_source: str | None = None,
    fewest_changes: bool = True,
    space: SearchSpace | None = None,
    max_gpus: int | None = None,
) -> SchedulerRecommendation:
    """Choose, verify, measure headroom, explain and render a deployment.

    With a ``baseline`` and ``fewest_changes``, ``selection.select`` chooses among the baseline,
    the first ``max_candidates`` candidates, their changes alone and pairs of them (the rule, the
    band and every candidate land in ``selection``; verdict *keep* when the baseline qualifies).
    Otherwise, or when nothing there meets the SLO, the first candidate meeting it on every fresh
    seed is taken, kept only if it beats the baseline beyond the model's error (``beats``). With
    ``add_capacity``, when nothing verified meets the SLO replicas are added until they do (up to
    ``max_replicas``): verdict *add_capacity*. Each setting the answer changes is re-simulated
    alone on the baseline (``changes``). ``space`` (the searched space): each value of each knob
    alone on the baseline joins the pool; ``max_gpus``: the budget of the pool's changes.
    ``usd_per_gpu_hour`` prices the plan (``price_source``: where that price comes from)."""
    if not candidates and baseline is None:
        raise InputError("no candidate deployment to recommend (no feasible trial?)")
    candidates = list(candidates) or [baseline]  # type: ignore[list-item]
    ev = eval_settings or EvalSettings()
    rate = target_rate or workload.base_rate
    if rate is None:
        raise InputError(f"{workload.name} has no arrival rate: give a target rate")
    seeds = list(verify_seeds)
    sat_settings = (saturation or SaturationSettings()).model_copy(update={"seeds": seeds})
    ex, owned = _resolve_executor(executor, EvalContext(workload, hardware, slo, ev), n_jobs, address)
    try:
        how = _How(ex, baseline, hardware, rate, seeds, slo, space, max_gpus, max_candidates, max_replicas)
        pick = _choose(how, candidates, fewest_changes and baseline is not None, add_capacity)
        d, runs = pick.d, pick.runs
        config, res = resolve_deployment(d, hardware)
        # the headroom: ``servesim saturate``'s search, the runs just made its target-rate point
        sat = find_saturation(
            workload,
            d,
            hardware,
            slo,
            target_rate=rate,
            settings=sat_settings,
            eval_settings=ev,
            executor=ex,
            progress=progress,
            compare_off=False,
            known=runs,
        )
        ablations = run_ablations(ex, d, workload, hardware, rate, seeds[0], slo)
        changes = (
            measure_changes(ex, baseline, pick.b_runs[0], d, hardware, rate, slo)
            if baseline is not None and pick.b_runs and d != baseline
            else []
        )
    finally:
        if owned:
            ex.close()
    rec = build_recommendation(
        workload,
        hardware,
        slo,
        d,
        runs,
        sat,
        ablations,
        config.num_gpu_blocks,
        rate,
        ev,
        source or {},
        [*res.notes, *pick.notes],
    )
    price = (usd_per_gpu_hour, price_source, hardware.base.gpu)
    return _finish(rec, pick, workload, changes, rate, price, slo)


def _finish(
    rec: SchedulerRecommendation,
    pick: _Pick,
    workload: Workload,
    changes: list[FlagChange],
    rate: float,
    price: tuple[float | None, str | None, str | None],
    slo: PercentileSLO | None,
) -> SchedulerRecommendation:
    """The deploy plan, the comparisons as reasons and the choice's fields."""
    d, runs = pick.d, pick.runs
    sample = workload.sample().df
    plan = deploy_plan(
        d,
        rec.model,
        rec.router,
        longest_request_tokens=workload.max_request_tokens(),
        rate=rate,
        throughput_rps=rec.predicted_throughput_rps.mean,
        output_tokens_per_s=rec.predicted_output_tokens_per_s.mean,
        mean_request_tokens=float((sample["prompt_len"] + sample["output_len"]).mean()),
        knee_rps=rec.goodput_knee_rps,
        knee_headroom=rec.knee_headroom,
        unstable_rps=rec.saturation_rps,
        headroom=rec.headroom,
        usd_per_gpu_hour=price[0],
        price_source=price[1],
        gpu=price[2],
    )
    reasons = list(rec.reasons)
    mine = RunSummary.of(d, runs, slo)
    if pick.base_sum is not None and pick.verdict != "keep":
        reasons.insert(1, comparison_reason(mine, pick.base_sum, "baseline"))
    if pick.alt_sum is not None:
        reasons.insert(1, comparison_reason(mine, pick.alt_sum, "candidate"))
    if pick.cap is not None:
        reasons.insert(1, capacity_reason(pick.cap))
    return rec.model_copy(
        update={
            "verdict": pick.verdict,
            "baseline": pick.base_sum,
            "best_alternative": pick.alt_sum,
            "capacity": pick.cap,
            "reasons": reasons,
            "changes": changes,
            "deploy": plan,
            "selection": pick.selection,
        }
    )


def capacity_reason(cap: CapacityAnswer) -> Reason:
    """The capacity search as a reason: the flags' GPUs against the replicas that meet the SLO."""
    return Reason(
        kind="capacity",
        knob="replicas",
        value=cap.replicas,
        alternative=cap.flags_replicas,
        against="capacity",
        facts={
            "flags_gpus": cap.flags_gpus,
            "gpus": cap.gpus,
            "max_replicas": cap.max_replicas,
            "found": cap.replicas is not None,
            "tried": ", ".join(f"{t.replicas}:{'ok' if t.meets else 'miss'}" for t in cap.tried),
        },
    )


def build_recommendation(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    d: Deployment,
    runs: list[RunMetrics],
    sat: SaturationReport,
    ablations: list[Ablation],
    blocks: int,
    rate: float,
    ev: EvalSettings,
    source: dict[str, Any],
    notes: list[str],
) -> SchedulerRecommendation:
    saturated = sum(r.queue_saturated for r in runs)
    ppr = Spread.of([r.preemptions_per_request for r in runs])
    status: Status = (
        "QUEUE_SATURATED"
        if 2 * saturated > len(runs)
        else ("KV_THRASHING" if ppr.mean > ev.thrash_preemptions_per_request else "STABLE")
    )
    model = hardware.serve_model
    router = ev.router.policy if d.replicas > 1 else "none (one replica)"
    meets = None if slo is None else (all(r.slo_ok for r in runs) and saturated == 0)
    header = [
        "Generated by servesim (simulation): review before use (requires_human_review: true).",
        f"One replica; run {d.replicas} of them behind a {ev.router.policy} load balancer."
        if d.replicas > 1
        else "One replica.",
    ]
    if d.queue_timeout_s is not None:
        header.append(f"queue_timeout_s {d.queue_timeout_s:g} is not a vLLM flag: set it in the gateway.")
    hw = hardware.describe()
    bars = None
    if hw.get("kind") == "perf":
        worst = {m: max(r.p99()[m] for r in runs) for m in ("ttft", "tpot", "e2e")}
        bars = error_bars(
            worst, slo, str(hw.get("gpu")) if hw.get("gpu") else None, hw.get("profile") or None
        )
    return SchedulerRecommendation(
        error_bars=bars,
        model=model,
        hardware=hardware.describe(),
        deployment=d,
        replicas=d.replicas,
        gpus=d.gpus,
        num_gpu_blocks=blocks,
        router=router,
        target_rate_rps=rate,
        slo=slo,
        meets_slo=meets,
        status=status,
        predicted_ttft_ms=LatencySpread.of([r.ttft_ms for r in runs]),
        predicted_tpot_ms=LatencySpread.of([r.tpot_ms for r in runs]),
        predicted_e2e_ms=LatencySpread.of([r.e2e_ms for r in runs]),
        predicted_throughput_rps=Spread.of([r.throughput_rps for r in runs]),
        predicted_output_tokens_per_s=Spread.of([r.output_tokens_per_s for r in runs]),
        predicted_good_fraction=Spread.of([r.good_fraction for r in runs]),
        verification_seeds=[r.seed for r in runs],
        verification=[
            VerificationRun(
                seed=r.seed,
                ttft_p99_ms=r.ttft_ms.p99,
                tpot_p99_ms=r.tpot_ms.p99,
                e2e_p99_ms=r.e2e_ms.p99,
                good_fraction=r.good_fraction,
                preemptions_per_request=r.preemptions_per_request,
                kv_exhaustion_events=r.kv_exhaustion_events,
                status=r.status,
                slo_violations=r.slo_violations,
            )
            for r in runs
        ],
        saturation_rps=sat.saturation_rps,
        goodput_knee_rps=sat.goodput_knee_rps,
        headroom=sat.headroom,
        knee_headroom=sat.knee_headroom,
        verdict="change",
        reasons=build_reasons(workload, hardware, slo, d, runs, sat, ablations, blocks, rate),
        ablations=ablations,
        vllm_serve_command=d.vllm_serve_command(model),
        config_yaml=d.vllm_config_yaml(model, header),
        source=source,
        warnings=notes,
    )
