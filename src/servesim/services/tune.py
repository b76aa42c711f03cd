"""A tuning study and its recommendation: ``TuneRequest`` -> ``TuneAnswer``.

The one tune workflow: trials (``tuning.search.tune``) -> the shortlist (the fewest-changes
choice's order; with no feasible trial, the nearest miss) -> re-verification on fresh seeds, the
baseline on the same seeds, added capacity when no setting meets the SLO, the headroom from the
one capacity search, the GPU price (``tuning.recommend.recommend``, called only here). The fixed
parameters (the queue policy, speculative decoding, the context length, the KV blocks) hold in
every trial and in the recommendation. ``servesim tune``, the web's Tune job and the demo's study
build a ``TuneRequest`` and call ``tune`` (or ``prepare`` then ``PreparedTune.run``, to know the
study's name before it starts), so the same study gives the same answer wherever it is asked.
The answer's document is ``report.capacity.tune_document(answer)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim import tune_defaults
from servesim.bounds import MAX_SEED
from servesim.errors import InputError, InternalError
from servesim.services.capacity import Execution, checked_hardware, workload_of
from servesim.services.inputs import Progress, TraceInput, counter
from servesim.spec import DeploymentSpec, PercentileSLO
from servesim.tuning import (
    BatchScenario,
    BatchScenarioResult,
    Deployment,
    FixedHardware,
    Hardware,
    LoadScenario,
    LoadScenarioResult,
    SaturationReport,
    SchedulerRecommendation,
    TuneResult,
    hardware_of,
    parse_space,
    space_from_mapping,
)
from servesim.tuning.deploy import recommendation_manifest
from servesim.tuning.deployment import KNOBS_033
from servesim.tuning.hardware import DEFAULT_GPU, PerfHardware
from servesim.tuning.noise import ab_verdict
from servesim.tuning.ranking import record_of
from servesim.tuning.space import Knob, SearchSpace

if TYPE_CHECKING:
    from servesim.engine.speculative import SpeculativeConfig
    from servesim.traces.schema import TraceProvenance
    from servesim.tuning import EvalSettings, TuneSettings, Workload
    from servesim.tuning.executors import Executor

#: Engine keys that set the study rather than a configuration to beat: the KV blocks of the
#: hardware, the context length, the queue order, speculative decoding and the KV dtype hold in
#: every trial.
STUDY_KEYS = frozenset(
    {
        "num_gpu_blocks",
        "max_model_len",
        "policy",
        "speculative_config",
        "kv_cache_dtype",
        "quantization",
    }
)
#: Candidates re-verified on fresh seeds, best first (the first that holds is recommended).
SHORTLIST = 3


class TuneRequest(BaseModel):
    """An Optuna study over vLLM flags, TP and replicas for a trace and an SLO, and (``recommend``)
    its re-verified recommendation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: TraceInput
    deployment: DeploymentSpec = Field(
        default_factory=DeploymentSpec,
        description="The hardware (model, GPU, TP, memory share, timing) and the engine keys set: the "
        "study-wide ones (num_gpu_blocks, max_model_len, policy, speculative_config, kv_cache_dtype, "
        "quantization) and the user's configuration (the baseline).",
    )
    baseline: bool = Field(
        True,
        description="The deployment's configuration is the study's baseline (evaluated first, the answer "
        "never worse than it); without one, or false: vllm serve's defaults.",
    )
    slo: PercentileSLO | None = None
    target_rate: float | None = Field(None, gt=0, allow_inf_nan=False, description="Load to plan for.")
    max_rejection_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Fraction of requests a trial may answer HTTP 503 (max_num_queued_reqs/tokens) and "
        "stay feasible: the budget within which 503s may buy TTFT (0: none).",
    )
    objective: Literal["goodput_per_gpu", "pareto"] = "goodput_per_gpu"
    latency_metric: Literal["ttft", "tpot", "e2e"] = Field("ttft", description="The Pareto front's p99.")
    trials: int = Field(tune_defaults.TRIALS, ge=1, description="Trials this run adds to the study.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Sampler seed.")
    trial_seeds: int = Field(
        tune_defaults.TRIAL_SEEDS, ge=1, le=20, description="Seeds (replicates) per trial."
    )
    pruning: Literal["rungs", "none"] = Field(
        "none",
        description="rungs: stop trials a GPU bound, a prefix of the trace or the capacity probe proves out "
        "(tuning.rungs).",
    )
    verify_seeds: int = Field(
        tune_defaults.VERIFY_SEEDS, ge=1, le=20, description="Fresh seeds re-verifying the recommendation."
    )
    max_gpus: int | None = Field(None, ge=1, description="GPU budget: replicas x TP x PP at most this.")
    space: SearchSpace = Field(default_factory=SearchSpace, description="The knobs searched.")
    gpu_hour_usd: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="$ per GPU-hour (None: the GPU's price in servesim.perf.prices, gpu_prices over it).",
    )
    gpu_prices: dict[str, float] = Field(
        default_factory=dict, description="$ per GPU-hour by GPU, over the shipped list prices."
    )
    gpu_types: list[str] = Field(
        default_factory=list,
        description="GPU types to compare (services.gpu_types: one study each, the cheapest meeting the "
        "SLO); empty: the deployment's GPU alone.",
    )
    recommend: bool = Field(True, description="Verify and explain the best trial (false: trials only).")
    storage: str | None = Field(
        None, description="A journal file's path or an Optuna RDB URL (None: in memory)."
    )
    study_name: str | None = Field(None, description="Study name (default: derived from the settings).")
    execution: Execution = Field(default_factory=lambda: Execution(executor="process"))


@dataclass(frozen=True)
class PreparedTune:
    """A request with its traffic read, its hardware checked and its study defined: the study's
    name is known before the first trial (the web follows its trials by it)."""

    request: TuneRequest
    workload: Workload
    hardware: Hardware
    settings: TuneSettings
    evaluation: EvalSettings
    space: SearchSpace
    #: the deployment fields every trial keeps (policy, speculative config)
    fixed: dict[str, Any]
    max_model_len: int
    #: the user's configuration (None: vllm serve's defaults are the baseline)
    current: Deployment | None
    study_name: str
    #: why the TP degrees searched differ from the space's (``_tp_that_fits``)
    tp_notes: tuple[str, ...] = ()

    def run(self, *, progress: Progress | None = None) -> TuneAnswer:
        """The trials, then (``request.recommend``) the recommendation (``progress``: phases
        ``trials`` and ``verifying``)."""
        from servesim.tuning import EvalContext, make_executor

        ex = self.request.execution
        ctx = EvalContext(self.workload, self.hardware, self.request.slo, self.evaluation)
        with make_executor(ex.executor, ctx, n_jobs=ex.jobs, address=ex.address) as executor:
            study = self._study(executor, progress)
            rec = self._recommend(study, executor, progress) if self.request.recommend else None
            kind = executor.kind
        return TuneAnswer(self, study, rec, kind)

    def _study(self, executor: Executor, progress: Progress | None) -> TuneResult:
        from servesim.tuning import tune

        req = self.request
        result = tune(
            self.workload,
            self.hardware,
            req.slo,
            target_rate=req.target_rate,
            space=self.space,
            settings=self.settings,
            eval_settings=self.evaluation,
            max_model_len=self.max_model_len,
            fixed=self.fixed,
            executor=executor,
            n_jobs=req.execution.jobs,
            storage=req.storage,
            study_name=self.study_name,
            progress=counter(progress, "trials"),
            baseline=self.current,
        )
        if self.tp_notes:
            result = result.model_copy(update={"budget_notes": [*self.tp_notes, *result.budget_notes]})
        return result

    def _recommend(
        self, study: TuneResult, executor: Executor, progress: Progress | None
    ) -> SchedulerRecommendation:
        """The shortlist (or the nearest miss) re-verified on fresh seeds against the baseline,
        with capacity added when nothing meets the SLO, priced at the request's GPU-hour."""
        from servesim.services.gpu_types import price_of
        from servesim.tuning import Deployment, recommend
        from servesim.tuning.workload import fresh_seeds

        picks = study.shortlist(SHORTLIST) or ([study.nearest_miss.number] if study.nearest_miss else [])
        if not picks:
            raise InputError(
                f"no trial of study {study.study_name} could run ({study.n_trials} trials, all invalid): "
                "widen the search space (more replicas, --max-gpus)"
            )
        base = study.baseline
        baseline = (
            Deployment.model_validate({"max_model_len": self.max_model_len, **self.fixed, **base.params})
            if base is not None
            else self.current
        )
        usd, source = price_of(self.request, self.hardware.base.gpu)
        return recommend(
            self.workload,
            self.hardware,
            self.request.slo,
            trial_deployments(study, picks, self.max_model_len, self.fixed),
            target_rate=study.target_rate_rps,
            verify_seeds=fresh_seeds(self.request.verify_seeds),
            eval_settings=self.evaluation,
            executor=executor,
            source={
                "study": study.study_name,
                "storage": self.request.storage,
                "objective": study.objective,
                "trials": picks,
                "baseline_trial": base.number if base is not None else None,
                "baseline_origin": "config" if self.current is not None else "vllm defaults",
            },
            progress=counter(progress, "verifying"),
            baseline=baseline,
            add_capacity=True,
            usd_per_gpu_hour=usd,
            price_source=source,
            space=self.space,  # each searched value alone joins the fewest-changes pool
            max_gpus=self.settings.max_gpus,
        )


@dataclass(frozen=True)
class TuneAnswer:
    """The study after this run and its recommendation (None: ``recommend`` was off)."""

    prepared: PreparedTune
    study: TuneResult
    recommendation: SchedulerRecommendation | None
    #: where the trials ran (local, process, ray)
    executor: str

    @property
    def request(self) -> TuneRequest:
        return self.prepared.request

    @property
    def workload(self) -> Workload:
        return self.prepared.workload

    @property
    def hardware(self) -> Hardware:
        return self.prepared.hardware

    @property
    def provenance(self) -> TraceProvenance | None:
        return self.prepared.workload.provenance


def trial_deployments(
    res: TuneResult, numbers: Sequence[int], max_model_len: int, fixed: dict[str, Any]
) -> list[Deployment]:
    """The study's trials ``numbers`` as deployments, for ``recommend`` to re-verify (``fixed``:
    the study's fields that were not searched: the policy, the speculative config)."""
    from servesim.tuning import Deployment

    by_number = {r.number: r for r in res.trials}
    out = []
    for n in numbers:
        o = by_number[n].outcome
        if o is None:
            raise InternalError(f"invariant broken: trial {n} has no outcome")
        out.append(Deployment.model_validate({**fixed, "max_model_len": max_model_len, **o.params}))
    return out


def prepare(request: TuneRequest) -> PreparedTune:
    """Check the deployment (before the trace is read), read the traffic, and define the study:
    its settings, the fixed fields, the baseline, the space (speculation searched as
    ``num_speculative_tokens`` in {0, k} unless the space names it) and the study's name."""
    from servesim.cluster import RouterSpec
    from servesim.spec import engine_values
    from servesim.tuning import EvalSettings, TuneSettings
    from servesim.tuning.deployment import check_speculative_draft
    from servesim.tuning.search import derived_study_name

    if request.gpu_types:
        raise InputError("a request with gpu_types is answered by services.gpu_types.compare_gpu_types")
    spec = request.deployment
    hardware = checked_hardware(spec)
    if request.gpu_prices:
        from servesim.perf.prices import load_prices

        load_prices(request.gpu_prices)  # an unknown GPU or a bad price, before any work
    engine_values(spec)  # the configuration's keys by vLLM's own rules, before any work
    fixed, space = _fixed(spec, request.space)
    # a speculating recommendation must name a drafter vLLM can load: refused before any trial
    check_speculative_draft(_speculative(fixed), hardware)
    workload = workload_of(request.trace)
    mml = int(spec.engine.get("max_model_len") or workload.default_max_model_len())
    request, hardware, tp_notes = _tp_that_fits(request, hardware, mml)
    if tp_notes:
        spec = request.deployment
        fixed, space = _fixed(spec, request.space)
    current = _current(request, mml, fixed)
    settings = TuneSettings(
        objective=request.objective,
        n_trials=request.trials,
        seed=request.seed,
        seeds=list(range(request.trial_seeds)),
        latency_metric=request.latency_metric,
        max_gpus=request.max_gpus,
        pruning=request.pruning,
    )
    evaluation = EvalSettings(
        router=RouterSpec(policy=spec.router), max_rejection_rate=request.max_rejection_rate
    )
    name = request.study_name or derived_study_name(
        workload,
        hardware,
        request.slo,
        space=space,
        settings=settings,
        eval_settings=evaluation,
        target_rate=request.target_rate,
        max_model_len=mml,
        fixed=fixed,
        baseline=current,
    )
    return PreparedTune(
        request, workload, hardware, settings, evaluation, space, fixed, mml, current, name, tuple(tp_notes)
    )


def _tp_that_fits(
    request: TuneRequest, hardware: Hardware, mml: int
) -> tuple[TuneRequest, Hardware, list[str]]:
    """The study's TP degrees where one replica can hold the model: a space left at its default TP
    choices (1, 2, 4) keeps those at which vllm serve's defaults fit the GPU (``gpu_types.memory_fit``)
    and, when none does (DeepSeek-V3 on an H200), searches the smallest power of two that does
    instead, within ``max_gpus``; the baseline takes that TP when the request named none. Every
    trial would otherwise be pruned for memory. A TP the user chose (``--tp``, ``--space``) is kept:
    its misfits are pruned, as the study's output says. Returns the request as the study runs it,
    its hardware and a note per change."""
    from servesim.bounds import MAX_TP
    from servesim.services.gpu_types import memory_fit

    default = SearchSpace().tensor_parallel_size
    if "tensor_parallel_size" not in hardware.varies or request.space.tensor_parallel_size != default:
        return request, hardware, []
    fits, why = memory_fit(request, hardware, mml)
    tried = sorted(int(str(t)) for t in default.choices or [])
    if fits == [t for t in tried if request.max_gpus is None or t <= request.max_gpus]:
        return request, hardware, []
    model, gpu = request.deployment.model, hardware.base.gpu
    if fits:
        left_out = [t for t in tried if t not in fits]
        note = f"TP {', '.join(map(str, left_out))} left out of the space: one replica does not fit there"
    else:
        top = min(MAX_TP, request.max_gpus or MAX_TP)
        wider = [1 << k for k in range(top.bit_length()) if (1 << k) > max(tried) and (1 << k) <= top]
        if not wider:
            return request, hardware, []
        fits = memory_fit(
            request,
            hardware,
            mml,
            space=request.space.with_overrides({"tensor_parallel_size": Knob(choices=wider)}),
        )[0][:1]
        if not fits:
            return request, hardware, []
        need = re.search(r"weights need (.*?); use", why)
        at = f" (at TP {max(tried)} the weights need {need.group(1)})" if need else ""
        note = (
            f"TP {', '.join(map(str, tried))} cannot hold {model or 'the model'} on one {gpu} replica{at}: "
            f"the space searches TP {fits[0]}, the smallest that fits (--space tensor_parallel_size=... "
            "to choose)"
        )
    space = request.space.with_overrides({"tensor_parallel_size": Knob(choices=fits)})
    update: dict[str, Any] = {"space": space}
    if request.deployment.tp is None and hardware.default_tensor_parallel_size not in fits:
        # the baseline: vllm serve's defaults (its memory share too) at the fewest GPUs that hold them
        util = hardware.default_gpu_memory_utilization
        holds = memory_fit(request, hardware, mml, util, space=space)[0] or fits
        update["deployment"] = request.deployment.model_copy(update={"tp": holds[0]})
    request = request.model_copy(update=update)
    return request, checked_hardware(request.deployment), [note]


def _fixed(spec: DeploymentSpec, space: SearchSpace) -> tuple[dict[str, Any], SearchSpace]:
    """The fields every trial keeps, and the space with speculation's k searched in {0, k} when the
    deployment speculates and the space leaves the knob at off; likewise pipeline stages in
    {1, P} when the deployment has P."""
    from servesim.engine.speculative import SpeculativeConfig

    fixed: dict[str, Any] = {"policy": spec.engine.get("policy", "fcfs")}
    if spec.engine.get("kv_cache_dtype", "auto") != "auto":  # absent when auto: the study as before the key
        fixed["kv_cache_dtype"] = spec.engine["kv_cache_dtype"]
    if spec.engine.get("quantization") is not None:  # likewise: the checkpoint's own format
        fixed["quantization"] = spec.engine["quantization"]
    for key, default in KNOBS_033.items():  # vLLM 0.33's knobs as set (the 503 limits among them)
        if spec.engine.get(key, default) != default:
            fixed[key] = spec.engine[key]
    pp = spec.engine.get("pipeline_parallel_size", 1)
    if pp != 1 and space.pipeline_parallel_size.choices == [1]:
        space = space.with_overrides({"pipeline_parallel_size": Knob(choices=[1, pp])})
    raw = spec.engine.get("speculative_config")
    if raw is not None:
        sc = SpeculativeConfig.model_validate(raw)
        fixed["speculative_config"] = sc.model_dump(mode="json")
        if space.num_speculative_tokens.choices == [0]:
            space = space.with_overrides(
                {"num_speculative_tokens": Knob(choices=[0, sc.num_speculative_tokens])}
            )
    return fixed, space


def _speculative(fixed: dict[str, Any]) -> SpeculativeConfig | None:
    from servesim.engine.speculative import SpeculativeConfig

    raw = fixed.get("speculative_config")
    return None if raw is None else SpeculativeConfig.model_validate(raw)


def _current(request: TuneRequest, mml: int, fixed: dict[str, Any]) -> Deployment | None:
    """The user's configuration as the study's baseline: the deployment's engine keys beyond the
    study-wide ones (None when it sets none, or ``request.baseline`` is off: vllm serve's defaults)."""
    from servesim.tuning import Deployment

    spec = request.deployment
    if not request.baseline or not set(spec.engine) - STUDY_KEYS:
        return None
    engine = {**spec.engine, "max_model_len": mml, "policy": fixed["policy"]}
    return Deployment.from_spec(spec.model_copy(update={"engine": engine}), mml)


def tune(request: TuneRequest, *, progress: Progress | None = None) -> TuneAnswer:
    """``prepare`` and ``run``: the answer to "which vLLM settings, TP and replicas serve this
    traffic within this SLO on the fewest GPUs?"."""
    return prepare(request).run(progress=progress)


__all__ = [
    "DEFAULT_GPU",
    "STUDY_KEYS",
    "BatchScenario",
    "BatchScenarioResult",
    "Deployment",
    "FixedHardware",
    "Hardware",
    "LoadScenario",
    "LoadScenarioResult",
    "PercentileSLO",
    "PerfHardware",
    "PreparedTune",
    "SaturationReport",
    "SchedulerRecommendation",
    "SearchSpace",
    "TuneAnswer",
    "TuneRequest",
    "TuneResult",
    "ab_verdict",
    "hardware_of",
    "parse_space",
    "prepare",
    "recommendation_manifest",
    "record_of",
    "space_from_mapping",
    "trial_deployments",
    "tune",
]
