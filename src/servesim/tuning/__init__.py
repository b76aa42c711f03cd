"""Capacity planning: saturation search, an Optuna tuner, re-verified recommendations, scenarios.

Public API::

    Workload.from_trace(trace) / .from_spec(GeneratorSpec) / .from_source("poisson_10_rps")
    PerfHardware(model="llama-3.1-8b", gpu="h100", tensor_parallel_size=1, gpu_memory_utilization=0.9)
    FixedHardware(step_time=LinearStepTime(), num_gpu_blocks=20000)          # no catalog needed
    PercentileSLO.parse("ttft_p99_ms=500,tpot_p99_ms=50")                    # caps on a run's p99
    Deployment(max_num_seqs=..., ..., replicas=2, max_model_len=...)          # validated vLLM flags
    find_saturation(workload, deployment, hardware, slo, target_rate=...) -> SaturationReport
    tune(workload, hardware, slo, settings=TuneSettings(n_trials=40), executor="process",
         storage="study.journal") -> TuneResult
    recommend(workload, hardware, slo, [deployment, ...], target_rate=...) -> SchedulerRecommendation
    run_scenario({...seed scenario shape...}) -> BatchScenarioResult | LoadScenarioResult

Module map: ``slo`` (percentile vs per-request SLOs) · ``stats`` (queue-instability test,
spreads) · ``hardware`` (the spec every trial shares; ``servesim.spec.resolve``) · ``deployment``
(flags, validation, vllm serve)
· ``workload`` (rate scaling, seeds) · ``evaluate`` (one run, statuses, KV exhaustion) · ``jobs``
and ``executors`` (local / process pool / Ray) · ``saturation`` · ``space`` and ``search``
(Optuna) · ``recommend`` (``explain``: ablations and structured ``reasons``; ``capacity``) ·
``scenario`` · ``layouts`` (aggregated vs disaggregated at equal GPUs, the break-even link
bandwidth). See docs/tuning.md.
"""

from servesim.tuning.capacity import CapacityAnswer, CapacityTry, find_capacity
from servesim.tuning.deployment import VLLM_BLOCK_SIZES, Deployment, deployment_problems, resolve_deployment
from servesim.tuning.evaluate import EvalSettings, LatencySpread, RatePoint, RunMetrics, Status, run_once
from servesim.tuning.executors import Executor, ExecutorKind, make_executor
from servesim.tuning.explain import Ablation, RunSummary
from servesim.tuning.hardware import FixedHardware, Hardware, PerfHardware, hardware_of
from servesim.tuning.jobs import EvalContext, TrialOutcome, TrialSpec
from servesim.tuning.reasons import Effect, KnobChange, Reason
from servesim.tuning.recommend import SchedulerRecommendation, VerificationRun, recommend
from servesim.tuning.saturation import SaturationReport, SaturationSettings, find_saturation, scan_rates
from servesim.tuning.scenario import (
    NO_TRAFFIC,
    BatchScenario,
    BatchScenarioResult,
    LoadScenario,
    LoadScenarioResult,
    load_scenario_file,
    parse_scenario,
    run_scenario,
)
from servesim.tuning.search import TrialRecord, TuneResult, TuneSettings, tune
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.space import Knob, SearchSpace, parse_knob, parse_space, space_from_mapping
from servesim.tuning.stats import QueueTestSettings, QueueTrend, Spread, queue_trend
from servesim.tuning.workload import FRESH_SEED_BASE, Workload

__all__ = [
    "FRESH_SEED_BASE",
    "NO_TRAFFIC",
    "VLLM_BLOCK_SIZES",
    "Ablation",
    "BatchScenario",
    "BatchScenarioResult",
    "CapacityAnswer",
    "CapacityTry",
    "Deployment",
    "Effect",
    "EvalContext",
    "EvalSettings",
    "Executor",
    "ExecutorKind",
    "FixedHardware",
    "Hardware",
    "Knob",
    "KnobChange",
    "LatencySpread",
    "LoadScenario",
    "LoadScenarioResult",
    "PercentileSLO",
    "PerfHardware",
    "QueueTestSettings",
    "QueueTrend",
    "RatePoint",
    "Reason",
    "RunMetrics",
    "RunSummary",
    "SaturationReport",
    "SaturationSettings",
    "SchedulerRecommendation",
    "SearchSpace",
    "Spread",
    "Status",
    "TrialOutcome",
    "TrialRecord",
    "TrialSpec",
    "TuneResult",
    "TuneSettings",
    "VerificationRun",
    "Workload",
    "deployment_problems",
    "find_capacity",
    "find_saturation",
    "hardware_of",
    "load_scenario_file",
    "make_executor",
    "parse_knob",
    "parse_scenario",
    "parse_space",
    "queue_trend",
    "recommend",
    "resolve_deployment",
    "run_once",
    "run_scenario",
    "scan_rates",
    "space_from_mapping",
    "tune",
]
