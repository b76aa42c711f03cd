"""``SchedulerRecommendation``: what to run, what it will do, why, and how sure we are.

``recommend`` takes candidate deployments (best first, e.g. from ``tune``) and:

1. **re-verifies** each on fresh seeds (``FRESH_SEED_BASE`` + 0, 1, 2: traffic the search never
   saw) at the target rate, until one meets the SLOs on every fresh seed with a stable queue
   (at most ``max_candidates``; if none does, the first is reported with ``meets_slo: false``);
   the predicted numbers are those runs' means, with min/max/std: the recommendation claims only
   what these runs show;
2. searches its **saturation rate** and goodput knee (``saturation.find_saturation``, the same
   fresh seeds) for the headroom at the target load;
3. runs **ablations** (one fresh seed each: chunked prefill flipped, the long-prefill cap removed,
   half the sequences, half the token budget, prefix caching flipped, one replica fewer) and
   writes the rationale from the measured differences, not from rules of thumb;
4. renders the ``vllm serve`` command and the ``--config`` YAML of one replica.

Nothing is applied anywhere: the CLI's ``--out-dir`` only writes files to a folder for a human
to review (``requires_human_review`` is always true).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from servesim.traces.inspect import inspect_trace
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import EvalSettings, LatencySpread, RatePoint, RunMetrics, Status
from servesim.tuning.executors import Executor, ExecutorKind, make_executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import EvalContext, RunJob, reason_of
from servesim.tuning.saturation import RateSearch, SaturationReport, SaturationSettings, _search
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.stats import Spread
from servesim.tuning.workload import FRESH_SEED_BASE, Workload

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


class Ablation(BaseModel):
    """One setting changed, one fresh seed: what it would do."""

    change: str
    valid: bool
    reason: str | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    status: Status | None = None
    slo_ok: bool | None = None


class SchedulerRecommendation(BaseModel):
    """Recommended vLLM flags and replicas, with verified predictions and the reasons."""

    requires_human_review: Literal[True] = Field(
        True, description="Always true: a simulation's advice, to be reviewed before anything runs."
    )
    model: str = Field(description="The model argument of vllm serve.")
    hardware: dict[str, Any]
    deployment: Deployment = Field(description="The recommended flags, TP, replicas, queue timeout.")
    replicas: int
    gpus: int = Field(description="replicas x tensor_parallel_size.")
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
    rationale: list[str]
    ablations: list[Ablation]
    vllm_serve_command: str = Field(description="One replica; run `replicas` of them behind the router.")
    config_yaml: str = Field(description="The same flags for vllm serve --config.")
    source: dict[str, Any] = Field(default_factory=dict, description="Where the candidate came from.")
    warnings: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> SchedulerRecommendation:
        d = self.deployment
        if self.replicas != d.replicas or self.gpus != d.gpus:
            raise ValueError(
                f"replicas ({self.replicas}) and gpus ({self.gpus}) must equal the deployment's "
                f"({d.replicas}, {d.gpus} = replicas x TP)"
            )
        if (self.meets_slo is None) != (self.slo is None):
            raise ValueError("meets_slo is given exactly when an SLO is")
        if self.meets_slo:
            bad = [v for r in self.verification for v in r.slo_violations]
            if bad or not self.verification:
                raise ValueError(
                    f"meets_slo claimed but re-verification shows: {'; '.join(bad) or 'no runs'}"
                )
            assert self.slo is not None
            worst = {
                "ttft": self.predicted_ttft_ms.p99.max,
                "tpot": self.predicted_tpot_ms.p99.max,
                "e2e": self.predicted_e2e_ms.p99.max,
            }
            for m, cap in self.slo.caps().items():
                if worst[m] > cap:
                    raise ValueError(f"meets_slo claimed but predicted {m} p99 {worst[m]:.1f} ms > {cap} ms")
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


def _verified(runs: list[RunMetrics], slo: PercentileSLO | None) -> bool:
    """Every run has a stable queue and (with an SLO) meets it."""
    return not any(r.queue_saturated for r in runs) and (slo is None or all(r.slo_ok for r in runs))


def recommend(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    candidates: Sequence[Deployment],
    *,
    target_rate: float | None = None,
    verify_seeds: Sequence[int] = (FRESH_SEED_BASE, FRESH_SEED_BASE + 1, FRESH_SEED_BASE + 2),
    eval_settings: EvalSettings | None = None,
    saturation: SaturationSettings | None = None,
    max_candidates: int = 3,
    executor: ExecutorKind | Executor = "local",
    n_jobs: int = 2,
    address: str | None = None,
    source: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> SchedulerRecommendation:
    """Verify, measure headroom, explain and render the first candidate that holds up."""
    if not candidates:
        raise ValueError("no candidate deployment to recommend (no feasible trial?)")
    ev = eval_settings or EvalSettings()
    rate = target_rate or workload.base_rate
    if rate is None:
        raise ValueError(f"{workload.name} has no arrival rate: give a target rate")
    seeds = list(verify_seeds)
    sat_settings = (saturation or SaturationSettings()).model_copy(update={"seeds": seeds})
    ctx = EvalContext(workload, hardware, slo, ev)
    ex, owned = _resolve_executor(executor, ctx, n_jobs, address)
    try:
        chosen: tuple[Deployment, list[RunMetrics], int] | None = None
        first: tuple[Deployment, list[RunMetrics], int] | None = None
        for i, d in enumerate(candidates[:max_candidates]):
            runs = verify(ex, d, rate, seeds)
            if first is None:
                first = (d, runs, i)
            if _verified(runs, slo):
                chosen = (d, runs, i)
                break
        assert first is not None
        d, runs, index = chosen or first
        config, res = resolve_deployment(d, hardware)
        search = RateSearch(workload, d, hardware, slo, sat_settings, ev, ex, rate, progress)
        search.points[0] = RatePoint.of(rate, runs, ev, slo is not None)  # the runs just made
        sat = _search(search, workload, d, hardware, slo, sat_settings, rate, config.num_gpu_blocks, res)
        ablations = run_ablations(ex, d, workload, hardware, rate, seeds[0], slo, runs)
    finally:
        if owned:
            ex.close()
    notes = list(res.warnings)
    if chosen is None:
        notes.append(
            f"none of the first {min(len(candidates), max_candidates)} candidates met the SLO on every fresh "
            "seed; this one is reported with meets_slo false"
        )
    elif index > 0:
        notes.append(f"the {index} better-ranked candidate(s) failed re-verification on fresh seeds")
    return build_recommendation(
        workload, hardware, slo, d, runs, sat, ablations, config.num_gpu_blocks, rate, ev, source or {}, notes
    )


# ---------------------------------------------------------------------- ablations
def _variants(d: Deployment, workload_has_prefixes: bool) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if d.enable_chunked_prefill:
        out.append(
            ("chunked prefill off", {"enable_chunked_prefill": False, "long_prefill_token_threshold": 0})
        )
    else:
        out.append(("chunked prefill on", {"enable_chunked_prefill": True}))
    if d.long_prefill_token_threshold > 0:
        out.append(("no long-prefill cap", {"long_prefill_token_threshold": 0}))
    if d.max_num_seqs >= 2:
        out.append((f"max_num_seqs {d.max_num_seqs // 2}", {"max_num_seqs": d.max_num_seqs // 2}))
    if d.max_num_batched_tokens >= 2:
        out.append(
            (
                f"max_num_batched_tokens {d.max_num_batched_tokens // 2}",
                {"max_num_batched_tokens": d.max_num_batched_tokens // 2},
            )
        )
    if workload_has_prefixes:
        flip = not d.enable_prefix_caching
        out.append((f"prefix caching {'on' if flip else 'off'}", {"enable_prefix_caching": flip}))
    if d.replicas > 1:
        out.append((f"{d.replicas - 1} replica(s)", {"replicas": d.replicas - 1}))
    return out


def run_ablations(
    ex: Executor,
    d: Deployment,
    workload: Workload,
    hardware: Hardware,
    rate: float,
    seed: int,
    slo: PercentileSLO | None,
    runs: list[RunMetrics],
) -> list[Ablation]:
    stats = inspect_trace(workload.sample())
    variants = _variants(d, stats.prefix_reuse_ratio is not None and stats.prefix_reuse_ratio > 0)
    out: list[Ablation] = []
    jobs: list[RunJob] = []
    slots: list[int] = []
    for change, update in variants:
        try:
            v = Deployment.model_validate({**d.model_dump(), **update})
            resolve_deployment(v, hardware)
        except ValueError as exc:
            out.append(Ablation(change=change, valid=False, reason=reason_of(exc)))
            continue
        slots.append(len(out))
        out.append(Ablation(change=change, valid=True))
        jobs.append(RunJob(v, rate, seed))
    results: list[RunMetrics] = ex.map(jobs) if jobs else []
    for i, m in zip(slots, results, strict=True):
        out[i] = out[i].model_copy(
            update={
                "ttft_p99_ms": m.ttft_ms.p99,
                "tpot_p99_ms": m.tpot_ms.p99,
                "e2e_p99_ms": m.e2e_ms.p99,
                "status": m.status,
                "slo_ok": m.slo_ok if slo is not None else None,
            }
        )
    return out


# ---------------------------------------------------------------------- rationale
def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:,.1f} ms"


def _rate(x: float) -> str:
    return f"{x:,.3g} req/s"


def _compare(a: Ablation, base: dict[str, float], metric: str) -> str:
    got = getattr(a, f"{metric}_p99_ms")
    assert got is not None
    ref = base[metric]
    word = "rises" if got > ref * 1.02 else ("falls" if got < ref * 0.98 else "stays")
    if word == "stays":
        return f"{metric.upper()} p99 stays at about {_ms(ref)}"
    return f"{metric.upper()} p99 {word} from {_ms(ref)} to {_ms(got)}"


def _verdict(a: Ablation) -> str:
    parts = []
    if a.slo_ok is not None:
        parts.append("still within the SLO" if a.slo_ok else "missing the SLO")
    if a.status is not None and a.status != "STABLE":
        parts.append(a.status)
    return f" ({', '.join(parts)})" if parts else ""


def build_rationale(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    d: Deployment,
    runs: list[RunMetrics],
    sat: SaturationReport,
    ablations: list[Ablation],
    blocks: int,
    rate: float,
) -> list[str]:
    stats = inspect_trace(workload.sample())
    n = len(runs)
    base = {
        "ttft": Spread.of([r.ttft_ms.p99 for r in runs]).mean,
        "tpot": Spread.of([r.tpot_ms.p99 for r in runs]).mean,
        "e2e": Spread.of([r.e2e_ms.p99 for r in runs]).mean,
    }
    worst = {
        "ttft": max(r.ttft_ms.p99 for r in runs),
        "tpot": max(r.tpot_ms.p99 for r in runs),
        "e2e": max(r.e2e_ms.p99 for r in runs),
    }
    out: list[str] = []
    line = (
        f"at {_rate(rate)} on {d.replicas} replica(s) x TP {d.tensor_parallel_size} = {d.gpus} GPU(s): "
        f"TTFT p99 {_ms(worst['ttft'])}, TPOT p99 {_ms(worst['tpot'])}, E2E p99 {_ms(worst['e2e'])} "
        f"(worst of {n} fresh seeds)"
    )
    if slo is not None:
        bad = list(dict.fromkeys(v for r in runs for v in r.slo_violations))
        line += "; within the SLO " + slo.describe() if not bad else "; misses the SLO: " + "; ".join(bad)
    out.append(line)
    if sat.saturation_rps is not None and sat.headroom is not None:
        out.append(
            f"the queue stays stable up to {_rate(sat.max_stable_rps or 0.0)} and grows without bound from "
            f"{_rate(sat.saturation_rps)}: {sat.headroom:+.0%} headroom over the target"
        )
    elif sat.saturation_rps is None:
        out.append(
            "the queue stayed stable at every rate tried, up to " + _rate(max(p.rate_rps for p in sat.points))
        )
    if sat.goodput_knee_rps is not None and sat.knee_headroom is not None:
        out.append(
            f"the SLOs hold up to {_rate(sat.goodput_knee_rps)} ({sat.knee_headroom:+.0%} over the target)"
        )
    by_change = {a.change: a for a in ablations}
    pr = stats.prompt
    prompts = f"prompts of up to {pr.max:,} tokens (p99 {pr.p99:,.0f}, median {pr.p50:,.0f})"
    if d.enable_chunked_prefill:
        a = by_change.get("chunked prefill off")
        if a is not None and a.valid:
            tpot_worse = (a.tpot_p99_ms or 0.0) > base["tpot"] * 1.02
            what = (
                "decodes no longer wait behind whole prompts"
                if tpot_worse
                else "decodes are not held up by it at this load"
            )
            out.append(
                f"chunked prefill at {d.max_num_batched_tokens:,} tokens per step splits {prompts}, "
                f"so {what}: "
                f"without it {_compare(a, base, 'tpot')} and {_compare(a, base, 'ttft')}{_verdict(a)}"
            )
        else:
            out.append(
                f"chunked prefill must stay on: with it off vLLM needs max_num_batched_tokens "
                f"({d.max_num_batched_tokens:,}) >= max_model_len ({d.max_model_len:,}) for {prompts}"
            )
    else:
        a = by_change.get("chunked prefill on")
        tail = (
            f"; with chunking on {_compare(a, base, 'ttft')} and {_compare(a, base, 'tpot')}{_verdict(a)}"
            if (a is not None and a.valid)
            else ""
        )
        out.append(
            f"chunked prefill off: the {d.max_num_batched_tokens:,}-token budget (>= max_model_len "
            f"{d.max_model_len:,}) prefills every prompt in one step{tail}"
        )
    a = by_change.get("no long-prefill cap")
    if a is not None and a.valid:
        out.append(
            f"long_prefill_token_threshold {d.long_prefill_token_threshold:,} caps one prompt's share of "
            "a step; "
            f"without the cap {_compare(a, base, 'ttft')}{_verdict(a)}"
        )
    mean_running = Spread.of([r.mean_running for r in runs]).mean
    a = by_change.get(f"max_num_seqs {d.max_num_seqs // 2}")
    seqs = f"max_num_seqs {d.max_num_seqs}: the batch held {mean_running:,.1f} requests on average"
    if a is not None and a.valid:
        seqs += (
            f"; at {d.max_num_seqs // 2} {_compare(a, base, 'ttft')} and {_compare(a, base, 'e2e')}"
            + _verdict(a)
        )
    out.append(seqs)
    a = by_change.get(f"max_num_batched_tokens {d.max_num_batched_tokens // 2}")
    if a is not None and a.valid:
        out.append(
            f"max_num_batched_tokens {d.max_num_batched_tokens:,}: at half the budget "
            f"{_compare(a, base, 'ttft')} "
            f"and {_compare(a, base, 'tpot')}{_verdict(a)}"
        )
    max_kv = Spread.of([r.max_kv_usage for r in runs]).max
    ppr = Spread.of([r.preemptions_per_request for r in runs]).mean
    events = Spread.of([float(r.kv_exhaustion_events) for r in runs]).mean
    hw = hardware.describe()
    if hw.get("kind") == "perf" and hw.get("num_gpu_blocks") is None:
        origin = (
            f"{hw['model']} on {d.tensor_parallel_size} x {hw['gpu']} at gpu_memory_utilization "
            f"{d.gpu_memory_utilization:g}"
        )
    else:
        origin = "as given by the hardware context"
    out.append(
        f"KV cache: {blocks:,} blocks of {d.block_size} tokens per replica "
        f"({(blocks - 1) * d.block_size:,} tokens, "
        f"{origin}); peak use {max_kv:.0%}, {ppr:.3f} preemptions per request, {events:.1f} KV-exhaustion "
        "events per run"
    )
    if stats.prefix_reuse_ratio:
        flip = "prefix caching off" if d.enable_prefix_caching else "prefix caching on"
        a = by_change.get(flip)
        if a is not None and a.valid:
            out.append(
                f"{stats.prefix_reuse_ratio:.0%} of prompt tokens repeat earlier prefixes; "
                f"with {flip.split()[-1]} "
                f"prefix caching {_compare(a, base, 'ttft')}{_verdict(a)}"
            )
    else:
        out.append(
            "the traffic shares no prompt prefixes, so prefix caching neither helps nor hurts here "
            f"(left {'on' if d.enable_prefix_caching else 'off'})"
        )
    a = by_change.get(f"{d.replicas - 1} replica(s)")
    if a is not None and a.valid:
        out.append(f"with {d.replicas - 1} replica(s) {_compare(a, base, 'ttft')}{_verdict(a)}")
    if d.queue_timeout_s is not None:
        shed = Spread.of([r.shed_fraction for r in runs]).mean
        out.append(
            f"queue_timeout_s {d.queue_timeout_s:g} is not a vLLM flag: enforce it in the gateway or client "
            f"(at the target rate it rejected {shed:.2%} of requests)"
        )
    return out


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
    return SchedulerRecommendation(
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
        rationale=build_rationale(workload, hardware, slo, d, runs, sat, ablations, blocks, rate),
        ablations=ablations,
        vllm_serve_command=d.vllm_serve_command(model),
        config_yaml=d.vllm_config_yaml(model, header),
        source=source,
        warnings=notes,
    )
