"""Planning answers: recovery of interrupted jobs, rescheduling of interrupted requests, advice.

Each is the service the CLI calls (``servesim.services.recovery``, ``.rescheduling``, ``.advice``)
on the body's input; the stored result keeps the page's views and ``document``, the command's
``--json`` document for the same input (what the report and the downloads use).
"""

from __future__ import annotations

from typing import Any

from servesim.web.schemas import AdviseBody, RecoverBody, RescheduleBody
from servesim.web.work import Env, Report


def recover(body: RecoverBody) -> dict[str, Any]:
    """The per-job MIGRATE_STATE / COLD_RESTART plan of one node-interruption record (fast: inline)."""
    from servesim.report.documents import recover_document
    from servesim.services.recovery import RecoverRequest
    from servesim.services.recovery import recover as plan_recovery
    from servesim.views.recovery import recovery_view

    answer = plan_recovery(RecoverRequest(events=body.record))
    plan = answer.plans[0]
    return {
        "plan": plan.model_dump(mode="json"),
        "sections": [recovery_view(plan).model_dump(mode="json")],
        "document": recover_document(answer),
    }


def reschedule(body: RescheduleBody) -> dict[str, Any]:
    """The re-admission order with projected completions and SLA verdicts (fast: inline)."""
    from servesim.report.documents import reschedule_document
    from servesim.services.rescheduling import RescheduleRequest
    from servesim.services.rescheduling import reschedule as plan_reschedule
    from servesim.views.resched import resched_view

    answer = plan_reschedule(RescheduleRequest(data=body.data, policy=body.policy))
    plan = answer.plan
    return {
        "plan": plan.model_dump(mode="json"),
        "sections": [resched_view(plan).model_dump(mode="json")],
        "document": reschedule_document(answer),
    }


def advise_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    """Advice from the program ``servesim advise`` would choose (the DSPy program when the server has
    ANTHROPIC_API_KEY, else the rules; Claude's pydantic-ai agent by name), re-checked."""
    from servesim.errors import InputError
    from servesim.report.documents import advise_document
    from servesim.services.advice import AdviseRequest, prepare
    from servesim.services.deployment import DeploymentSpec
    from servesim.views.advisor import answered_by, score_words, verification_verdict
    from servesim.web.work.runs import trace_input

    body = AdviseBody.model_validate(params)
    if body.task == "batching" and body.trace_id is None:
        raise InputError("batching advice needs trace_id")
    request = AdviseRequest(
        task=body.task,
        trace=trace_input(body.trace_id, env) if body.task == "batching" and body.trace_id else None,
        data=body.data,
        # the shared deployment panel's (its replicas are the current ones): batching advice's alone,
        # as a record's or an input's own context times the other tasks
        deployment=body.deployment if body.task == "batching" else DeploymentSpec(),
        slo=body.slo,
        optimize=body.optimize,
        advisor=body.advisor,
    )
    report(0, 1)
    answer = prepare(request).run()
    report(1, 1)
    result = answer.result
    out = result.model_dump(mode="json", exclude={"action_log"})  # the page's; the calls are logged
    out["answered_by"] = answered_by(result)  # the words the report uses
    out["score_words"] = score_words(result)
    out["verdict"] = verification_verdict(result.verification).model_dump(mode="json")  # the words
    return {
        "advice": out,
        "advisor": result.advisor,
        "advisor_usage": answer.usage().model_dump(mode="json"),
        "sections": [],
        "document": advise_document(answer),
    }
