"""Simulation jobs: one replica (``servesim.simulate``) or a cluster with failures."""

from __future__ import annotations

from typing import Any

import pandas as pd

from servesim.engine import EngineConfig, SimulationResult, SimulationSummary, StepTimeModel, simulate
from servesim.errors import InputError
from servesim.events import (
    EventRecorder,
    ProgressCallback,
    RecoveryDecision,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
)
from servesim.traces import Trace, load_trace
from servesim.web.schemas import HardwareBody, SimulateBody
from servesim.web.work import Env, Report, trace_path


def deployment(
    engine: EngineConfig, hw: HardwareBody, trace: Trace | int
) -> tuple[EngineConfig, StepTimeModel, list[str]]:
    """Step times and KV blocks of the chosen model/GPU/TP: ``servesim.replica_setup``, the one
    deployment setup every interface uses (the catalog's roofline, vLLM's KV sizing). ``trace``
    (or the longest request's length + 1) gives ``max_model_len`` when the engine sets none."""
    from servesim.perf.setup import replica_setup

    given = hw.num_gpu_blocks_override is not None
    if given:
        engine = engine.model_copy(update={"num_gpu_blocks": hw.num_gpu_blocks_override})
    setup = replica_setup(
        engine,
        model=hw.model,
        gpu=hw.gpu,
        tp=hw.tensor_parallel_size,
        gpu_memory_utilization=hw.gpu_memory_utilization,
        max_model_len=engine.max_model_len
        or (trace if isinstance(trace, int) else trace.default_max_model_len()),
        num_gpu_blocks_given=given,
    )
    return setup.config, setup.step_time, [setup.timed_as, *setup.notes]


def simulate_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    body = SimulateBody.model_validate(params)
    trace = load_trace(trace_path(env, body.trace_id))
    config, step, notes = deployment(body.engine, body.hardware, trace)
    if body.replicas > 1 or body.failures:
        return _cluster(body, trace, config, step, notes, env, report)
    result = simulate(trace, config, step, slo=body.slo, progress=report)  # counters, not per-step events
    save_requests(result.to_pandas(), env)
    return run_result(result, notes)


#: The percentile switcher's choices (every LatencyStats percentile).
PERCENTILES = ("p50", "p90", "p95", "p99")


def kpis_by_percentile(summary: SimulationSummary) -> dict[str, list[dict[str, Any]]]:
    """The KPI tiles at each percentile, so the page switches without asking the server."""
    from servesim.views.simulation import kpis

    return {p: [k.model_dump(mode="json") for k in kpis(summary, p)] for p in PERCENTILES}


def run_result(result: SimulationResult, notes: list[str]) -> dict[str, Any]:
    """The stored answer of one run: its config, summary and the views the page draws."""
    from servesim.views.simulation import queue_by_reason, simulation_view
    from servesim.views.sparklines import kpi_sparklines

    view = simulation_view(result)
    view = view.model_copy(update={"series": [*view.series, *queue_by_reason(result)]})
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
    from servesim.engine.records import write_records

    write_records(env["requests_file"], requests, "parquet", extra=True)


def _cluster(
    body: SimulateBody,
    trace: Trace,
    config: EngineConfig,
    step: StepTimeModel,
    notes: list[str],
    env: Env,
    report: Report,
) -> dict[str, Any]:
    from servesim.cluster import RecoveryContext, Replica, RouterSpec, simulate_cluster
    from servesim.perf import load_catalog
    from servesim.perf.catalog import resolve_model

    replicas = [Replica(f"n{i}", config, step) for i in range(body.replicas)]
    names = {r.name for r in replicas}
    unknown = sorted({f.node for f in body.failures} - names)
    if unknown:
        raise InputError(
            f"failures name unknown replicas {', '.join(unknown)}; the replicas are n0..n{body.replicas - 1}"
        )
    ctx = RecoveryContext(
        model=resolve_model(body.hardware.model, load_catalog()), tp=body.hardware.tensor_parallel_size
    )
    timeline = EventRecorder(ReplicaWarning, ReplicaDown, ReplicaUp, RecoveryDecision)
    result = simulate_cluster(
        trace,
        replicas,
        RouterSpec(policy=body.router),
        body.failures,
        body.recovery,
        ctx,
        slo=body.slo,
        observers=[ProgressCallback(report), timeline],
    )
    save_requests(result.to_pandas(), env)
    from servesim.views.simulation import summary_view
    from servesim.views.timeline import failure_timeline

    summary = result.summary
    sections = [
        summary_view(summary.cluster, config, title=f"cluster of {body.replicas} replicas"),
        failure_timeline(timeline.events),
    ]
    sections += [
        summary_view(s, title=f"replica {name}").model_copy(update={"tables": []})
        for name, s in summary.replicas.items()
    ]
    return {
        "config": config.model_dump(mode="json"),
        "summary": summary.cluster.model_dump(mode="json"),
        "cluster": summary.model_dump(mode="json", exclude={"replicas", "cluster"}),
        "sections": [x.model_dump(mode="json") for x in sections],
        "kpis": kpis_by_percentile(summary.cluster),
        "notes": notes,
    }


def _jsonable(value: Any) -> Any:
    import orjson

    return orjson.loads(orjson.dumps(value, default=str))
