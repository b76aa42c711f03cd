"""``/api/bench``: upload a measured run (a ``vllm bench serve`` result or a sim2real experiment),
then overlay it with servesim's run of the same workload."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from servesim.actionlog import record_action
from servesim.services.perf import DEFAULT_MODEL
from servesim.web.app import Workbench, workbench
from servesim.web.db import BenchRow, now_iso
from servesim.web.defaults import stored_params
from servesim.web.openapi import responses
from servesim.web.problems import Problem
from servesim.web.routers.runs import ACCEPTED, _done, job_out
from servesim.web.schemas import ID_PATTERN, BenchOut, BenchSimulateBody
from servesim.web.storage import display_name, new_id
from servesim.web.validate import at_the_door

router = APIRouter(prefix="/api/bench", tags=["measured"])
WB = Annotated[Workbench, Depends(workbench)]
BenchId = Annotated[str, Path(pattern=ID_PATTERN, description="A stored benchmark result.")]
#: A --save-detailed result of 10,000 prompts is a few MB; the generated texts make it larger.
JSON_TYPES = {"", "application/json", "application/octet-stream", "text/plain"}


def bench_out(row: BenchRow) -> BenchOut:
    return BenchOut.model_validate(row, from_attributes=True)


@router.post(
    "",
    status_code=201,
    summary="Upload a `vllm bench serve --save-result` JSON file (the file's bytes as the body)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    responses=responses(
        s413="Over the size limit (or more requests than this server re-runs)",
        s415="Not a JSON file",
        s422="Not a usable benchmark result (each field's problem listed)",
    ),
)
async def upload_bench(
    request: Request,
    wb: WB,
    name: Annotated[
        str,
        Query(
            min_length=1,
            max_length=300,
            json_schema_extra={"pattern": r"(?i)\.json$"},
            description="The file's name (.json).",
        ),
    ],
) -> BenchOut:
    import orjson

    from servesim.services.measured import NoLatencyStatistic, TooManyRequests, read_measured

    shown = display_name(name)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not name.lower().endswith(".json") or ctype not in JSON_TYPES:
        raise Problem(415, f"{shown}: a measured run is a .json file (vllm bench serve --save-result)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > wb.settings.max_upload_bytes:
            raise Problem(413, f"{shown}: over the upload limit of {wb.settings.max_upload_bytes:,} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise Problem(422, f"{shown}: not JSON: {e}", errors=[{"field": None, "reason": str(e)}]) from None
    try:
        run = read_measured(data, shown, max_requests=wb.settings.max_requests_per_trace)
    except TooManyRequests as e:
        reason = "too many requests for this server"
        raise Problem(413, str(e), errors=[{"field": "num_prompts", "reason": reason}]) from None
    except NoLatencyStatistic as e:
        reason = "missing: the file reports no latency"
        raise Problem(422, str(e), errors=[{"field": "mean_ttft_ms", "reason": reason}]) from None
    return _store(wb, shown, raw, run.summary)


def _store(wb: Workbench, shown: str, raw: bytes, summary: dict[str, Any]) -> BenchOut:
    from servesim.io import write_bytes_atomic

    params = {"name": shown, "bytes": len(raw), "format": summary["format"]}
    with record_action("bench-upload", params, interface="web", folder=wb.settings.data_dir):
        row = BenchRow(id=new_id(), name=shown, created_at=now_iso(), summary=summary)
        write_bytes_atomic(wb.storage.bench_file(row.id), raw)
        with wb.db.session() as s:
            s.add(row)
    return bench_out(row)


@router.get("", summary="Stored benchmark results, newest first")
def list_bench(wb: WB) -> list[BenchOut]:
    return [bench_out(r) for r in wb.db.benches()]


@router.get("/{bench_id}", responses=responses(404), summary="A stored benchmark result's summary")
def get_bench(bench_id: BenchId, wb: WB) -> BenchOut:
    return bench_out(_row(wb, bench_id))


@router.delete("/{bench_id}", status_code=204, responses=responses(404), summary="Delete a benchmark result")
def delete_bench(bench_id: BenchId, wb: WB) -> Response:
    with wb.db.session() as s:
        row = s.get(BenchRow, bench_id)
        if row is None:
            raise Problem(404, f"no benchmark result {bench_id}")
        s.delete(row)
    wb.storage.bench_file(bench_id).unlink(missing_ok=True)
    return Response(status_code=204)


@router.post(
    "/{bench_id}/simulate",
    status_code=202,
    responses={**ACCEPTED, **responses(s404="No such benchmark result or run", s409="The run has no result")},
    summary="Simulate the benchmark's workload (or take a stored run) and overlay measured vs simulated",
)
def simulate_bench(bench_id: BenchId, body: BenchSimulateBody, wb: WB) -> JSONResponse:
    row = _row(wb, bench_id)
    if body.bench_id != bench_id:
        raise Problem(
            422,
            "bench_id in the body differs from the path",
            errors=[{"field": "bench_id", "reason": "must match the path"}],
        )
    if body.run_id is not None:
        run = _done(wb, body.run_id)
        if run.kind != "simulate":
            raise Problem(422, f"run {body.run_id} is a {run.kind} job: choose a simulation run")
        what = f"run {run.title}"
    else:
        body, engine = at_the_door(body)
        if body.deployment.replicas > 1:
            reason = "the overlay re-runs the benchmark on one replica (the server vllm bench serve measured)"
            raise Problem(
                422,
                f"body.deployment.replicas: {reason}",
                errors=[{"field": "body.deployment.replicas", "reason": reason}],
            )
        what = f"{body.deployment.model or DEFAULT_MODEL}, max_num_seqs {engine.max_num_seqs}"
    title = body.label or f"{row.name} measured vs simulated ({what})"
    job = wb.jobs.submit("overlay", title, stored_params(body), None)
    return JSONResponse(job_out(job).model_dump(mode="json"), status_code=202)


def _row(wb: Workbench, bench_id: str) -> BenchRow:
    row = wb.db.bench(bench_id)
    if row is None:
        raise Problem(404, f"no benchmark result {bench_id}: upload one first")
    return row
