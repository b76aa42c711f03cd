"""``/api/jobs/{id}``: status, progress as server-sent events, cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse

from servesim.web.app import Workbench, workbench
from servesim.web.db import FINAL_STATES
from servesim.web.openapi import responses
from servesim.web.problems import Problem
from servesim.web.schemas import ID_PATTERN, JobState

router = APIRouter(prefix="/api/jobs", tags=["jobs"])
WB = Annotated[Workbench, Depends(workbench)]
JobId = Annotated[str, Path(pattern=ID_PATTERN)]
_TICK_S = 0.25
_KEEPALIVE_S = 15.0


@router.get(
    "/{job_id}", response_model=JobState, responses=responses(404), summary="A job's status and progress"
)
def job_status(job_id: JobId, wb: WB) -> dict[str, Any]:
    state = wb.jobs.state(job_id)
    if state is None:
        raise Problem(404, f"no job {job_id}")
    return {"id": job_id, **{k: v for k, v in state.items() if k not in ("version", "extra")}}


@router.get(
    "/{job_id}/events",
    summary="Progress as server-sent events (event: progress ..., then end)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A text/event-stream: a `retry:` line, then `event: progress` events while the "
            "job runs and one `event: end` when it has ended, each with `data:` a JSON JobState "
            "(the body of GET /api/jobs/{id}); `: keep-alive` comments every 15 s of quiet.",
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "itemSchema": {
                        "type": "object",
                        "required": ["event", "data"],
                        "properties": {
                            "event": {"type": "string", "enum": ["progress", "end"]},
                            "data": {"$ref": "#/components/schemas/JobState"},
                        },
                    },
                }
            },
        },
        **responses(404),
    },
)
async def job_events(job_id: JobId, request: Request, wb: WB) -> StreamingResponse:
    if wb.jobs.state(job_id) is None:
        raise Problem(404, f"no job {job_id}")

    async def stream() -> AsyncIterator[bytes]:
        last: tuple[Any, ...] | None = None
        quiet = 0.0
        yield b"retry: 2000\n\n"
        while True:
            state = wb.jobs.state(job_id)
            if state is None:
                return
            key = (state["status"], state["done"], state["total"], state["version"])
            if key != last:
                last = key
                quiet = 0.0
                data = {"id": job_id, **{k: v for k, v in state.items() if k != "version"}}
                event = "end" if state["status"] in FINAL_STATES else "progress"
                yield f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
                if event == "end":
                    return
            if await request.is_disconnected():
                return
            await asyncio.sleep(_TICK_S)
            quiet += _TICK_S
            if quiet >= _KEEPALIVE_S:
                quiet = 0.0
                yield b": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


@router.delete(
    "/{job_id}",
    status_code=202,
    responses=responses(404, s409="The job has already ended"),
    summary="Cancel a queued or running job",
)
def cancel_job(job_id: JobId, wb: WB) -> JSONResponse:
    state = wb.jobs.state(job_id)
    if state is None:
        raise Problem(404, f"no job {job_id}")
    if not wb.jobs.cancel(job_id):
        raise Problem(409, f"job {job_id} has already ended ({state['status']})")
    return JSONResponse({"id": job_id, "status": "cancelling"}, status_code=202)
