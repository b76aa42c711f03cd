"""Units of work an executor runs: one simulation, one capacity probe, one tuning trial.

Everything here is picklable and deterministic: the same job in the same context gives the same
result in this process, in a worker process or on a Ray worker. The context (workload, hardware,
SLO, settings) is sent to each worker once; a job carries only what differs.

**A tuning trial** (``evaluate_trial``) builds the deployment from the sampled parameters (an
invalid combination returns at once with its reason), simulates it at the target rate on the
search seeds, and probes its capacity with the same workload at ``probe_factor`` x the target
rate (far above capacity: finished requests per second between the 10th and 90th percentile
completion). Then:

* ``goodput_per_gpu`` = target rate x mean good fraction / GPUs (GPUs = replicas x TP): good
  requests per second and per GPU *at the target load* (the nominal rate rather than the run's
  measured goodput, whose denominator includes the draining tail of a finite trace);
* constraints (each <= 0 when met, as Optuna expects): every p99 cap (``worst seed / cap - 1``),
  the good fraction, no seed with a saturated queue, no KV thrashing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.errors import InternalError
from servesim.traces.schema import Trace
from servesim.tuning.deployment import (
    Deployment,
    deployment_problems,
    resolve_deployment,
    with_pipeline_defaults,
)
from servesim.tuning.evaluate import EvalSettings, RunMetrics, probe_capacity, run_once, simulate_requests
from servesim.tuning.hardware import Hardware
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.stats import Spread
from servesim.tuning.workload import Workload

Objective = Literal["goodput_per_gpu", "pareto"]
LatencyMetric = Literal["ttft", "tpot", "e2e"]


class TrialSpec(BaseModel):
    """How a tuning trial is evaluated (the same for every trial of a study)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Objective = "goodput_per_gpu"
    target_rate: float = Field(gt=0, description="Arrival rate the deployment must serve, req/s.")
    seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    probe_factor: float = Field(50.0, gt=1, description="Capacity probe rate / target rate.")
    latency_metric: LatencyMetric = Field("ttft", description="Latency objective of the Pareto front.")
    max_gpus: int | None = Field(None, ge=1, description="Budget: replicas x TP x PP at most this.")
    fixed: dict[str, Any] = Field(
        default_factory=dict, description="Deployment fields that are not searched (max_model_len...)."
    )


@dataclass(frozen=True)
class EvalContext:
    """What every job of one command shares (sent to each worker once)."""

    workload: Workload
    hardware: Hardware
    slo: PercentileSLO | None
    settings: EvalSettings


@dataclass(frozen=True)
class RunJob:
    """Simulate ``deployment`` at ``rate`` on replicate ``seed``."""

    deployment: Deployment
    rate: float | None
    seed: int


@dataclass(frozen=True)
class ProbeJob:
    """Capacity of ``deployment`` under the workload at ``rate`` (far above capacity)."""

    deployment: Deployment
    rate: float
    seed: int


@dataclass(frozen=True)
class TrialJob:
    """One tuning trial: Optuna's sampled parameters, and how trials are evaluated."""

    number: int
    params: dict[str, Any]
    spec: TrialSpec


@dataclass(frozen=True)
class PrefixJob:
    """A search rung: ``deployment`` on the first ``n`` requests of replicate ``seed`` at ``rate``
    (``tuning.rungs``); the result counts the requests over each cap and those not good."""

    deployment: Deployment
    rate: float
    seed: int
    n: int


@dataclass(frozen=True)
class PrefixCounts:
    """What a prefix run proves about the full run (``tuning.rungs``): requests simulated, and of
    them those over each p99 cap (``ttft``/``tpot``/``e2e``) and those not good."""

    n: int
    over_cap: dict[str, int]
    not_good: int


Job = RunJob | ProbeJob | TrialJob | PrefixJob


class TrialOutcome(BaseModel):
    """What a trial measured (or why it could not run)."""

    number: int
    params: dict[str, Any]
    valid: bool
    rule: str | None = Field(None, description="Which rule rejected the combination.")
    reason: str | None = Field(None, description="Why the combination was rejected.")
    values: list[float] | None = None
    constraints: list[float] = Field(default_factory=list)
    feasible: bool = False
    gpus: int | None = None
    goodput_per_gpu: float | None = None
    goodput_rank: float = Field(0.0, description="goodput_per_gpu / target rate, rounded to 0.001.")
    slo_pressure: float = Field(0.0, description="Worst seed's max over capped metrics of p99 / cap.")
    capacity_rps: float | None = None
    capacity_per_gpu: float | None = None
    ttft_p99_ms: Spread | None = None
    tpot_p99_ms: Spread | None = None
    e2e_p99_ms: Spread | None = None
    good_fraction: Spread | None = None
    preemptions_per_request: Spread | None = None
    saturated_runs: int = 0
    status: str | None = None
    violations: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    rung: int | None = Field(
        None, description="The search rung that stopped the trial (tuning.rungs; None: not stopped)."
    )
    simulated_requests: int = Field(0, description="Requests this trial simulated, over its runs and rungs.")


def constraint_names(slo: PercentileSLO | None) -> list[str]:
    """The constraints of a study, in order (fixed for the study: Optuna needs a constant length)."""
    names = [f"{m}_p99" for m in (slo.caps() if slo else {})]
    if slo is not None and slo.min_good_fraction is not None:
        names.append("good_fraction")
    return [*names, "queue_saturated", "kv_thrashing"]


def reason_of(exc: Exception) -> str:
    """A one-line reason from a validation or hardware error."""
    if isinstance(exc, ValidationError):
        msgs = [str(e["msg"]).removeprefix("Value error, ") for e in exc.errors()]
        return "; ".join(msgs)
    return " ".join(str(exc).split())


def hardware_rule(exc: Exception) -> str:
    """A short name for why the hardware (or vLLM's KV check) refused a deployment."""
    name = type(exc).__name__
    text = str(exc)
    if name == "MemoryFitError":
        return "memory_fit"
    if "heads" in text:
        return "tensor_parallel_heads"
    if "KV blocks" in text or "max_model_len" in text:
        return "kv_below_max_model_len"
    return "hardware"


def build_deployment(spec: TrialSpec, params: dict[str, Any]) -> Deployment:
    """The deployment of a trial: the sampled parameters over the study's fixed fields."""
    return Deployment.model_validate({**spec.fixed, **params})


@dataclass(frozen=True)
class TrialRuns:
    """A valid trial's simulations: one ``RunJob`` per search seed at the target rate, then the
    capacity probe. They are independent jobs, so an executor spreads one trial's runs over its
    workers (a batch of trials no longer waits for its slowest trial on one worker)."""

    deployment: Deployment
    jobs: tuple[RunJob | ProbeJob, ...]
    notes: tuple[str, ...]


def plan_trial(ctx: EvalContext, job: TrialJob) -> TrialOutcome | TrialRuns:
    """An invalid combination's outcome (at once, with its reason), or the runs that measure it."""
    spec = job.spec
    n_cons = len(constraint_names(ctx.slo))
    bad = [1.0] * n_cons

    def invalid(rule: str, reason: str) -> TrialOutcome:
        return TrialOutcome(
            number=job.number, params=job.params, valid=False, rule=rule, reason=reason, constraints=bad
        )

    merged = with_pipeline_defaults({**spec.fixed, **job.params})
    try:
        draft = Deployment.model_construct(**merged)
        problems = deployment_problems(draft)
    except (TypeError, AttributeError):
        problems = []
    if problems:
        return invalid(problems[0][0], "; ".join(reason for _, reason in problems))
    try:
        d = build_deployment(spec, job.params)
    except ValueError as exc:
        return invalid("invalid_value", reason_of(exc))
    if spec.max_gpus is not None and d.gpus > spec.max_gpus:
        return invalid(
            "gpu_budget",
            f"{d.replicas} replicas x TP {d.tensor_parallel_size}"
            + (f" x PP {d.pipeline_parallel_size}" if d.pipeline_parallel_size > 1 else "")
            + f" = {d.gpus} GPUs > budget {spec.max_gpus}",
        )
    try:
        _, res = resolve_deployment(d, ctx.hardware)
    except ValueError as exc:
        return invalid(hardware_rule(exc), reason_of(exc))
    rate = spec.target_rate
    runs: list[RunJob | ProbeJob] = [RunJob(d, rate, s) for s in spec.seeds]
    runs.append(ProbeJob(d, rate * spec.probe_factor, spec.seeds[0]))
    return TrialRuns(d, tuple(runs), res.notes)


def finish_trial(ctx: EvalContext, job: TrialJob, plan: TrialRuns, results: list[Any]) -> TrialOutcome:
    """The outcome from ``plan``'s results (in its jobs' order: the seeds' runs, then the probe)."""
    *runs, cap = results
    out = trial_outcome(job, plan.deployment, list(runs), float(cap), ctx, list(plan.notes))
    out.simulated_requests = ctx.workload.num_requests * len(plan.jobs)  # the seeds' runs and the probe
    return out


def evaluate_trial(ctx: EvalContext, job: TrialJob) -> TrialOutcome:
    """One trial in this process: ``plan_trial``, its runs one after the other, ``finish_trial``."""
    plan = plan_trial(ctx, job)
    if isinstance(plan, TrialOutcome):
        return plan
    return finish_trial(ctx, job, plan, [execute(ctx, j) for j in plan.jobs])


def trial_outcome(
    job: TrialJob, d: Deployment, runs: list[RunMetrics], cap: float, ctx: EvalContext, notes: list[str]
) -> TrialOutcome:
    spec = job.spec
    slo = ctx.slo
    gpus = d.gpus
    good = Spread.of([r.good_fraction for r in runs])
    p99 = {m: Spread.of([r.p99()[m] for r in runs]) for m in ("ttft", "tpot", "e2e")}
    ppr = Spread.of([r.preemptions_per_request for r in runs])
    saturated = sum(r.queue_saturated for r in runs)
    thrashing = ppr.mean > ctx.settings.thrash_preemptions_per_request
    cons: list[float] = []
    pressure = 0.0
    if slo is not None:
        ratios = [p99[m].max / cap_ms for m, cap_ms in slo.caps().items()]
        pressure = max(ratios, default=0.0)
        cons += [x - 1.0 for x in ratios]
        if slo.min_good_fraction is not None:
            cons.append(slo.min_good_fraction - good.min)
    cons.append(float(saturated))
    cons.append(ppr.mean - ctx.settings.thrash_preemptions_per_request)
    feasible = all(c <= 0 for c in cons)
    goodput_per_gpu = spec.target_rate * good.mean / gpus
    if spec.objective == "goodput_per_gpu":
        values = [goodput_per_gpu]
    else:
        values = [cap, p99[spec.latency_metric].mean, float(gpus)]
    status = "QUEUE_SATURATED" if 2 * saturated > len(runs) else ("KV_THRASHING" if thrashing else "STABLE")
    violations = list(dict.fromkeys(v for r in runs for v in r.slo_violations))
    if saturated:
        violations.append(f"queue saturated on {saturated} of {len(runs)} seeds")
    if thrashing:
        violations.append(f"{ppr.mean:.2f} preemptions per request (KV thrashing)")
    return TrialOutcome(
        number=job.number,
        params=job.params,
        valid=True,
        values=values,
        constraints=cons,
        feasible=feasible,
        gpus=gpus,
        goodput_per_gpu=goodput_per_gpu,
        goodput_rank=round(good.mean / gpus, 3),
        slo_pressure=round(pressure, 6),
        capacity_rps=cap,
        capacity_per_gpu=cap / gpus,
        ttft_p99_ms=p99["ttft"],
        tpot_p99_ms=p99["tpot"],
        e2e_p99_ms=p99["e2e"],
        good_fraction=good,
        preemptions_per_request=ppr,
        saturated_runs=saturated,
        status=status,
        violations=violations,
        warnings=notes,
    )


def execute(ctx: EvalContext, job: Job) -> Any:
    """Run one job in ``ctx`` (what every executor calls, wherever it runs)."""
    if isinstance(job, TrialJob):
        return evaluate_trial(ctx, job)
    if isinstance(job, PrefixJob):
        return prefix_counts(ctx, job)
    if isinstance(job, RunJob):
        trace = ctx.workload.trace(job.rate, job.seed)
        return run_once(
            trace, job.deployment, ctx.hardware, ctx.slo, ctx.settings, seed=job.seed, rate=job.rate
        )
    if not isinstance(job, ProbeJob):
        raise InternalError("invariant broken: isinstance(job, ProbeJob)")
    return probe_capacity(ctx.workload.trace(job.rate, job.seed), job.deployment, ctx.hardware, ctx.settings)


def prefix_counts(ctx: EvalContext, job: PrefixJob) -> PrefixCounts:
    """Simulate ``job``'s prefix and count its requests over each cap and those not good."""
    full = ctx.workload.trace(job.rate, job.seed)
    trace = Trace(full.df.iloc[: job.n].reset_index(drop=True), full.provenance)
    requests = simulate_requests(trace, job.deployment, ctx.hardware, ctx.slo, ctx.settings)
    caps = ctx.slo.caps() if ctx.slo is not None else {}
    over = {}
    for m, cap in caps.items():
        v = requests[f"{m}_ms"].to_numpy(dtype=np.float64)
        over[m] = int(np.count_nonzero(v > cap))
    not_good = len(requests) - int(requests["good"].to_numpy(dtype=bool).sum())
    return PrefixCounts(len(requests), over, not_good)
