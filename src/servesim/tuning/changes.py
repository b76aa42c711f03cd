"""One change at a time: each knob the recommendation changes, measured alone against the baseline.

A recommendation that changes three flags is three decisions. For each knob that differs from the
baseline, the baseline with only that knob set to the recommended value is re-simulated on the
first fresh seed (the seed the baseline also ran on), so a user can take the changes one by one
and see what each buys. A knob vLLM would refuse alone (chunked prefill off with a budget below
``max_model_len``...) is recorded with vLLM's reason: it only comes with another change.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from servesim.tuning.choice import changed_knobs
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import RunMetrics, Status
from servesim.tuning.executors import Executor
from servesim.tuning.explain import measured
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import RunJob, reason_of
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import KNOBS


class FlagChange(BaseModel):
    """One knob changed from the baseline, alone: baseline + this change, one fresh seed."""

    knob: str = Field(description="The Deployment field (max_num_seqs, replicas, ...).")
    flag: str = Field(description="The vllm serve flag, or 'replicas' / 'gateway queue timeout'.")
    baseline_value: Any
    value: Any = Field(description="The recommended value.")
    valid: bool = Field(description="vLLM accepts this change alone.")
    reason: str | None = Field(None, description="Why not alone (valid false).")
    seed: int
    gpus: int | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    good_fraction: float | None = None
    status: Status | None = None
    slo_ok: bool | None = None
    baseline_ttft_p99_ms: float = Field(description="The baseline on the same seed.")
    baseline_tpot_p99_ms: float
    baseline_e2e_p99_ms: float
    baseline_slo_ok: bool | None


def flag_name(knob: str) -> str:
    """How a user finds the knob: its vllm serve flag, or what it is when it is not one."""
    if knob == "replicas":
        return "replicas"
    if knob == "queue_timeout_s":
        return "gateway queue timeout"
    if knob == "num_speculative_tokens":
        return "--speculative-config num_speculative_tokens"
    return "--" + knob.replace("_", "-")


def knobs_of(d: Deployment) -> dict[str, Any]:
    return {k: getattr(d, k) for k in KNOBS}


def measure_changes(
    ex: Executor,
    baseline: Deployment,
    base_run: RunMetrics,
    d: Deployment,
    hardware: Hardware,
    rate: float,
    slo: PercentileSLO | None,
) -> list[FlagChange]:
    """Every knob ``d`` changes from ``baseline``, each applied alone and simulated on
    ``base_run``'s seed (the baseline's own run on it is the comparison)."""
    seed = base_run.seed
    ref = {
        "seed": seed,
        "baseline_ttft_p99_ms": base_run.ttft_ms.p99,
        "baseline_tpot_p99_ms": base_run.tpot_ms.p99,
        "baseline_e2e_p99_ms": base_run.e2e_ms.p99,
        "baseline_slo_ok": base_run.slo_ok if slo is not None else None,
    }
    out: list[FlagChange] = []
    jobs: list[RunJob] = []
    slots: list[int] = []
    for knob in changed_knobs(knobs_of(d), knobs_of(baseline)):
        head = {
            "knob": knob,
            "flag": flag_name(knob),
            "baseline_value": getattr(baseline, knob),
            "value": getattr(d, knob),
            **ref,
        }
        try:
            v = Deployment.model_validate({**baseline.model_dump(), knob: getattr(d, knob)})
            resolve_deployment(v, hardware)
        except ValueError as exc:
            out.append(FlagChange(**head, valid=False, reason=reason_of(exc)))
            continue
        slots.append(len(out))
        out.append(FlagChange(**head, valid=True, gpus=v.gpus))
        jobs.append(RunJob(v, rate, seed))
    return measured(ex, out, slots, jobs, slo)
