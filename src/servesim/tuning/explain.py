"""The evidence behind a recommendation: ablations on fresh seeds, the baseline comparison, the
structured reasons built from both.

An **ablation** changes one setting of the recommended deployment (chunked prefill flipped, the
long-prefill cap removed, half ``max_num_seqs``, half the token budget, prefix caching flipped
when the traffic shares prefixes, one replica fewer) and simulates it on one fresh seed. A change
vLLM would refuse is recorded with vLLM's reason instead. **Reasons** (``reasons.Reason``) state
each measured difference against the recommendation; nothing is worded here.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, Field

from servesim.engine.kv_groups import blocks_for_one_sequence, is_hybrid, mamba_state_blocks
from servesim.traces.inspect import TraceStats, inspect_trace
from servesim.tuning.choice import Tolerance, binding_metric, model_tolerance, pressure_clearly_lower
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import RunMetrics, Status
from servesim.tuning.executors import Executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import RunJob, reason_of
from servesim.tuning.reasons import Effect, Reason, knob_changes, latency_effects
from servesim.tuning.saturation import SaturationReport
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import KNOBS
from servesim.tuning.stats import Spread
from servesim.tuning.workload import Workload


class Ablation(BaseModel):
    """One setting changed, one fresh seed: what it would do."""

    change: str = Field(description="A short label of the change.")
    knob: str = Field("", description="The setting changed.")
    value: Any = Field(None, description="Its recommended value.")
    alternative: Any = Field(None, description="The value tried instead.")
    valid: bool
    reason: str | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    good_fraction: float | None = None
    status: Status | None = None
    slo_ok: bool | None = None


class RunSummary(BaseModel):
    """A deployment's fresh-seed runs at the target rate, reduced to what comparisons need."""

    deployment: Deployment
    gpus: int
    runs: int = Field(description="Fresh seeds run.")
    ttft_p99_ms: float = Field(description="Worst seed.")
    tpot_p99_ms: float = Field(description="Worst seed.")
    e2e_p99_ms: float = Field(description="Worst seed.")
    good_fraction: float = Field(description="Mean over seeds.")
    saturated_runs: int
    meets_slo: bool | None
    slo_pressure: float | None = Field(description="Worst seed's max over capped metrics of p99 / cap.")
    binding: str | None = Field(None, description="The capped metric behind slo_pressure (ttft/tpot/e2e).")
    violations: list[str]

    @classmethod
    def of(cls, d: Deployment, runs: list[RunMetrics], slo: PercentileSLO | None) -> RunSummary:
        worst = {m: max(r.p99()[m] for r in runs) for m in ("ttft", "tpot", "e2e")}
        saturated = sum(r.queue_saturated for r in runs)
        caps = slo.caps() if slo is not None else {}
        return cls(
            deployment=d,
            gpus=d.gpus,
            runs=len(runs),
            ttft_p99_ms=worst["ttft"],
            tpot_p99_ms=worst["tpot"],
            e2e_p99_ms=worst["e2e"],
            good_fraction=Spread.of([r.good_fraction for r in runs]).mean,
            saturated_runs=saturated,
            meets_slo=None if slo is None else (saturated == 0 and all(r.slo_ok for r in runs)),
            slo_pressure=max((worst[m] / c for m, c in caps.items()), default=None),
            binding=binding_metric(worst, caps),
            violations=_worst_violations(runs, worst, slo),
        )

    def p99(self) -> dict[str, float]:
        return {"ttft": self.ttft_p99_ms, "tpot": self.tpot_p99_ms, "e2e": self.e2e_p99_ms}


def _worst_violations(
    runs: list[RunMetrics], worst: dict[str, float], slo: PercentileSLO | None
) -> list[str]:
    """What the worst seed broke, one line per term (each seed's own lines, unlabelled, read as a
    list of contradictions: "TTFT p99 9,612 ms > 1,000 ms; ...; TTFT p99 11,145 ms > 1,000 ms")."""
    if slo is None:
        return []
    return slo.violations(worst, min(r.good_fraction for r in runs))


def beats(cand: RunSummary, base: RunSummary, tol: Tolerance | None = None) -> bool:
    """``cand`` is better than the baseline at the target load by more than the step-time model's
    measured error (``choice.model_tolerance``): it meets the SLO where the baseline does not; or
    neither does and its worst p99 / cap is lower beyond the error of the metric binding the
    baseline; or both meet it and it uses fewer GPUs, or the same GPUs with a worst p99 / cap lower
    beyond that error. Inside the error the baseline stays: "keep what you have"."""
    tol = tol or model_tolerance()
    if cand.meets_slo is not None and base.meets_slo is not None and cand.meets_slo != base.meets_slo:
        return cand.meets_slo
    binding = base.binding or "ttft"
    # Neither is an answer (capacity is searched next, from the winner): the closer to the SLO.
    both_miss = cand.meets_slo is False and base.meets_slo is False
    if both_miss and cand.slo_pressure is not None and base.slo_pressure is not None:
        return pressure_clearly_lower(cand.slo_pressure, base.slo_pressure, binding, tol)
    if cand.saturated_runs != base.saturated_runs:
        return cand.saturated_runs < base.saturated_runs
    if cand.gpus != base.gpus:
        return cand.gpus < base.gpus
    if cand.slo_pressure is not None and base.slo_pressure is not None:
        return pressure_clearly_lower(cand.slo_pressure, base.slo_pressure, binding, tol)
    worse = [Effect.of(m, cand.p99()[m], base.p99()[m]) for m in ("ttft", "e2e")]
    return all(e.verdict != "better" for e in worse) and any(e.verdict == "worse" for e in worse)


def comparison_reason(rec: RunSummary, other: RunSummary, against: str) -> Reason:
    """The recommendation against the baseline (or another deployment): settings and metrics."""
    changes = knob_changes(
        rec.deployment.model_dump(), other.deployment.model_dump(), [*KNOBS, "max_model_len", "policy"]
    )
    effects = [
        Effect.of("gpus", rec.gpus, other.gpus),
        *latency_effects(rec.p99(), dict(other.p99())),
        Effect.of("good_fraction", rec.good_fraction, other.good_fraction, higher_is_better=True),
    ]
    return Reason(
        kind="versus_baseline",
        against="baseline" if against == "baseline" else "capacity",
        changes=changes,
        effects=effects,
        alternative_slo_ok=other.meets_slo,
        alternative_status="QUEUE_SATURATED" if 2 * other.saturated_runs > other.runs else "STABLE",
        facts={
            "recommended_meets_slo": rec.meets_slo,
            "recommended_pressure": rec.slo_pressure,
            "alternative_pressure": other.slo_pressure,
            "alternative_violations": "; ".join(other.violations) or None,
        },
    )


# ---------------------------------------------------------------------- ablations
def _variants(d: Deployment, workload_has_prefixes: bool) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """(label, knob, alternative value, deployment update) of each ablation."""
    out: list[tuple[str, str, Any, dict[str, Any]]] = []
    if d.enable_chunked_prefill:
        off = {"enable_chunked_prefill": False, "long_prefill_token_threshold": 0}
        out.append(("chunked prefill off", "enable_chunked_prefill", False, off))
    else:
        out.append(("chunked prefill on", "enable_chunked_prefill", True, {"enable_chunked_prefill": True}))
    if d.long_prefill_token_threshold > 0:
        out.append(
            ("no long-prefill cap", "long_prefill_token_threshold", 0, {"long_prefill_token_threshold": 0})
        )
    if d.max_num_seqs >= 2:
        half = d.max_num_seqs // 2
        out.append((f"max_num_seqs {half}", "max_num_seqs", half, {"max_num_seqs": half}))
    if d.max_num_batched_tokens >= 2:
        half = d.max_num_batched_tokens // 2
        out.append(
            (
                f"max_num_batched_tokens {half}",
                "max_num_batched_tokens",
                half,
                {"max_num_batched_tokens": half},
            )
        )
    if workload_has_prefixes:
        flip = not d.enable_prefix_caching
        out.append(
            (
                f"prefix caching {'on' if flip else 'off'}",
                "enable_prefix_caching",
                flip,
                {"enable_prefix_caching": flip},
            )
        )
    if d.replicas > 1:
        out.append((f"{d.replicas - 1} replica(s)", "replicas", d.replicas - 1, {"replicas": d.replicas - 1}))
    return out


M = TypeVar("M", bound=BaseModel)


def measured(
    ex: Executor, out: list[M], slots: list[int], jobs: list[RunJob], slo: PercentileSLO | None
) -> list[M]:
    """``out`` with the runs of ``jobs`` (in order) written into the entries at ``slots``: the
    p99 latencies, good fraction, load status and SLO verdict each variant measured."""
    results: list[RunMetrics] = ex.map(jobs) if jobs else []
    for i, m in zip(slots, results, strict=True):
        out[i] = out[i].model_copy(
            update={
                "ttft_p99_ms": m.ttft_ms.p99,
                "tpot_p99_ms": m.tpot_ms.p99,
                "e2e_p99_ms": m.e2e_ms.p99,
                "good_fraction": m.good_fraction,
                "status": m.status,
                "slo_ok": m.slo_ok if slo is not None else None,
            }
        )
    return out


def run_ablations(
    ex: Executor,
    d: Deployment,
    workload: Workload,
    hardware: Hardware,
    rate: float,
    seed: int,
    slo: PercentileSLO | None,
) -> list[Ablation]:
    stats = inspect_trace(workload.sample())
    variants = _variants(d, stats.prefix_reuse_ratio is not None and stats.prefix_reuse_ratio > 0)
    out: list[Ablation] = []
    jobs: list[RunJob] = []
    slots: list[int] = []
    for change, knob, alt, update in variants:
        base = {"change": change, "knob": knob, "value": getattr(d, knob), "alternative": alt}
        try:
            v = Deployment.model_validate({**d.model_dump(), **update})
            resolve_deployment(v, hardware)
        except ValueError as exc:
            out.append(Ablation(**base, valid=False, reason=reason_of(exc)))
            continue
        slots.append(len(out))
        out.append(Ablation(**base, valid=True))
        jobs.append(RunJob(v, rate, seed))
    return measured(ex, out, slots, jobs, slo)


# ---------------------------------------------------------------------- reasons
def _ablation_reason(a: Ablation, base: dict[str, float], facts: dict[str, Any]) -> Reason:
    if not a.valid:
        return Reason(
            kind="refused",
            knob=a.knob,
            value=a.value,
            alternative=a.alternative,
            against="ablation",
            facts={**facts, "refused_because": a.reason},
        )
    alt = {"ttft": a.ttft_p99_ms, "tpot": a.tpot_p99_ms, "e2e": a.e2e_p99_ms}
    return Reason(
        kind="ablation",
        knob=a.knob,
        value=a.value,
        alternative=a.alternative,
        against="ablation",
        effects=latency_effects(base, alt),
        alternative_slo_ok=a.slo_ok,
        alternative_status=a.status,
        facts=facts,
    )


def build_reasons(
    workload: Workload,
    hardware: Hardware,
    slo: PercentileSLO | None,
    d: Deployment,
    runs: list[RunMetrics],
    sat: SaturationReport,
    ablations: list[Ablation],
    blocks: int,
    rate: float,
) -> list[Reason]:
    """Every measured statement behind the recommendation, most important first."""
    stats = inspect_trace(workload.sample())
    out: list[Reason] = [_prediction_reason(slo, d, runs, rate)]
    out.extend(_capacity_reasons(sat))
    out.extend(_ablation_reasons(ablations, runs, stats, d))
    out.append(_kv_cache_reason(hardware, d, runs, blocks))
    if not stats.prefix_reuse_ratio:
        out.append(
            Reason(
                kind="prefix_sharing",
                knob="enable_prefix_caching",
                value=d.enable_prefix_caching,
                facts={"prefix_reuse_ratio": 0.0},
            )
        )
    if d.queue_timeout_s is not None:
        out.append(
            Reason(
                kind="gateway",
                knob="queue_timeout_s",
                value=d.queue_timeout_s,
                facts={"shed_fraction": Spread.of([r.shed_fraction for r in runs]).mean},
            )
        )
    out.extend(_admission_reasons(d, runs))
    return out


def _admission_reasons(d: Deployment, runs: list[RunMetrics]) -> list[Reason]:
    """vLLM's 503 limits, when the deployment sets one: how many requests its API server turns
    away on the fresh seeds (the worst seed; those rejected as too long, a 400, are counted too:
    both are answered before the engine sees the request). A recommended limit states its cost."""
    limits = {k: getattr(d, k) for k in ("max_num_queued_reqs", "max_num_queued_tokens")}
    limits = {k: v for k, v in limits.items() if v is not None}
    if not limits:
        return []
    refused = [r.rejected_fraction - r.shed_fraction for r in runs]
    knob, value = next(iter(limits.items()))
    return [
        Reason(
            kind="admission",
            knob=knob,
            value=value,
            facts={**limits, "rejected_fraction_max": max(refused), "seeds": len(runs)},
        )
    ]


def _prediction_reason(
    slo: PercentileSLO | None, d: Deployment, runs: list[RunMetrics], rate: float
) -> Reason:
    """What the recommendation predicts at the rate: the worst p99s over the fresh seeds (the
    promise must hold on every seed, not on average) and the SLO's violations if any."""
    n = len(runs)
    worst = {m: max(r.p99()[m] for r in runs) for m in ("ttft", "tpot", "e2e")}
    return Reason(
        kind="prediction",
        facts={
            "rate_rps": rate,
            "replicas": d.replicas,
            "tensor_parallel_size": d.tensor_parallel_size,
            "gpus": d.gpus,
            "ttft_p99_ms": worst["ttft"],
            "tpot_p99_ms": worst["tpot"],
            "e2e_p99_ms": worst["e2e"],
            "seeds": n,
            "slo": slo.describe() if slo is not None else None,
            "slo_violations": "; ".join(dict.fromkeys(v for r in runs for v in r.slo_violations)) or None,
        },
    )


def _capacity_reasons(sat: SaturationReport) -> list[Reason]:
    """How far the rate is from saturation, and from the SLO's knee when the sweep found one."""
    out: list[Reason] = []
    out.append(
        Reason(
            kind="headroom",
            facts={
                "max_stable_rps": sat.max_stable_rps,
                "saturation_rps": sat.saturation_rps,
                "headroom": sat.headroom,
                "highest_rate_tried_rps": max(p.rate_rps for p in sat.points) if sat.points else None,
            },
        )
    )
    if sat.goodput_knee_rps is not None:
        out.append(
            Reason(
                kind="slo_knee", facts={"knee_rps": sat.goodput_knee_rps, "knee_headroom": sat.knee_headroom}
            )
        )
    return out


def _ablation_reasons(
    ablations: list[Ablation], runs: list[RunMetrics], stats: TraceStats, d: Deployment
) -> list[Reason]:
    """Each ablated knob against the recommendation on the same seed, with the workload facts
    that explain it (prompt lengths for chunked prefill, the running batch for max_num_seqs,
    prefix reuse for prefix caching)."""
    same_seed = runs[0].p99()  # the ablations ran on the first fresh seed: compare on that seed
    out: list[Reason] = []
    pr = stats.prompt
    prompt_facts = {
        "prompt_max": int(pr.max),
        "prompt_p99": float(pr.p99),
        "prompt_p50": float(pr.p50),
        "max_num_batched_tokens": d.max_num_batched_tokens,
        "max_model_len": d.max_model_len,
    }
    mean_running = Spread.of([r.mean_running for r in runs]).mean
    for a in ablations:
        if a.knob == "enable_chunked_prefill":
            facts: dict[str, Any] = prompt_facts
        elif a.knob == "max_num_seqs":
            facts = {"mean_running": mean_running}
        elif a.knob == "enable_prefix_caching":
            facts = {"prefix_reuse_ratio": stats.prefix_reuse_ratio}
        else:
            facts = {}
        out.append(_ablation_reason(a, same_seed, {**facts, "seed": runs[0].seed}))
    return out


def _kv_cache_reason(hardware: Hardware, d: Deployment, runs: list[RunMetrics], blocks: int) -> Reason:
    """The KV cache's size and how full it ran: its origin (model, GPU, memory share) is named
    only when servesim derived it, not when the blocks were given."""
    hw = hardware.describe()
    derived = hw.get("kind") == "perf" and hw.get("num_gpu_blocks") is None
    tokens, groups = (blocks - 1) * d.block_size, 0
    config, _ = resolve_deployment(d, hardware)
    mml = config.max_model_len
    layout = config.kv_cache_groups
    if layout is not None and is_hybrid(layout) and mml:  # one pool over several block tables
        # vLLM's own count (get_kv_cache_capacity): requests of max_model_len the pool holds at
        # once, in tokens; blocks x block size would count each block once for every group
        groups = len(layout)
        states = mamba_state_blocks(config.enable_prefix_caching, config.mamba_prefill_checkpoint_blocks)
        per_request = blocks_for_one_sequence(
            layout, mml, config.block_size, config.max_num_batched_tokens, states
        )
        tokens = int(blocks / per_request * mml)
    return Reason(
        kind="kv_cache",
        facts={
            "blocks": blocks,
            "block_size": config.block_size,  # vLLM's: raised for a model with state layers
            "tokens": tokens,
            **({"kv_cache_groups": groups} if groups else {}),  # only where there are several
            "model": hw.get("model") if derived else None,
            "gpu": hw.get("gpu") if derived else None,
            "tensor_parallel_size": d.tensor_parallel_size,
            "gpu_memory_utilization": d.gpu_memory_utilization if derived else None,
            "peak_use": Spread.of([r.max_kv_usage for r in runs]).max,
            "preemptions_per_request": Spread.of([r.preemptions_per_request for r in runs]).mean,
            "kv_exhaustion_events": Spread.of([float(r.kv_exhaustion_events) for r in runs]).mean,
        },
    )
