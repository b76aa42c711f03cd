"""The optimizer's best setting for a batching case: a small Optuna study (``servesim.tuning``)
over the flags an advisor may change, on the same trace, step-time model and KV pool."""

from __future__ import annotations

import optuna

from servesim.advisor.cases import BatchingCase
from servesim.advisor.models import BatchingAdvice
from servesim.tuning import (
    Deployment,
    FixedHardware,
    Knob,
    PercentileSLO,
    SearchSpace,
    TuneSettings,
    Workload,
    tune,
)


def optimizer_best(case: BatchingCase, n_trials: int = 12, seed: int = 0) -> BatchingAdvice | None:
    """Best feasible trial of ``n_trials`` (None when none meets the SLO)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cur = case.current
    hardware = FixedHardware(case.step_time, cur.num_gpu_blocks, block_size=cur.block_size)
    slo = None
    if case.slo is not None:
        slo = PercentileSLO(
            ttft_p99_ms=case.slo.ttft_ms, tpot_p99_ms=case.slo.tpot_ms, e2e_p99_ms=case.slo.e2e_ms
        )
    keep = {  # what the advisor does not change: the hardware and the cache layout
        "block_size": Knob(choices=[cur.block_size]),
        "tensor_parallel_size": Knob(choices=[1]),
        "gpu_memory_utilization": Knob(choices=[0.9]),
        "enable_prefix_caching": Knob(choices=[cur.enable_prefix_caching]),
    }
    result = tune(
        Workload.from_trace(case.trace),
        hardware,
        slo,
        space=SearchSpace().with_overrides(keep),
        settings=TuneSettings(n_trials=n_trials, seed=seed, seeds=[0], n_startup_trials=min(10, n_trials)),
        max_model_len=case.max_model_len,
        executor="local",
        baseline=Deployment.from_engine_config(
            cur, max_model_len=case.max_model_len, replicas=case.replicas
        ),  # the study starts from the case's current setting
    )
    if result.best is None:
        return None
    p = result.best.params
    return BatchingAdvice.model_validate(
        {
            "max_num_seqs": p["max_num_seqs"],
            "max_num_batched_tokens": p["max_num_batched_tokens"],
            "enable_chunked_prefill": p["enable_chunked_prefill"],
            "long_prefill_token_threshold": p["long_prefill_token_threshold"],
            "queue_timeout_s": p["queue_timeout_s"],
            "replicas": p["replicas"],
            "rationale": [
                f"best feasible of {result.n_trials} Optuna trials ({result.n_feasible} met the SLO), "
                "ranked by goodput per GPU"
            ],
            "expected_effect": "the optimizer's best on this trace",
        },
        context=case.validation_context(),
    )
