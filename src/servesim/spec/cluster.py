"""``ClusterSpec``: one cluster run as the user states it, and ``resolve_cluster``: what it runs.

A cluster run is "this trace on N replicas of this deployment (or these named replicas, each with
its own vLLM keys), behind this router, with these node failures, recovered this way", or, for
prefill/decode disaggregation, "N prefill replicas of one deployment and M decode replicas of
another, over this KV-transfer link". The CLI's ``servesim cluster`` builds it from its flags and
files, the web's run form from its body; ``resolve_cluster`` turns it into the replicas
(``servesim.spec.resolve`` each: ``vllm serve``'s defaults on the GPU, KV sized for the trace),
the router, the failure events (listed, plus seeded MTBF ones), the migration link and the
strategies to compare, or the two pools and the transfer model; the result document records the
spec as its ``run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servesim.cluster.compare import LinkSpec, StrategyOutcome, compare_recovery, failure_events
from servesim.cluster.config import FailureEvent, KVCheckpointing, RouterSpec
from servesim.cluster.pd import DisaggSpec, PDCluster, PoolSpec, parse_pool_node, pd_context
from servesim.cluster.pd.spec import ShortPromptTokens
from servesim.cluster.pd_results import PDResult, pd_result
from servesim.cluster.recovery import RecoveryContext
from servesim.cluster.results import ClusterResult
from servesim.cluster.simulate import Replica
from servesim.engine.results import SLO
from servesim.errors import ConfigError, InputError, describe, shown
from servesim.perf.setup import DEFAULT_MODEL, DEFAULT_TP
from servesim.spec.deployment import DeploymentSpec, ResolvedDeployment, resolve_replicas
from servesim.spec.slo import PercentileSLO
from servesim.traces.schema import Trace

#: How interrupted requests are recovered: every strategy against a run without a failure
#: (``compare``), or one of them.
Recovery = Literal["compare", "planner", "migrate", "restart"]
STRATEGIES = ("planner", "migrate", "restart")


class NamedReplica(BaseModel):
    """One replica of a heterogeneous cluster: its name and the vLLM keys it sets over the
    deployment's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=100)
    engine: dict[str, Any] = Field(default_factory=dict, description="vLLM keys (EngineConfig names).")


class MigrationLink(BaseModel):
    """The network KV migrates over between replicas (the model whose KV moves is the
    deployment's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    bandwidth_gbps: float = Field(10.0, gt=0, allow_inf_nan=False, description="Per TP rank, Gbit/s.")
    transfer_efficiency: float = Field(0.9, gt=0, le=1)
    setup_latency_ms: float = Field(10.0, ge=0, allow_inf_nan=False)
    kv_checkpointing: KVCheckpointing = "continuous"


class DisaggregatedSpec(BaseModel):
    """Prefill/decode disaggregation: ``prefill.replicas`` replicas of the prefill deployment,
    ``decode.replicas`` of the decode one, KV moved over a link preset. Each pool is a deployment
    within the one pool type's bounds (``cluster.pd.PoolSpec``: replicas, GPU, TP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill: DeploymentSpec = Field(default_factory=DeploymentSpec)
    decode: DeploymentSpec = Field(default_factory=DeploymentSpec)
    link: str = Field(
        "rdma-400g", min_length=1, description="KV-transfer link preset (data/perf/links.yaml)."
    )
    short_prompt_tokens: ShortPromptTokens = 0

    @model_validator(mode="after")
    def _one_model(self) -> DisaggregatedSpec:
        a, b = self.prefill.model or DEFAULT_MODEL, self.decode.model or DEFAULT_MODEL
        if a != b:
            raise ConfigError(
                f"disaggregated.decode.model {shown(b)} differs from disaggregated.prefill.model "
                f"{shown(a)}: both pools serve one model"
            )
        return self

    @model_validator(mode="after")
    def _one_kv_dtype(self) -> DisaggregatedSpec:
        a, b = (p.engine.get("kv_cache_dtype", "auto") for p in (self.prefill, self.decode))
        if a != b:
            raise ConfigError(
                f"disaggregated.decode kv_cache_dtype {shown(b)} differs from the prefill pool's "
                f"{shown(a)}: the KV moves between the pools as it is stored; give both the same"
            )
        return self

    @model_validator(mode="after")
    def _pools_bounded(self) -> DisaggregatedSpec:
        for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
            try:
                PoolSpec(replicas=pool.replicas, gpu=pool.gpu, tp=pool.tp)
            except ValidationError as e:
                raise ConfigError(f"{name}.{describe(e)}") from None
        return self

    @property
    def model(self) -> str:
        """The served model (its KV bytes set each transfer's size)."""
        return self.prefill.model or DEFAULT_MODEL

    @property
    def kv_dtype(self) -> str:
        """Both pools' ``kv_cache_dtype``: the bytes a transferred token's KV takes."""
        return str(self.prefill.engine.get("kv_cache_dtype", "auto"))

    @classmethod
    def of_pools(cls, pools: DisaggSpec, gpu: str | None, timing: dict[str, Any]) -> DisaggregatedSpec:
        """The pools as given (a cluster file's ``prefill``/``decode``, the CLI's flags, the web's
        form): each a ``DeploymentSpec`` of the served model on its GPU (the pool's, else
        ``gpu``), its replica count and vLLM keys; ``timing``: the ``DeploymentSpec`` fields both
        pools share (``step_time_ms`` / ``linear_step_time``, the web's memory share). The one way
        every interface states a disaggregated cluster."""
        made: dict[str, DeploymentSpec] = {}
        for name, pool in (("prefill", pools.prefill), ("decode", pools.decode)):
            made[name] = DeploymentSpec(
                model=pools.model,
                gpu=pool.gpu or gpu,
                tp=pool.tp,
                replicas=pool.replicas,
                engine={str(k).replace("-", "_"): v for k, v in pool.config.items()},
                **timing,
            )
        return cls(**made, link=pools.link, short_prompt_tokens=pools.short_prompt_tokens)

    def pools(self) -> DisaggSpec:
        """The pools in the one pool type (``cluster.pd.PoolSpec``: replicas, GPU, TP, vLLM keys),
        with the link, the short-prompt threshold and the served model: what the run's document
        and views show as its ``spec``."""
        made = {
            name: PoolSpec(replicas=d.replicas, gpu=d.gpu, tp=d.tp, config=dict(d.engine))
            for name, d in (("prefill", self.prefill), ("decode", self.decode))
        }
        return DisaggSpec(
            **made, link=self.link, short_prompt_tokens=self.short_prompt_tokens, model=self.model
        )


class ClusterSpec(BaseModel):
    """A cluster run: the trace, the replicas' deployment (``deployment.replicas`` identical
    ones n0..n{N-1}, or ``replicas`` named ones), the router, the failures and how they are
    recovered, the SLO and the seed; or, with ``disaggregated``, the prefill and decode pools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str = Field(min_length=1, description="Trace file, bundled trace or generator preset.")
    num_requests: int | None = Field(None, ge=0, description="Requests to generate (presets only).")
    seed: int = Field(0, ge=0, description="Seed of generated traces, random routers and MTBF failures.")
    deployment: DeploymentSpec = Field(
        default_factory=lambda: DeploymentSpec(replicas=2),
        description="What every replica runs (model, GPU, TP, vLLM keys) and how many.",
    )
    replicas: list[NamedReplica] | None = Field(
        None, min_length=1, description="Named replicas, each its vLLM keys over the deployment's."
    )
    router: RouterSpec | None = Field(
        None, description="The router's settings (default: deployment.router with its defaults)."
    )
    link: MigrationLink = Field(default_factory=MigrationLink)
    failures: list[FailureEvent] = Field(default_factory=list, description="Node failures, in any order.")
    mtbf_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Random failures per node with this MTBF (s)."
    )
    warning_s: float = Field(0.0, ge=0, allow_inf_nan=False, description="MTBF failures' warning (s).")
    recover_after_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="MTBF failures' nodes come back after (s)."
    )
    recovery: Recovery = "compare"
    slo: PercentileSLO | None = Field(None, description="p99 caps (also per-request goodput thresholds).")
    disaggregated: DisaggregatedSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        dep = self.deployment
        if self.router is not None and self.router.policy != dep.router and "router" in dep.model_fields_set:
            raise ConfigError(
                f"router.policy {shown(self.router.policy)} differs from deployment.router "
                f"{shown(dep.router)}: give one"
            )
        if self.slo is not None and self.slo.min_good_fraction is not None:
            raise ConfigError(
                "slo.min_good_fraction is judged by saturate and tune; a single cluster run reports "
                "the good fraction it measured: leave it out"
            )
        if self.disaggregated is not None:
            self._pools_fail_as_listed(self.disaggregated)
        if self.replicas is not None:
            names = [r.name for r in self.replicas]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ConfigError(f"replicas: name {shown(twice[0])} is given twice")
        return self

    def _pools_fail_as_listed(self, disagg: DisaggregatedSpec) -> None:
        """A disaggregated cluster's failures name its replicas (``p0``/``d1`` or ``prefill:0``)
        and come unannounced (an announced failure is not modelled for the pools)."""
        if self.warning_s > 0 or any(f.warning_s > 0 for f in self.failures):
            raise ConfigError("warning_s: announced failures are not modelled for prefill/decode pools")
        pools = disagg.prefill.replicas, disagg.decode.replicas
        for i, f in enumerate(self.failures):
            try:
                parse_pool_node(f.node, *pools)
            except InputError as e:
                raise ConfigError(f"failures[{i}].node: {e}") from None

    @property
    def route(self) -> RouterSpec:
        """The router that spreads the arrivals."""
        return self.router if self.router is not None else RouterSpec(policy=self.deployment.router)

    def replica_keys(self) -> list[tuple[str, dict[str, Any]]]:
        """Each replica's name and the vLLM keys it sets."""
        if self.replicas is not None:
            return [(r.name, {**self.deployment.engine, **r.engine}) for r in self.replicas]
        return [(f"n{i}", dict(self.deployment.engine)) for i in range(self.deployment.replicas)]

    def link_spec(self) -> LinkSpec:
        """The migration link with the model whose KV moves and its TP degree."""
        dtypes = {keys.get("kv_cache_dtype", "auto") for _, keys in self.replica_keys()}
        if len(dtypes) > 1:
            raise ConfigError(
                f"replicas differ in kv_cache_dtype ({', '.join(sorted(map(str, dtypes)))}): KV migrates "
                "between replicas as it is stored; give every replica the same"
            )
        return LinkSpec(
            model=self.deployment.model or DEFAULT_MODEL,
            tp=self.deployment.tp or DEFAULT_TP,
            kv_dtype=str(dtypes.pop()),
            **self.link.model_dump(),
        )


@dataclass(frozen=True)
class ResolvedCluster:
    """What ``cluster.compare_recovery`` / ``simulate_cluster`` run: the replicas and their setups,
    the router, the failure events, the link and the strategies (``baseline``: also a run
    without a failure)."""

    spec: ClusterSpec
    replicas: list[Replica]
    setups: list[ResolvedDeployment]
    router: RouterSpec
    events: list[FailureEvent]
    link: LinkSpec
    strategies: list[str]
    baseline: bool
    slo: SLO | None
    #: one ``vllm serve --data-parallel-size`` deployment: its ranks are ``replicas`` (None: replicas
    #: of a TP deployment behind ``router``)
    data_parallel: ResolvedDeployment | None = None

    @property
    def timed_as(self) -> str:
        return self.setups[0].timed_as + ("" if len(self.setups) == 1 else " (each replica)")

    @property
    def notes(self) -> list[str]:
        """The extrapolation warnings of every replica, each once."""
        return list(dict.fromkeys(n for s in self.setups for n in s.notes))

    def run(
        self, trace: Trace, *, observers: Sequence[Any] = ()
    ) -> tuple[list[StrategyOutcome], dict[str, ClusterResult]]:
        """``cluster.compare_recovery`` of this cluster on ``trace``: the rows (the no-failure
        baseline first when asked) and each strategy's result, as every interface runs it. A
        data-parallel deployment runs its ranks (``spec.data_parallel``), without failures."""
        if self.data_parallel is not None:
            from servesim.cluster.compare import NO_FAILURE, outcome
            from servesim.spec.data_parallel import run_data_parallel

            result, _ = run_data_parallel(trace, self.data_parallel, self.slo, observers=observers)
            return [outcome(NO_FAILURE, result, self.link.context())], {NO_FAILURE: result}
        return compare_recovery(
            trace,
            self.replicas,
            self.router,
            self.events,
            self.link,
            self.strategies,
            slo=self.slo,
            baseline=self.baseline,
            observers=observers,
        )


@dataclass(frozen=True)
class ResolvedDisaggregated:
    """What ``cluster.pd.PDCluster`` runs: the two pools, the transfer model, the short-prompt
    threshold, each pool's ``timed as``, and the SLO its requests are judged by."""

    spec: ClusterSpec
    prefill: list[Replica]
    decode: list[Replica]
    context: RecoveryContext
    short_prompt_tokens: int
    timed_as: str
    slo: SLO | None = None  # the per-request thresholds of the spec's SLO (goodput), if any
    #: the failures as run: the listed ones under their replica names, plus seeded MTBF draws
    events: tuple[FailureEvent, ...] = ()

    def run(self, trace: Trace) -> PDResult:
        """``PDCluster`` of these pools on ``trace``, summed up (``pd_result``, judged by the
        spec's SLO): the one call of every interface (CLI, web)."""
        run = PDCluster(
            trace,
            self.prefill,
            self.decode,
            self.context,
            short_prompt_tokens=self.short_prompt_tokens,
            failures=list(self.events),
        ).run()
        return pd_result(run, self.context.bytes_total(1), self.slo)


def pool_failures(listed: Sequence[FailureEvent], n_prefill: int, n_decode: int) -> list[FailureEvent]:
    """Failures of a disaggregated cluster's replicas with each node under its replica name
    (``prefill:0`` is ``p0``, ``decode:1`` is ``d1``), as the CLI's ``--fail`` and the web's form
    name them; an unknown replica raises ``InputError`` naming it and the pool's size."""
    out = []
    for f in listed:
        pool, k = parse_pool_node(f.node, n_prefill, n_decode)
        out.append(f.model_copy(update={"node": f"{pool[0]}{k}"}))
    return out


def runnable_deployment(spec: DeploymentSpec) -> DeploymentSpec:
    """The deployment as its replicas resolve it: a fixed or linear step time keeps no model,
    GPU timing or TP (they size only what KV moves)."""
    if spec.fixed_timing:
        return spec.model_copy(update={"model": None, "tp": None})
    return spec


def resolve_cluster(
    spec: ClusterSpec, trace: Trace, *, extra_failures: Sequence[FailureEvent] = ()
) -> ResolvedCluster | ResolvedDisaggregated:
    """The one way a ``ClusterSpec`` becomes a run: every replica through ``resolve`` (its KV
    sized for ``trace``), the failure events checked against the replicas' names, the link's
    model known. Raises ``ConfigError``/``InputError``/``PerfError`` (``ServesimError``) naming
    the field. ``extra_failures``: events stated outside the spec (none for a spec read back)."""
    deployments = [spec.deployment]
    if spec.disaggregated is not None:
        deployments = [spec.disaggregated.prefill, spec.disaggregated.decode]
    if any(d.data_parallel_size > 1 or d.enable_expert_parallel for d in deployments):
        return _resolve_data_parallel(spec, trace, extra_failures)
    if spec.disaggregated is not None:
        return _resolve_disaggregated(spec, trace)
    link = spec.link_spec()
    link.context()  # an unknown model is refused before anything runs
    base = runnable_deployment(spec.deployment)
    resolved = resolve_replicas(base, spec.replica_keys(), trace)
    replicas = [rep for rep, _ in resolved]
    names = [r.name for r in replicas]
    listed = [*spec.failures, *extra_failures]
    for i, e in enumerate(listed):
        if e.node not in names:
            raise ConfigError(
                f"failures[{i}].node {shown(e.node)} is not a replica; the replicas are {', '.join(names)}"
            )
    events = failure_events(
        listed,
        names,
        trace,
        mtbf_s=spec.mtbf_s,
        warning_s=spec.warning_s,
        recover_after_s=spec.recover_after_s,
        seed=spec.seed,
    )
    compare = spec.recovery == "compare"
    return ResolvedCluster(
        spec=spec,
        replicas=replicas,
        setups=[s for _, s in resolved],
        router=spec.route,
        events=events,
        link=link,
        strategies=list(STRATEGIES) if compare else [spec.recovery],
        baseline=compare,
        slo=spec.slo.request_slo() if spec.slo is not None else None,
    )


def _resolve_data_parallel(
    spec: ClusterSpec, trace: Trace, extra_failures: Sequence[FailureEvent]
) -> ResolvedCluster:
    """One ``vllm serve --data-parallel-size D`` deployment as a cluster of its D ranks (``dp0``
    ...), behind vLLM's DP load balancer; what is not modelled for it is refused, naming the field."""
    from servesim.spec.data_parallel import rank_replicas

    dep = spec.deployment
    if spec.disaggregated is not None:
        raise ConfigError(
            "data_parallel_size / enable_expert_parallel: prefill/decode pools of data-parallel "
            "deployments are not modelled"
        )
    if spec.replicas is not None or dep.replicas != 1:
        raise ConfigError(
            "deployment.data_parallel_size: one vllm serve of D ranks is one replica (its ranks are "
            "the cluster's nodes): give --replicas 1; DP groups behind a router are not modelled"
        )
    if spec.failures or extra_failures or spec.mtbf_s is not None:
        raise ConfigError("failures: node failures of data-parallel ranks are not modelled")
    [(_, resolved)] = resolve_replicas(runnable_deployment(dep), [("dp", dict(dep.engine))], trace)
    return ResolvedCluster(
        spec=spec,
        replicas=rank_replicas(resolved),
        setups=[resolved],
        router=RouterSpec(policy="vllm_dp"),
        events=[],
        link=spec.link_spec(),
        strategies=[],
        baseline=False,
        slo=spec.slo.request_slo() if spec.slo is not None else None,
        data_parallel=resolved,
    )


def _resolve_disaggregated(spec: ClusterSpec, trace: Trace) -> ResolvedDisaggregated:
    disagg = spec.disaggregated
    if disagg is None:
        raise ConfigError("not a disaggregated cluster")
    ctx = pd_context(disagg.model, disagg.prefill.tp, disagg.decode.tp, disagg.link, disagg.kv_dtype)
    pools: list[list[Replica]] = []
    timed: list[str] = []
    for tag, pool in (("p", disagg.prefill), ("d", disagg.decode)):
        base = runnable_deployment(pool)
        keys = [(f"{tag}{i}", dict(pool.engine)) for i in range(pool.replicas)]
        resolved = resolve_replicas(base, keys, trace)
        pools.append([rep for rep, _ in resolved])
        timed.append(resolved[0][1].timed_as)
    return ResolvedDisaggregated(
        spec=spec,
        prefill=pools[0],
        decode=pools[1],
        context=ctx,
        short_prompt_tokens=disagg.short_prompt_tokens,
        timed_as=f"prefill {timed[0]}; decode {timed[1]}",
        slo=spec.slo.request_slo() if spec.slo is not None else None,
        events=tuple(_pool_events(spec, disagg, trace)),
    )


def _pool_events(spec: ClusterSpec, disagg: DisaggregatedSpec, trace: Trace) -> list[FailureEvent]:
    """The pools' failures as run: the listed ones under their replica names (``prefill:0`` is
    ``p0``) plus, with ``mtbf_s``, seeded random ones per replica over the trace's span, checked
    as one plan (a replica failing while down is refused, naming it)."""
    n_p, n_d = disagg.prefill.replicas, disagg.decode.replicas
    nodes = [f"p{i}" for i in range(n_p)] + [f"d{i}" for i in range(n_d)]
    try:
        return failure_events(
            pool_failures(spec.failures, n_p, n_d),
            nodes,
            trace,
            mtbf_s=spec.mtbf_s,
            recover_after_s=spec.recover_after_s,
            seed=spec.seed,
        )
    except ValidationError as e:  # the plan's own check
        raise ConfigError(f"failures: {describe(e)}") from None
    except ValueError as e:  # worded as the aggregated cluster's plan words it
        raise ConfigError(str(e)) from None


__all__ = [
    "STRATEGIES",
    "ClusterSpec",
    "DisaggregatedSpec",
    "MigrationLink",
    "NamedReplica",
    "Recovery",
    "ResolvedCluster",
    "ResolvedDisaggregated",
    "pool_failures",
    "resolve_cluster",
    "runnable_deployment",
]
