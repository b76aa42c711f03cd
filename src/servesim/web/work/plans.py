"""Planning answers: recovery of interrupted jobs, rescheduling of interrupted requests, advice."""

from __future__ import annotations

from typing import Any

from servesim.errors import InputError
from servesim.spec import ResolvedDeployment
from servesim.web.schemas import AdviseBody, RecoverBody, RescheduleBody
from servesim.web.work import Env, Report, trace_path


def recover(body: RecoverBody) -> dict[str, Any]:
    """The per-job MIGRATE_STATE / COLD_RESTART plan of one node-interruption record (fast: inline)."""
    from servesim.cluster.recovery import plan_recovery
    from servesim.views.recovery import recovery_view

    plan = plan_recovery(body.record)
    return {"plan": plan.model_dump(mode="json"), "sections": [recovery_view(plan).model_dump(mode="json")]}


def reschedule(body: RescheduleBody) -> dict[str, Any]:
    """The re-admission order with projected completions and SLA verdicts (fast: inline)."""
    from servesim.resched import parse_input
    from servesim.resched import reschedule as plan_reschedule
    from servesim.views.resched import resched_view

    plan = plan_reschedule(parse_input(body.data, policy=body.policy))
    return {"plan": plan.model_dump(mode="json"), "sections": [resched_view(plan).model_dump(mode="json")]}


def advised_hardware(setup: ResolvedDeployment) -> str:
    """What the advice is for, as the case words it (``llama-3.1-8b on 1 x h100``)."""
    from servesim.perf.setup import DEFAULT_GPU, DEFAULT_MODEL

    return f"{setup.model or DEFAULT_MODEL} on {setup.tp} x {setup.gpu or DEFAULT_GPU}"


def advise_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    """Advice from the program ``servesim advise`` would choose (the DSPy program when the server has
    ANTHROPIC_API_KEY, else the rules; Claude's pydantic-ai agent by name), re-checked."""
    from servesim.advisor import BatchingCase, ClaudeAdvisor, FallbackCase, RescheduleCase, advise
    from servesim.advisor.optimize import optimizer_best
    from servesim.cluster.recovery import plan_recovery
    from servesim.resched import parse_input
    from servesim.traces import load_trace
    from servesim.web.work.runs import deployment

    body = AdviseBody.model_validate(params)
    report(0, 1)
    case: Any
    if body.task == "batching":
        if body.trace_id is None:
            raise InputError("batching advice needs trace_id")
        trace = load_trace(trace_path(env, body.trace_id))
        setup = deployment(body.deployment, trace)  # the shared deployment panel's
        case = BatchingCase(
            trace,
            setup.config,
            setup.step_time,
            slo=body.slo.per_request() if body.slo is not None else None,
            replicas=body.deployment.replicas,  # the current replicas, as `servesim advise --replicas`
            hardware=advised_hardware(setup),
        )
        if body.optimize > 0:
            case.optimizer_best = optimizer_best(case, body.optimize, 0)
    elif body.data is None:
        raise InputError(f"{body.task} advice needs data (the reschedule input or recovery record)")
    elif body.task == "reschedule":
        case = RescheduleCase(parse_input(body.data), None)
    else:
        case = FallbackCase(plan_recovery(body.data))
    claude = ClaudeAdvisor() if body.advisor == "claude" else None  # auto chooses as the CLI does
    result = advise(case, body.advisor, claude=claude)
    report(1, 1)
    from servesim.views.advisor import answered_by, score_words, verification_verdict

    out = result.model_dump(mode="json")
    out["answered_by"] = answered_by(result)  # the words the report uses
    out["score_words"] = score_words(result)
    out["verdict"] = verification_verdict(result.verification).model_dump(mode="json")  # the words
    calls = out.pop("action_log", [])  # per-call records stay on the server (the action log)
    usage = {
        "advisor": result.advisor,
        "model": next((c["model"] for c in calls if c.get("model")), None),
        "input_tokens": sum(int(c.get("input_tokens") or 0) for c in calls),
        "output_tokens": sum(int(c.get("output_tokens") or 0) for c in calls),
    }
    return {"advice": out, "advisor": result.advisor, "advisor_usage": usage, "sections": []}
