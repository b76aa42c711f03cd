"""``/api/traces``: upload (streamed, size-limited), generate, list, inspect, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from servesim.actionlog import record_action
from servesim.services.traces import FORMAT_NAMES
from servesim.web.app import Workbench, workbench
from servesim.web.db import JobRow, TraceRow
from servesim.web.ingest import generate, ingest_upload
from servesim.web.openapi import responses
from servesim.web.problems import Problem
from servesim.web.schemas import ID_PATTERN, GenerateBody, TraceOut
from servesim.web.storage import UPLOAD_NAME_PATTERN, UPLOAD_SUFFIXES, display_name, upload_suffix

router = APIRouter(prefix="/api/traces", tags=["traces"])
WB = Annotated[Workbench, Depends(workbench)]
TraceId = Annotated[str, Path(pattern=ID_PATTERN, description="A trace id from the list.")]
ACCEPTED_TYPES = {
    "",
    "application/octet-stream",
    "text/csv",
    "text/plain",
    "application/json",
    "application/jsonl",
    "application/x-ndjson",
    "application/x-jsonlines",
    "application/vnd.apache.parquet",
    "application/x-parquet",
    "application/parquet",
    "application/gzip",
    "application/x-gzip",
}


def trace_out(row: TraceRow) -> TraceOut:
    return TraceOut.model_validate(row, from_attributes=True)


@router.post(
    "",
    status_code=201,
    summary="Upload a trace file (the raw file as the request body)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
    responses=responses(
        s413="Over the size limit (bytes or requests)",
        s415="Not a trace format",
        s422="No usable row (row-level errors listed)",
    ),
)
async def upload_trace(
    request: Request,
    wb: WB,
    name: Annotated[
        str,
        Query(
            min_length=1,
            max_length=300,
            # documented, not validated here: a name of another kind is a 415 naming the formats
            json_schema_extra={"pattern": UPLOAD_NAME_PATTERN},
            description="The file's name (its extension picks the reader).",
        ),
    ],
    format: Annotated[
        str | None,
        Query(description="Force a format.", json_schema_extra={"enum": list(FORMAT_NAMES)}),
    ] = None,
) -> TraceOut:
    shown = display_name(name)
    suffix = upload_suffix(name)  # the name as given: the shown one is cut at 120 characters
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if suffix is None:
        raise Problem(415, f"{shown}: not a trace file; use one of {', '.join(UPLOAD_SUFFIXES)}")
    if ctype not in ACCEPTED_TYPES:
        raise Problem(415, f"{shown}: content type {ctype!r} is not a trace; send the file's bytes")
    if format is not None and format not in FORMAT_NAMES:
        raise Problem(422, f"format {format[:40]!r}: use one of {', '.join(FORMAT_NAMES)}")
    scratch = wb.storage.scratch(suffix)
    try:
        size = 0
        with scratch.open("wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > wb.settings.max_upload_bytes:
                    raise Problem(
                        413, f"{shown}: over the upload limit of {wb.settings.max_upload_bytes:,} bytes"
                    )
                f.write(chunk)
        if size == 0:
            raise Problem(422, f"{shown}: the file is empty")
        row = await run_in_threadpool(ingest_upload, scratch, shown, format, wb.settings, wb.storage)
    finally:
        scratch.unlink(missing_ok=True)
    with wb.db.session() as s:
        s.add(row)
    return trace_out(row)


@router.post("/generate", status_code=201, summary="Generate a synthetic trace from a preset")
async def generate_trace(body: GenerateBody, wb: WB) -> TraceOut:
    row = await run_in_threadpool(
        generate, body.preset, body.num_requests, body.seed, body.name, wb.settings, wb.storage
    )
    with wb.db.session() as s:
        s.add(row)
    return trace_out(row)


@router.get("", summary="Stored traces, newest first")
def list_traces(wb: WB) -> list[TraceOut]:
    return [trace_out(r) for r in wb.db.traces()]


@router.get("/{trace_id}", responses=responses(404), summary="A trace: statistics, dropped rows")
def get_trace(trace_id: TraceId, wb: WB) -> TraceOut:
    return trace_out(_row(wb, trace_id))


@router.get(
    "/{trace_id}/summary",
    responses=responses(404),
    summary="The trace's summary view (arrivals, lengths, prefix sharing)",
)
def trace_summary(trace_id: TraceId, wb: WB) -> dict[str, Any]:
    row = _row(wb, trace_id)
    return {"trace": trace_out(row).model_dump(mode="json"), "sections": [row.summary] if row.summary else []}


@router.delete(
    "/{trace_id}",
    status_code=204,
    responses=responses(404, s409="A job is still using the trace"),
    summary="Delete a trace (its runs stay in the history)",
)
def delete_trace(trace_id: TraceId, wb: WB) -> Response:
    with record_action("delete-trace", {"trace": trace_id}, interface="web", folder=wb.settings.data_dir):
        with wb.db.session() as s:
            row = s.get(TraceRow, trace_id)
            if row is None:
                raise Problem(404, f"no trace {trace_id}")
            busy = s.query(JobRow).filter(
                JobRow.trace_id == trace_id, JobRow.status.in_(("queued", "running"))
            )
            if busy.count():
                raise Problem(409, "a job is still using this trace: cancel it or wait for it to finish")
            s.delete(row)
        wb.storage.trace_file(trace_id).unlink(missing_ok=True)
        wb.storage.provenance_file(trace_id).unlink(missing_ok=True)
    return Response(status_code=204)


def _row(wb: Workbench, trace_id: str) -> TraceRow:
    row = wb.db.trace(trace_id)
    if row is None:
        raise Problem(404, f"no trace {trace_id}")
    return row
