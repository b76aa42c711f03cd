"""Planners that answer in milliseconds, inline: recovery of interrupted jobs, rescheduling."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from servesim.actionlog import record_action
from servesim.web.app import Workbench, workbench
from servesim.web.db import JobRow, now_iso
from servesim.web.schemas import RecoverBody, RescheduleBody
from servesim.web.storage import new_id
from servesim.web.work import plans

router = APIRouter(prefix="/api", tags=["plans"])
WB = Annotated[Workbench, Depends(workbench)]


def _record(wb: Workbench, kind: str, title: str, params: dict[str, Any], result: dict[str, Any]) -> str:
    row = JobRow(
        id=new_id(),
        kind=kind,
        title=title,
        created_at=now_iso(),
        started_at=now_iso(),
        finished_at=now_iso(),
        status="done",
        trace_id=None,
        params=params,
        progress_done=1,
        progress_total=1,
        duration_s=0.0,
        result=result,
        error=None,
    )
    with wb.db.session() as s:
        s.add(row)
    return row.id


@router.post("/recover", summary="Plan MIGRATE_STATE / COLD_RESTART for each interrupted job")
async def recover(body: RecoverBody, wb: WB) -> dict[str, Any]:
    params = body.model_dump(mode="json")
    with record_action("recover", params, interface="web", folder=wb.settings.data_dir):
        result = await run_in_threadpool(plans.recover, body)
    node = str(body.record.get("interrupted_node", "node"))[:80]
    return {"id": _record(wb, "recover", f"recovery of {node}", params, result), **result}


@router.post("/reschedule", summary="Re-admission order of interrupted requests, projected SLAs")
async def reschedule(body: RescheduleBody, wb: WB) -> dict[str, Any]:
    params = body.model_dump(mode="json")
    with record_action("reschedule", params, interface="web", folder=wb.settings.data_dir):
        result = await run_in_threadpool(plans.reschedule, body)
    n = len(body.data.get("interrupted_requests") or [])
    return {"id": _record(wb, "reschedule", f"rescheduling {n} requests", params, result), **result}
