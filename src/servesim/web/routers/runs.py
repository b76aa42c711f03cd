"""Work that runs as a background job (simulate, saturate, tune, advise), its history and downloads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from servesim.web.app import Workbench, workbench
from servesim.web.compare import compare_runs
from servesim.web.db import JobRow
from servesim.web.defaults import current_params, stored_params
from servesim.web.openapi import responses
from servesim.web.problems import Problem
from servesim.web.schemas import (
    ID_PATTERN,
    AdviseBody,
    JobOut,
    RescoreBody,
    SaturateBody,
    SimulateBody,
    TuneBody,
)
from servesim.web.validate import at_the_door, check_advisor, check_pools, check_tune

router = APIRouter(prefix="/api", tags=["runs"])
WB = Annotated[Workbench, Depends(workbench)]
RunId = Annotated[str, Path(pattern=ID_PATTERN, description="A run (job) id.")]
ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {"description": "Queued: follow /api/jobs/{id}/events"},
    **responses(429, s404="No such trace", s422="Invalid settings"),
}
#: A stored run's result: no such run, or one without a result (queued, running, failed).
RESULT = responses(404, 409)


def job_out(row: JobRow) -> JobOut:
    """A stored job as the API shows it: its params in today's body shape (``current_params``:
    a run stored with an older body reads as what it was translated to)."""
    out = JobOut.model_validate(row, from_attributes=True)
    return out.model_copy(update={"params": current_params(row.kind, row.params)})


def _not_disaggregated(row: JobRow, what: str) -> None:
    """A disaggregated run has no single-replica summary: ``what`` (re-scoring, cost, compare)
    is refused with why, not a failure deep in a view."""
    if row.kind == "simulate" and "disaggregated" in (row.result or {}):
        raise Problem(
            422,
            f"run {row.id} is a disaggregated run (prefill and decode pools): {what} takes runs of "
            "identical replicas; run it again with another SLO, or read its document",
        )


def _trace_name(wb: Workbench, trace_id: str) -> str:
    row = wb.db.trace(trace_id)
    if row is None:
        raise Problem(404, f"no trace {trace_id}: upload or generate one first")
    return row.name


def _submit(wb: Workbench, kind: str, title: str, body: Any, trace_id: str | None) -> JSONResponse:
    """Queue the job with the settings asked for (the engine keys the user set: the job resolves
    the rest as every interface does), so the form can be restored to what was asked."""
    row = wb.jobs.submit(kind, title, stored_params(body), trace_id)
    return JSONResponse(job_out(row).model_dump(mode="json"), status_code=202)


@router.post("/simulate", status_code=202, responses=ACCEPTED, summary="Simulate one replica or a cluster")
def simulate(body: SimulateBody, wb: WB) -> JSONResponse:
    name = _trace_name(wb, body.trace_id)
    body, engine = at_the_door(body)
    replicas = body.deployment.replicas
    shape = (
        f"{replicas} replicas, {len(body.failures)} failures"
        if replicas > 1 or body.failures
        else "1 replica"
    )
    pd = body.disaggregated
    if pd is not None:
        check_pools(body)
        fails = f", {len(body.failures)} failures" if body.failures else ""
        shape = f"{pd.prefill.replicas}P{pd.decode.replicas}D over {pd.link}{fails}"
    sc = engine.speculative_config  # a speculating run says so: on vs off reads apart in Compare
    spec = f", {sc.method} k={sc.num_speculative_tokens}" if sc is not None else ""
    flags = f"max_num_seqs {engine.max_num_seqs}, " if pd is None else ""  # each pool's GPU sets its own
    title = body.label or f"{name}: {flags}{shape}{spec}"
    return _submit(wb, "simulate", title, body, body.trace_id)


@router.post(
    "/saturate", status_code=202, responses=ACCEPTED, summary="Sweep the arrival rate: knee, saturation"
)
def saturate(body: SaturateBody, wb: WB) -> JSONResponse:
    name = _trace_name(wb, body.trace_id)
    body, _ = at_the_door(body)
    return _submit(wb, "saturate", body.label or f"{name}: saturation sweep", body, body.trace_id)


@router.post(
    "/tune", status_code=202, responses=ACCEPTED, summary="An Optuna study with a verified recommendation"
)
def tune(body: TuneBody, wb: WB) -> JSONResponse:
    name = _trace_name(wb, body.trace_id)
    body, _ = at_the_door(body)
    check_tune(body, wb.settings.max_trials)
    what = f"{body.n_trials} trials ({body.objective})"
    if body.gpu_types:  # one study per type: the History names the types compared
        what = f"cheapest of {', '.join(body.gpu_types)}: {body.n_trials} trials each ({body.objective})"
    return _submit(wb, "tune", body.label or f"{name}: {what}", body, body.trace_id)


@router.post("/advise", status_code=202, responses=ACCEPTED, summary="Advice (Claude or rules), re-checked")
def advise(body: AdviseBody, wb: WB) -> JSONResponse:
    check_advisor(body)
    body, _ = at_the_door(body)
    if body.task == "batching":
        if body.trace_id is None:
            raise Problem(
                422, "batching advice needs trace_id", errors=[{"field": "trace_id", "reason": "required"}]
            )
        name = _trace_name(wb, body.trace_id)
    elif body.data is None:
        raise Problem(422, f"{body.task} advice needs data", errors=[{"field": "data", "reason": "required"}])
    else:
        name = "record"
    return _submit(wb, "advise", f"{name}: {body.task} advice", body, body.trace_id)


@router.get("/runs", summary="History: every job, newest first")
def list_runs(
    wb: WB,
    kind: Annotated[str | None, Query(pattern=r"^[a-z]{1,20}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[JobOut]:
    return [job_out(r) for r in wb.db.jobs(kind, limit)]


@router.get("/runs/{run_id}", responses=responses(404), summary="One job with its result (views) when done")
def get_run(run_id: RunId, wb: WB) -> dict[str, Any]:
    row = _run(wb, run_id)
    return {"job": job_out(row).model_dump(mode="json"), "result": row.result}


@router.get("/runs/{run_id}/result.json", responses=RESULT, summary="Download the result as JSON")
def download_json(run_id: RunId, wb: WB) -> JSONResponse:
    row = _done(wb, run_id)
    body = {"job": job_out(row).model_dump(mode="json"), "result": row.result}
    return JSONResponse(
        body, headers={"Content-Disposition": f'attachment; filename="servesim-{row.kind}-{row.id[:8]}.json"'}
    )


@router.get(
    "/runs/{run_id}/document.json",
    summary="Download the run's result document (what the CLI's --json writes; servesim report reads it)",
    responses={
        **RESULT,
        **responses(
            s422="This kind of run has no command document (a cluster run stored by an older servesim)"
        ),
    },
)
def download_document(run_id: RunId, wb: WB) -> JSONResponse:
    from servesim.web.reports import cli_shape

    row = _done(wb, run_id)
    return JSONResponse(
        cli_shape(row),
        headers={
            "Content-Disposition": f'attachment; filename="servesim-{row.kind}-{row.id[:8]}.document.json"'
        },
    )


@router.get(
    "/runs/{run_id}/requests.csv", responses=RESULT, summary="Download the per-request records as CSV"
)
def download_csv(run_id: RunId, wb: WB) -> StreamingResponse:
    row = _done(wb, run_id)
    path = wb.storage.requests_file(row.id)
    if not path.exists():
        raise Problem(404, f"{row.kind} job {run_id} has no per-request records (only simulations do)")
    import pyarrow.parquet as pq

    def chunks() -> Iterator[bytes]:
        pf = pq.ParquetFile(path)
        header = True
        for batch in pf.iter_batches(batch_size=20_000):
            yield batch.to_pandas().to_csv(index=False, header=header).encode()
            header = False

    return StreamingResponse(
        chunks(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="servesim-requests-{row.id[:8]}.csv"'},
    )


@router.post(
    "/runs/{run_id}/slo",
    responses={
        **RESULT,
        **responses(
            s422="An SLO that does not parse, not a simulation, or a run without per-request records or "
            "trace to re-score"
        ),
    },
    summary="Re-score a finished run against another SLO, from its stored per-request records",
)
def rescore(run_id: RunId, body: RescoreBody, wb: WB) -> dict[str, Any]:
    """Attainment, good requests and goodput at ``slo``, computed from the run's stored records by
    the simulation's own formula; nothing is re-simulated and the stored run is not changed. A
    cluster run is re-scored as its fleet (``scope`` fleet; the per-replica figures are not)."""
    from servesim.web.work.runs import rescore_run

    row = _done(wb, run_id)
    result = row.result or {}
    _not_disaggregated(row, "re-scoring")
    if row.kind != "simulate" or "summary" not in result:
        raise Problem(422, f"run {run_id} is a {row.kind} job: only a simulation run is re-scored")
    records = wb.storage.requests_file(row.id)
    if not records.exists():
        raise Problem(422, f"run {run_id} has no stored per-request records to re-score")
    trace = wb.storage.trace_file(row.trace_id) if row.trace_id else None
    if trace is None or not trace.exists():
        raise Problem(
            422, f"run {run_id}'s trace was deleted: its per-request SLAs are needed to re-score the run"
        )
    # a cluster run's ``summary`` is its fleet's (over every replica's records): re-scored as one
    scope = "fleet" if "cluster" in result else "run"
    scored = rescore_run(result["summary"], records, trace, body.slo, fleet=scope == "fleet")
    return {"run_id": row.id, "scope": scope, **scored}


@router.get(
    "/runs/{run_id}/cost", responses=RESULT, summary="Cost of a simulation run at a GPU price you enter"
)
def run_cost(
    run_id: RunId,
    wb: WB,
    usd_per_gpu_hour: Annotated[
        float, Query(gt=0, le=10_000, allow_inf_nan=False, description="$ per GPU-hour.")
    ],
) -> dict[str, Any]:
    from servesim.services.run import SimulationSummary
    from servesim.views.cost import cost_view

    row = _done(wb, run_id)
    if row.kind != "simulate" or not row.result:
        raise Problem(422, "cost takes a simulation run")
    _not_disaggregated(row, "cost")
    from servesim.services.perf import DEFAULT_TP

    dep = current_params(row.kind, row.params).get("deployment", {})
    gpus = int(dep.get("tp") or DEFAULT_TP) * int(dep.get("replicas", 1))
    summary = SimulationSummary.model_validate(row.result["summary"])
    tier = (dep.get("engine") or {}).get("kv_offloading_size")  # GiB per replica (its TP ranks)
    host_gib = float(tier) * int(dep.get("replicas", 1)) if tier else 0.0
    view = cost_view(summary, gpus=gpus, usd_per_gpu_hour=usd_per_gpu_hour, host_memory_gib=host_gib)
    return {"gpus": gpus, "sections": [view.model_dump(mode="json")]}


@router.get(
    "/runs/{run_id}/report.html",
    responses=RESULT,
    summary="Download the run's report (servesim.report, HTML)",
)
def download_report(run_id: RunId, wb: WB) -> HTMLResponse:
    from servesim.web.reports import report_html

    row = _done(wb, run_id)
    return _attachment(report_html([row]), f"servesim-report-{row.kind}-{row.id[:8]}.html")


@router.get(
    "/compare/report.html",
    responses=RESULT,
    summary="Download the report's diff of two runs of one kind (HTML)",
)
def download_compare_report(
    wb: WB,
    a: Annotated[str, Query(pattern=ID_PATTERN)],
    b: Annotated[str, Query(pattern=ID_PATTERN)],
) -> HTMLResponse:
    from servesim.web.reports import report_html

    ra, rb = _done(wb, a), _done(wb, b)
    for r in (ra, rb):
        _not_disaggregated(r, "compare")
    if ra.kind != rb.kind:
        raise Problem(422, f"a report compares two runs of one kind ({ra.kind} and {rb.kind} given)")
    return _attachment(report_html([ra, rb]), f"servesim-diff-{ra.id[:8]}-{rb.id[:8]}.html")


def _attachment(html: str, filename: str) -> HTMLResponse:
    # A download, never shown from this origin: the report carries its own (inline) scripts.
    return HTMLResponse(html, headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@router.get(
    "/compare", responses=RESULT, summary="Two runs side by side: configuration diff and metric deltas"
)
def compare(
    wb: WB,
    a: Annotated[str, Query(pattern=ID_PATTERN, description="The baseline run.")],
    b: Annotated[str, Query(pattern=ID_PATTERN, description="The run compared with it.")],
) -> dict[str, Any]:
    from servesim.web.compare import COMPARABLE, legend_name, overlay_sections, study_sections

    ra, rb = _done(wb, a), _done(wb, b)
    for r in (ra, rb):
        _not_disaggregated(r, "compare")
    if ra.kind != rb.kind:
        raise Problem(
            422,
            f"compare takes two runs of one kind: A ({ra.id}) is a {ra.kind} run and B ({rb.id}) a "
            f"{rb.kind} run",
        )
    if ra.kind not in COMPARABLE:
        raise Problem(
            422, f"compare takes two runs of one of {', '.join(COMPARABLE)}; these are {ra.kind} runs"
        )
    traces = (_trace_of(wb, ra.trace_id), _trace_of(wb, rb.trace_id))
    ja, jb = job_out(ra).model_dump(mode="json"), job_out(rb).model_dump(mode="json")
    names = [legend_name("A", ja, traces[0]), legend_name("B", jb, traces[1])]
    results = [ra.result or {}, rb.result or {}]
    out = compare_runs(ja, results[0], jb, results[1], traces)
    out["kind"] = ra.kind
    if ra.kind == "simulate":
        out["sections"] = overlay_sections(names, results)
    else:
        out["metrics"] = []  # a sweep's or a study's figures are in its comparison's tables
        out["sections"] = study_sections(ra.kind, names, results)
    return out


def _trace_of(wb: Workbench, trace_id: str | None) -> dict[str, Any] | None:
    """A run's trace as a comparison names it (None: the run had none, or it was deleted)."""
    row = wb.db.trace(trace_id) if trace_id else None
    return None if row is None else {"id": row.id, "name": row.name, "digest": row.digest}


@router.get(
    "/compare/basket",
    responses=RESULT,
    summary="A basket of runs against a baseline: metric changes for each",
)
def compare_basket(
    wb: WB,
    baseline: Annotated[str, Query(pattern=ID_PATTERN, description="The baseline run.")],
    runs: Annotated[
        list[Annotated[str, Query(pattern=ID_PATTERN)]],
        Query(min_length=1, max_length=12, description="The runs compared with it (1 to 12)."),
    ],
) -> dict[str, Any]:
    from servesim.services.run import SimulationSummary
    from servesim.views.compare import basket_view
    from servesim.web.compare import settings_of

    rows = [_done(wb, i) for i in [baseline, *runs]]
    for r in rows:
        if r.kind != "simulate":
            raise Problem(422, f"run {r.id} is a {r.kind} job: a basket compares simulation runs")
        _not_disaggregated(r, "a basket")
    jobs = [job_out(r).model_dump(mode="json") for r in rows]
    labels = [f"{j['created_at'][11:19]} {j['title']}"[:80] for j in jobs]
    summaries = [SimulationSummary.model_validate((r.result or {})["summary"]) for r in rows]
    view = basket_view((labels[0], summaries[0]), list(zip(labels[1:], summaries[1:], strict=True)))
    settings = [settings_of(j, r.result or {}) for j, r in zip(jobs, rows, strict=True)]
    keys = sorted(set().union(*settings))
    differ = [
        {"key": k, "baseline": settings[0].get(k), "runs": [s.get(k) for s in settings[1:]]}
        for k in keys
        if any(s.get(k) != settings[0].get(k) for s in settings[1:])
    ]
    from servesim.web.compare import legend_name, overlay_sections, workload_warning

    traces = [_trace_of(wb, r.trace_id) for r in rows]
    names = [
        legend_name("baseline" if i == 0 else str(i), j, t)
        for i, (j, t) in enumerate(zip(jobs, traces, strict=True))
    ]
    overlays = overlay_sections(names, [r.result or {} for r in rows])
    return {
        "baseline": jobs[0],
        "runs": jobs[1:],
        "traces": traces,
        "workload_warning": workload_warning(traces),
        "config_diff": differ,
        "sections": [view.model_dump(mode="json"), *overlays],
    }


def _run(wb: Workbench, run_id: str) -> JobRow:
    row = wb.db.job(run_id)
    if row is None:
        raise Problem(404, f"no run {run_id}")
    return row


def _done(wb: Workbench, run_id: str) -> JobRow:
    row = _run(wb, run_id)
    if row.status != "done":
        raise Problem(409, f"run {run_id} is {row.status}: it has no result")
    return row
