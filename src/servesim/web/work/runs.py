"""Simulation jobs: one replica (``servesim.simulate``) or a cluster with failures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from servesim.errors import InputError
from servesim.events import (
    EventRecorder,
    RecoveryDecision,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
)
from servesim.services.deployment import DeploymentSpec, PercentileSLO, ResolvedDeployment
from servesim.services.inputs import TraceInput
from servesim.services.run import SimulateRequest, SimulationResult, SimulationSummary, prepare
from servesim.services.traces import Trace, TraceProvenance
from servesim.web.defaults import setup_notes
from servesim.web.schemas import SimulateBody
from servesim.web.work import Env, Report, trace_path

if TYPE_CHECKING:
    from servesim.views.model import Section


def deployment(spec: DeploymentSpec, trace: Trace | int) -> ResolvedDeployment:
    """The request's deployment through ``servesim.spec.resolve``, as every interface runs it:
    ``vllm serve``'s defaults for the keys it left out, vLLM's KV sizing on the chosen
    model/GPU/TP, the calibrated step times. ``trace`` (or the longest request's length + 1)
    gives ``max_model_len`` when the engine sets none."""
    from servesim.web.defaults import resolved

    return resolved(spec, trace if isinstance(trace, int) else trace.default_max_model_len())


def simulate_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    body = SimulateBody.model_validate(params)
    if body.disaggregated is not None:
        return _disaggregated(body, env, report)
    if body.deployment.replicas > 1 or body.failures:
        return _cluster(body, env, report)
    # ``servesim simulate``'s request and service: the same answer and document for the same run
    request = SimulateRequest(trace=trace_input(body.trace_id, env), deployment=body.deployment, slo=body.slo)
    answer = prepare(request).run(progress=lambda _phase, done, total, _detail=None: report(done, total))
    save_requests(answer.result.to_pandas(), env)
    from servesim.report.documents import simulate_document
    from servesim.views.simulation import simulation_view

    # One simulation view for the page and the document (it differs only in its title): building
    # it is the costliest view of a long run.
    view = simulation_view(answer.result, title=answer.title)
    out = run_result(
        answer.result, setup_notes(answer.setup), view.model_copy(update={"title": "simulation"})
    )
    out["document"] = simulate_document(answer, view=view)
    return out


def trace_input(trace_id: str, env: Env) -> TraceInput:
    """A stored trace as a request's ``TraceInput``: named as it was uploaded, with the provenance
    it was read with then (format, notes, skipped rows), kept beside it at ingest (a trace stored
    by an older servesim has only its name)."""
    path = trace_path(env, trace_id)
    sidecar = path.with_name(f"{path.stem}.provenance.json")
    provenance = TraceProvenance.model_validate_json(sidecar.read_bytes()) if sidecar.exists() else None
    return TraceInput(source=str(path), label=env.get("trace_name") or None, provenance=provenance)


#: The percentile switcher's choices (every LatencyStats percentile).
PERCENTILES = ("p50", "p90", "p95", "p99")


def kpis_by_percentile(summary: SimulationSummary, *, prefix: bool = True) -> dict[str, list[dict[str, Any]]]:
    """The KPI tiles at each percentile, so the page switches without asking the server, and (a
    one-replica run's: ``prefix``) the prefix-cache hit rate's tile when prefix caching was on."""
    from servesim.views.simulation import kpis, prefix_cache_kpi

    tile = prefix_cache_kpi(summary) if prefix else None
    extra = [tile.model_dump(mode="json")] if tile is not None else []
    return {p: [k.model_dump(mode="json") for k in kpis(summary, p)] + extra for p in PERCENTILES}


def run_result(result: SimulationResult, notes: list[str], view: Section | None = None) -> dict[str, Any]:
    """The stored answer of one run: its config, summary and the views the page draws (``view``:
    its ``simulation_view`` when already built)."""
    from servesim.views.simulation import (
        prefix_cache_kpi,
        prefix_hit_series,
        queue_by_reason,
        simulation_view,
    )
    from servesim.views.sparklines import kpi_sparklines

    view = simulation_view(result) if view is None else view
    hit_rate = prefix_hit_series(result)
    tile = prefix_cache_kpi(result.summary)
    more = [*queue_by_reason(result), *([hit_rate] if hit_rate is not None else [])]
    tiles = [*view.kpis, *([tile] if tile is not None else [])]
    view = view.model_copy(update={"series": [*view.series, *more], "kpis": tiles})
    return {
        "config": result.config.model_dump(mode="json"),
        "step_time_model": _jsonable(result.step_time_model),
        "summary": result.summary.model_dump(mode="json"),
        "sections": [view.model_dump(mode="json")],
        "kpis": kpis_by_percentile(result.summary),
        "sparklines": {k: v.model_dump(mode="json") for k, v in kpi_sparklines(result).items()},
        "notes": notes,
    }


def save_requests(requests: pd.DataFrame, env: Env) -> None:
    """Per-request records for the CSV download: Parquet (small, typed) streamed in row groups
    by the CLI's writer (``servesim.engine.records``: the ``--json`` fields, plus a cluster's
    ``replica``), which the download turns into CSV a batch at a time."""
    from servesim.services.run import write_records

    write_records(env["requests_file"], requests, "parquet", extra=True)


def _cluster(body: SimulateBody, env: Env, report: Report) -> dict[str, Any]:
    """A cluster run: the body as the ``ClusterSpec`` ``servesim cluster --recovery R`` builds,
    answered by ``servesim.services.cluster``; its document is the CLI's."""
    from servesim.report.documents import cluster_answer_document
    from servesim.services.cluster import ClusterRequest, prepare_aggregated
    from servesim.services.deployment import ClusterSpec

    spec = ClusterSpec(
        trace=env.get("trace_name") or body.trace_id,
        deployment=body.deployment,
        failures=body.failures,
        recovery=body.recovery,
        slo=body.slo,
    )
    request = ClusterRequest(spec=spec, trace=trace_input(body.trace_id, env))
    timeline = EventRecorder(ReplicaWarning, ReplicaDown, ReplicaUp, RecoveryDecision)
    answer = prepare_aggregated(request).run(
        progress=lambda _phase, done, total, _detail=None: report(done, total), observers=[timeline]
    )
    result = answer.result
    save_requests(result.to_pandas(), env)
    from servesim.views.timeline import failure_timeline

    document = cluster_answer_document(answer)
    # the page shows the document's views (the fleet's, then each replica's) and the failures'
    # timeline after the fleet's; the document keeps the CLI's sections
    views = document["sections"]
    sections = [views[0], failure_timeline(timeline.events).model_dump(mode="json"), *views[1:]]
    summary = result.summary
    return {
        "config": answer.resolved.setups[0].config.model_dump(mode="json"),
        "summary": summary.cluster.model_dump(mode="json"),
        "cluster": summary.model_dump(mode="json", exclude={"replicas", "cluster"}),
        "sections": sections,
        "kpis": kpis_by_percentile(summary.cluster, prefix=False),  # the fleet section's tiles
        "notes": setup_notes(answer.resolved.setups[0]),
        "document": document,
    }


def _disaggregated(body: SimulateBody, env: Env, report: Report) -> dict[str, Any]:
    """Prefill and decode pools: the body as the ``ClusterSpec`` ``servesim cluster
    --prefill-replicas N --decode-replicas M`` builds (``DisaggregatedSpec.of_pools`` of the pools
    as the flags state them), answered by ``servesim.services.cluster``; its document is the
    CLI's."""
    from servesim.report.documents import cluster_answer_document
    from servesim.services.cluster import ClusterRequest, PreparedDisaggregated, prepare_cluster
    from servesim.services.deployment import ClusterSpec, DisaggregatedSpec

    pools = body.pools()
    spec = ClusterSpec(
        trace=env.get("trace_name") or body.trace_id,
        disaggregated=DisaggregatedSpec.of_pools(pools, body.deployment.gpu, body.shared()),
        failures=body.failures,
        slo=body.slo,
    )
    prepared = prepare_cluster(ClusterRequest(spec=spec, trace=trace_input(body.trace_id, env)))
    if not isinstance(prepared, PreparedDisaggregated):
        raise InputError("a disaggregated run resolved without its pools")
    answer = prepared.run(progress=lambda _phase, done, total, _detail=None: report(done, total))
    _save_pd_requests(answer.result, env)
    doc = cluster_answer_document(answer)
    return {
        "disaggregated": answer.result.summary.model_dump(mode="json"),
        "sections": doc["sections"],
        "notes": [f"timed as: {prepared.resolved.timed_as}"],
        "document": doc,
    }


def _save_pd_requests(result: Any, env: Env) -> None:
    """Every request's legs for the CSV download (``PDRequestRow``'s fields, in Parquet)."""
    rows = [r.model_dump(mode="json") for r in result.requests]
    for r in rows:
        r["recovered"] = ";".join(r["recovered"])
    pd.DataFrame(rows).to_parquet(env["requests_file"], index=False)


def _jsonable(value: Any) -> Any:
    import orjson

    return orjson.loads(orjson.dumps(value, default=str))


#: What the page says under a re-scored run's figures.
RESCORED_NOTE = "recomputed from the stored per-request records, not re-simulated"


def rescore_run(
    summary: dict[str, Any],
    requests_file: Path,
    trace_file: Path,
    slo: PercentileSLO | None,
    *,
    fleet: bool = False,
) -> dict[str, Any]:
    """A finished single-replica run judged against another SLO, without re-simulating: its stored
    per-request records (``save_requests``) and its trace's per-request SLAs re-scored by
    ``servesim.services.run.rescore_stored`` (the good-request test and goodput of ``simulate``
    itself), then the same KPIs, verdicts and tables as the run's page (``fleet``: a cluster run's fleet,
    whose tiles are the fleet section's). The stored run is not changed."""
    from servesim.services.run import rescore_stored
    from servesim.views.simulation import summary_view

    scored = rescore_stored(summary, requests_file, trace_file, slo)
    view = summary_view(scored, title="simulation")
    return {
        "slo": slo.model_dump(mode="json") if slo is not None else None,
        "summary": scored.model_dump(mode="json"),
        "kpis": kpis_by_percentile(scored, prefix=not fleet),
        "sections": [view.model_dump(mode="json")],
        "note": RESCORED_NOTE,
    }
