"""A cluster run: ``ClusterRequest`` -> ``ClusterAnswer`` (replicas behind a router) or
``DisaggregatedAnswer`` (prefill and decode pools).

``servesim cluster``, the web's Run tab with replicas, failures or pools, ``servesim dashboard
--headless`` of a cluster and the demo's cluster step all state the run as a
``servesim.spec.ClusterSpec`` and call ``run_cluster``: the same trace reading, the same
``resolve_cluster`` (every replica through ``servesim.spec.resolve``, the failures drawn and
checked), the same comparison of recovery strategies and the same choice of the run whose charts
are shown. The document is ``servesim.report.documents.cluster_answer_document(answer)`` for all
of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.cluster import POLICIES, FailureEvent, FailurePlan, Replica, RouterSpec
from servesim.cluster.compare import ClusterFile, LinkSpec
from servesim.cluster.config import RouterPolicy
from servesim.cluster.pd import (
    RECOVERY_ACTIONS,
    DisaggSpec,
    PoolSpec,
    link_preset,
    link_presets,
    parse_pool_node,
)
from servesim.cluster.pd.spec import ShortPromptTokens
from servesim.cluster.pd_results import LEGS, PDResult, PDSummary
from servesim.errors import InternalError
from servesim.services.inputs import Progress, TraceInput, dropped_rows_line
from servesim.spec import ClusterSpec, ResolvedCluster, ResolvedDisaggregated, resolve_cluster

if TYPE_CHECKING:
    from servesim.cluster import ClusterResult
    from servesim.cluster.compare import StrategyOutcome
    from servesim.traces import Trace


class ClusterRequest(BaseModel):
    """A cluster run as the user states it (``spec``), and how its trace is read when that is
    not ``spec``'s own name, size and seed (``trace``: ``--strict``, the web's stored copy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: ClusterSpec
    trace: TraceInput | None = Field(None, description="How to read the trace (default: the spec's).")

    def trace_input(self) -> TraceInput:
        if self.trace is not None:
            return self.trace
        s = self.spec
        return TraceInput(source=s.trace, num_requests=s.num_requests, seed=s.seed)


@dataclass(frozen=True)
class PreparedCluster:
    """A cluster request with its trace read and every replica resolved (what will run, said
    before it starts); ``run`` runs it."""

    request: ClusterRequest
    trace: Trace
    resolved: ResolvedCluster

    @property
    def title(self) -> str:
        n = len(self.resolved.replicas)
        return f"{self.request.trace_input().name}: {len(self.trace):,} requests on {n} replicas"

    @property
    def header(self) -> list[str]:
        lines = [f"timed as: {self.resolved.timed_as}"]
        defaults = self.resolved.setups[0].defaults_line
        return [*lines, defaults] if defaults else lines

    @property
    def warnings(self) -> list[str]:
        drops = dropped_rows_line(self.trace.provenance)
        return [*([drops] if drops else []), *(f"warning: {n}" for n in self.resolved.notes)]

    def run(self, *, progress: Progress | None = None, observers: Sequence[Any] = ()) -> ClusterAnswer:
        """Every strategy the spec asks for (``progress``: phase ``simulating``, counted over the
        strategies' runs; ``observers``: their events, e.g. the web's failure timeline)."""
        from servesim.events import ProgressCallback

        watch = list(observers)
        if progress is not None:
            watch.append(ProgressCallback(lambda done, total: progress("simulating", done, total)))
        rows, results = self.resolved.run(self.trace, observers=watch)
        return ClusterAnswer(prepared=self, rows=rows, results=results)

    def answer(self, result: ClusterResult) -> ClusterAnswer:
        """The answer of this cluster run stepped elsewhere (the dashboard's live run of the
        spec's one recovery strategy), as ``run`` would have given it."""
        from servesim.cluster.compare import NO_FAILURE, outcome

        if len(self.resolved.strategies) != 1 or self.resolved.baseline:
            raise InternalError("invariant broken: a live cluster run compares no strategies")
        strategy = self.resolved.strategies[0] if self.resolved.events else NO_FAILURE
        row = outcome(strategy, result, self.resolved.link.context())
        return ClusterAnswer(prepared=self, rows=[row], results={strategy: result})


@dataclass(frozen=True)
class ClusterAnswer:
    """Each strategy's row and result, and the one whose charts are shown."""

    prepared: PreparedCluster
    rows: list[StrategyOutcome]
    results: dict[str, ClusterResult]

    @property
    def shown(self) -> str:
        """The run whose charts are shown: the strategy asked for, or under ``compare`` the one
        that recovers best (lowest E2E p99)."""
        candidates = [r for r in self.rows if r.strategy in self.results]
        if not candidates:
            raise InternalError("invariant broken: a cluster answer without a strategy's result")
        return min(candidates, key=lambda r: r.e2e_p99_ms).strategy

    @property
    def result(self) -> ClusterResult:
        return self.results[self.shown]

    @property
    def spec(self) -> ClusterSpec:
        return self.prepared.request.spec

    @property
    def resolved(self) -> ResolvedCluster:
        return self.prepared.resolved

    @property
    def trace(self) -> Trace:
        return self.prepared.trace

    @property
    def title(self) -> str:
        return self.prepared.title


@dataclass(frozen=True)
class PreparedDisaggregated:
    """Prefill/decode pools with the trace read, every replica resolved and the failures drawn."""

    request: ClusterRequest
    trace: Trace
    resolved: ResolvedDisaggregated

    @property
    def title(self) -> str:
        return f"{self.request.trace_input().name}: {len(self.trace):,} requests, disaggregated"

    @property
    def pools(self) -> DisaggSpec:
        """The pools, link and threshold in the one pool type (the document's ``spec``)."""
        disagg = self.request.spec.disaggregated
        if disagg is None:
            raise InternalError("invariant broken: a disaggregated run without its pools")
        return disagg.pools()

    @property
    def header(self) -> list[str]:
        return [f"timed as: {self.resolved.timed_as}"]

    @property
    def warnings(self) -> list[str]:
        drops = dropped_rows_line(self.trace.provenance)
        return [drops] if drops else []

    def run(self, *, progress: Progress | None = None) -> DisaggregatedAnswer:
        """Both pools on the trace (``progress``: phase ``simulating``, requests)."""
        if progress is not None:
            progress("simulating", 0, len(self.trace))
        result = self.resolved.run(self.trace)
        if progress is not None:
            progress("simulating", len(self.trace), len(self.trace))
        return DisaggregatedAnswer(prepared=self, result=result)

    def answer(self, result: PDResult) -> DisaggregatedAnswer:
        """The answer of this run stepped elsewhere (the dashboard's live run)."""
        return DisaggregatedAnswer(prepared=self, result=result)


@dataclass(frozen=True)
class DisaggregatedAnswer:
    """The pools' result: each request's legs, the pools' figures, failures and recoveries."""

    prepared: PreparedDisaggregated
    result: PDResult

    @property
    def spec(self) -> ClusterSpec:
        return self.prepared.request.spec

    @property
    def trace(self) -> Trace:
        return self.prepared.trace

    @property
    def title(self) -> str:
        return self.prepared.title

    @property
    def pools(self) -> DisaggSpec:
        return self.prepared.pools


def prepare_cluster(
    request: ClusterRequest, *, trace: Trace | None = None
) -> PreparedCluster | PreparedDisaggregated:
    """Read the trace (``trace``: already read by the caller) and resolve the cluster
    (``servesim.spec.resolve_cluster``): replicas behind a router, or prefill/decode pools."""
    trace = request.trace_input().open() if trace is None else trace
    resolved = resolve_cluster(request.spec, trace)
    if isinstance(resolved, ResolvedDisaggregated):
        return PreparedDisaggregated(request=request, trace=trace, resolved=resolved)
    return PreparedCluster(request=request, trace=trace, resolved=resolved)


def prepare_aggregated(request: ClusterRequest, *, trace: Trace | None = None) -> PreparedCluster:
    """``prepare_cluster`` of a cluster without pools (an error otherwise)."""
    prepared = prepare_cluster(request, trace=trace)
    if not isinstance(prepared, PreparedCluster):
        raise InternalError("invariant broken: prefill/decode pools where replicas were expected")
    return prepared


def run_cluster(
    request: ClusterRequest, *, progress: Progress | None = None, observers: Sequence[Any] = ()
) -> ClusterAnswer | DisaggregatedAnswer:
    """``prepare_cluster`` and ``run``: the answer to "what does this trace do on this cluster?"."""
    prepared = prepare_cluster(request)
    if isinstance(prepared, PreparedDisaggregated):
        return prepared.run(progress=progress)
    return prepared.run(progress=progress, observers=observers)


__all__ = [
    "LEGS",
    "POLICIES",
    "RECOVERY_ACTIONS",
    "ClusterAnswer",
    "ClusterFile",
    "ClusterRequest",
    "DisaggSpec",
    "DisaggregatedAnswer",
    "FailureEvent",
    "FailurePlan",
    "LinkSpec",
    "PDResult",
    "PDSummary",
    "PoolSpec",
    "PreparedCluster",
    "PreparedDisaggregated",
    "Replica",
    "RouterPolicy",
    "RouterSpec",
    "ShortPromptTokens",
    "link_preset",
    "link_presets",
    "parse_pool_node",
    "prepare_aggregated",
    "prepare_cluster",
    "run_cluster",
]
