"""A run of one replica: ``SimulateRequest`` -> ``SimulateAnswer``.

``servesim simulate``, the web's Run tab, the dashboard's ``--headless`` and the demo's simulation
step all build a ``SimulateRequest`` and call ``simulate`` (or ``prepare`` then ``run``, to show
what times the steps before a long run starts): the same trace reading, the same
``servesim.spec.resolve`` of the deployment, the same engine call, so the same answer. The answer's
document is ``servesim.report.documents.simulate_document(answer)`` for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.engine import SLO, EngineConfig, SimulationReport, SimulationResult, SimulationSummary
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.records import RECORD_FORMATS, document_chunks, format_for, write_records
from servesim.engine.results import rescore, tokens_per_verifying_step
from servesim.engine.simulate import describe_model
from servesim.engine.speculative import ACCEPTANCE_PRESETS, MAX_SPEC_TOKENS, SpecMethod, SpeculativeConfig
from servesim.errors import InputError
from servesim.services.inputs import Progress, TraceInput, counter, dropped_rows_line
from servesim.spec import DeploymentSpec, PercentileSLO, Rebuild, ResolvedDeployment, resolve_for_trace

if TYPE_CHECKING:
    from servesim.events import Observer
    from servesim.traces import Trace


class SimulateRequest(BaseModel):
    """One trace on one replica of a deployment, judged against an SLO."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: TraceInput
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec)
    slo: PercentileSLO | None = Field(None, description="p99 caps, also per-request goodput thresholds.")
    naive: bool = Field(False, description="The naive loop (the fast path's reference).")
    check_invariants: bool = Field(False, description="Check block/token conservation every step.")

    def request_slo(self) -> SLO | None:
        """The engine's per-request SLO (``good=`` refused: a single run measures its fraction)."""
        return None if self.slo is None else self.slo.per_request()


@dataclass(frozen=True)
class PreparedRun:
    """A request with its trace read and its deployment resolved: what the run will be, said
    before it starts (``header``, ``warnings``); ``run`` runs it."""

    request: SimulateRequest
    trace: Trace
    setup: ResolvedDeployment
    slo: SLO | None
    #: the same deployment resolved again after engine flags change (the dashboard's restart)
    rebuild: Rebuild = field(compare=False)

    @property
    def title(self) -> str:
        """``azure-conv: 19,366 requests``: the trace as named and its size."""
        return f"{self.request.trace.name}: {len(self.trace):,} requests"

    @property
    def header(self) -> list[str]:
        """The first lines of a human-readable answer: what times the steps, the defaults applied."""
        lines = [f"timed as: {self.setup.timed_as}"]
        if self.setup.defaults_line:
            lines.append(self.setup.defaults_line)
        return lines

    @property
    def warnings(self) -> list[str]:
        """Skipped trace rows and the step-time model's extrapolation notes (stderr lines)."""
        drops = dropped_rows_line(self.trace.provenance)
        return [*([drops] if drops else []), *(f"warning: {n}" for n in self.setup.notes)]

    def run(self, *, progress: Progress | None = None, observers: Sequence[Observer] = ()) -> SimulateAnswer:
        """Simulate (``progress``: phase ``simulating``; ``observers``: the run's events, e.g. a
        step log)."""
        from servesim.engine import simulate as engine_simulate

        req = self.request
        if self.setup.spec.data_parallel_size > 1:  # D rank engines (servesim.spec.data_parallel)
            from servesim.spec.data_parallel import run_data_parallel, simulation_result

            group, stats = run_data_parallel(
                self.trace, self.setup, self.slo, fast=not req.naive, observers=observers
            )
            return SimulateAnswer(prepared=self, result=simulation_result(group, self.setup, stats))
        result = engine_simulate(
            self.trace,
            self.setup.config,
            self.setup.step_time,
            slo=self.slo,
            fast=not req.naive,
            observers=observers,
            check_invariants=req.check_invariants,
            kv_connector=self.setup.kv_connector(),
            progress=counter(progress, "simulating"),
        )
        return SimulateAnswer(prepared=self, result=result)


@dataclass(frozen=True)
class SimulateAnswer:
    """The run's result, with what produced it."""

    prepared: PreparedRun
    result: SimulationResult

    @property
    def request(self) -> SimulateRequest:
        return self.prepared.request

    @property
    def trace(self) -> Trace:
        return self.prepared.trace

    @property
    def setup(self) -> ResolvedDeployment:
        return self.prepared.setup

    @property
    def title(self) -> str:
        return self.prepared.title

    @property
    def data_parallel_line(self) -> str | None:
        """What the DP ranks did, in one line (None: no data parallelism)."""
        from servesim.spec.data_parallel import data_parallel_line

        stats = self.result.step_time_model.get("data_parallel")
        return None if stats is None else data_parallel_line(stats)


def prepare(request: SimulateRequest, *, trace: Trace | None = None) -> PreparedRun:
    """Read the trace and resolve the deployment (``servesim.spec.resolve``: vllm serve's defaults
    on the GPU, the KV cache sized for the trace's longest request unless the engine sets
    ``max_model_len``); the SLO is checked first, so a bad one fails before any work.
    ``trace``: the request's trace, when the caller has read it already (the demo reads the real
    hour once, to inspect it and to simulate it)."""
    slo = request.request_slo()
    trace = request.trace.open() if trace is None else trace
    setup, rebuild = resolve_for_trace(request.deployment, trace)
    return PreparedRun(request=request, trace=trace, setup=setup, slo=slo, rebuild=rebuild)


def simulate(
    request: SimulateRequest, *, progress: Progress | None = None, observers: Sequence[Observer] = ()
) -> SimulateAnswer:
    """``prepare`` and ``run``: the answer to "what does this trace do on this deployment?"."""
    return prepare(request).run(progress=progress, observers=observers)


def rescore_stored(
    summary: Mapping[str, Any], requests_file: Path, trace_file: Path, slo: PercentileSLO | None
) -> SimulationSummary:
    """A finished single-replica run judged against another SLO without re-simulating: its stored
    per-request records (Parquet) and its trace's per-request SLAs through
    ``servesim.engine.results.rescore`` (the good-request test and goodput of ``simulate``
    itself). Why here: re-scoring is a question of its own (the web's SLO slider asks it), and
    its answer must be the engine's, not an interface's. The stored run is not changed."""
    import pyarrow.parquet as pq

    from servesim.traces import load_trace

    records = pq.read_table(requests_file).to_pandas()
    sla = load_trace(trace_file).df
    if len(sla) != len(records):
        raise InputError(
            f"the run's trace has {len(sla):,} requests and its records {len(records):,}: "
            "it is not the trace the run simulated"
        )
    stored = SimulationSummary.model_validate(summary)
    return rescore(
        stored,
        records,
        slo.per_request() if slo is not None else None,
        sla["sla_ttft_ms"].to_numpy(dtype="float64"),
        sla["sla_e2e_ms"].to_numpy(dtype="float64"),
    )


__all__ = [
    "ACCEPTANCE_PRESETS",
    "MAX_SPEC_TOKENS",
    "RECORD_FORMATS",
    "SLO",
    "EngineConfig",
    "OffloadingConnector",
    "PreparedRun",
    "SimulateAnswer",
    "SimulateRequest",
    "SimulationReport",
    "SimulationResult",
    "SimulationSummary",
    "SpecMethod",
    "SpeculativeConfig",
    "describe_model",
    "document_chunks",
    "format_for",
    "prepare",
    "rescore_stored",
    "simulate",
    "tokens_per_verifying_step",
    "write_records",
]
