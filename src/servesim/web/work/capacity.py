"""Capacity jobs: a saturation sweep and a tuning study (layouts included), stored in the
workbench's database. Each builds the request ``servesim saturate`` / ``servesim tune`` builds
from its flags and calls the same service (``servesim.services.capacity``, ``.tune``,
``.layouts``), so the browser gives the CLI's answer; the job keeps the answer's document (what
``GET /api/runs/{id}/document.json`` serves) and the views the page draws."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.errors import InternalError
from servesim.services.capacity import Execution, SaturateRequest
from servesim.services.layouts import LayoutsRequest
from servesim.services.tune import SearchSpace, TuneRequest, space_from_mapping
from servesim.web.schemas import SaturateBody, TuneBody
from servesim.web.work import Env, Report
from servesim.web.work.runs import trace_input

if TYPE_CHECKING:
    from servesim.views.model import Section


def saturate_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    """``servesim saturate``'s request of the body, answered by its service."""
    from servesim.report.capacity import saturate_document
    from servesim.services.capacity import saturate
    from servesim.views.saturation import saturation_view

    body = SaturateBody.model_validate(params)
    request = SaturateRequest(
        trace=trace_input(body.trace_id, env),
        deployment=body.deployment,
        slo=body.slo,
        target_rate=body.target_rate,
        seeds=body.seeds,
        rtol=body.rtol,
        execution=Execution(executor="local"),
    )
    answer = saturate(request, progress=lambda _phase, done, total, _detail=None: report(done, total))
    return {
        "report": answer.report.model_dump(mode="json"),
        "sections": [saturation_view(answer.report).model_dump(mode="json")],
        "document": saturate_document(answer),
    }


def tune_request(body: TuneBody, env: Env) -> TuneRequest:
    """The study of a Tune body: ``servesim tune``'s request, in the server's study storage, one
    trial at a time on the server's tune executor."""
    return TuneRequest(
        trace=trace_input(body.trace_id, env),
        deployment=body.deployment,
        baseline=body.baseline,
        slo=body.slo,
        target_rate=body.target_rate,
        objective=body.objective,
        trials=body.n_trials,
        seed=body.seed,
        trial_seeds=body.trial_seeds,
        pruning=body.pruning,
        verify_seeds=body.verify_seeds,
        max_gpus=body.max_gpus,
        space=space_from_mapping(body.space) if body.space else SearchSpace(),
        gpu_hour_usd=body.gpu_hour_usd,
        gpu_prices=body.gpu_prices,
        gpu_types=body.gpu_types,
        storage=env["db_url"],
        study_name=body.study_name,
        execution=Execution.model_validate(
            {"executor": env["tune_executor"], "jobs": 1, "address": env.get("tune_ray_address") or None}
        ),
    )


def layouts_request(body: TuneBody, env: Env) -> LayoutsRequest:
    """The layouts question of a Tune body that gives ``layouts``: ``servesim tune --layouts``'s."""
    lay = body.layouts
    if lay is None:
        raise InternalError("invariant broken: a layouts request of a body without layouts")
    return LayoutsRequest(
        trace=trace_input(body.trace_id, env),
        deployment=body.deployment,
        gpus=lay.gpus,
        layouts=lay.kinds,
        slo=body.slo,
        link=lay.link,
        short_prompt_tokens=lay.short_prompt_tokens,
        prefill_batched_tokens=lay.prefill_batched_tokens,
        decode_max_seqs=lay.decode_max_seqs,
        break_even=lay.break_even,
        verify_seeds=body.verify_seeds,
    )


def live_trials(db_url: str, study_name: str, limit: int = 300) -> list[dict[str, Any]]:
    """The study's finished trials so far (number, state, feasible, TTFT p99, goodput per GPU)."""
    import optuna

    from servesim.services.tune import record_of

    study = optuna.load_study(study_name=study_name, storage=db_url)
    out = []
    for t in study.get_trials(deepcopy=False)[-limit:]:
        r = record_of(t)
        o = r.outcome
        out.append(
            {
                "number": r.number,
                "state": r.state,
                "feasible": r.feasible,
                "ttft_p99_ms": o.ttft_p99_ms.max if o is not None and o.ttft_p99_ms is not None else None,
                "goodput_per_gpu": o.goodput_per_gpu if o is not None else None,
            }
        )
    return out


def param_importance(db_url: str, study_name: str, objective: str) -> Section | None:
    """Optuna's importance of each searched setting for the (first) objective; None with too few trials."""
    import optuna
    from optuna.importance import get_param_importances

    from servesim.views.importance import importance_view

    study = optuna.load_study(study_name=study_name, storage=db_url)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    if len(complete) < 2:
        return None
    try:
        scores = get_param_importances(study, target=lambda t: t.values[0])
    except (ValueError, RuntimeError):  # e.g. every trial set the same values: nothing to attribute
        return None
    return importance_view(scores, objective) if scores else None


def tune_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    """Trials into the stored study (resumable), then the re-verified recommendation: the study
    ``servesim tune`` runs for the same request (or, with ``layouts``, its layouts question)."""
    import optuna

    from servesim.services.tune import prepare

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the job's progress says enough
    body = TuneBody.model_validate(params)
    if body.layouts is not None:
        return layouts_job(body, env, report)
    if body.gpu_types:
        return gpu_types_job(body, env, report)
    prepared = prepare(tune_request(body, env))
    name, n, v = prepared.study_name, body.n_trials, body.verify_seeds

    def progress(phase: str, done: int, total: int, _detail: Any = None) -> None:
        if phase == "trials":
            report(done, total + v, {"study": name, "trials": live_trials(env["db_url"], name)})
        else:  # verifying: the recommendation's runs and its headroom search
            report(n + done * v // max(total, 1), n + v)

    return tune_result(prepared.run(progress=progress), env)


def gpu_types_job(body: TuneBody, env: Env, report: Report) -> dict[str, Any]:
    """``servesim tune --gpu-types``'s question: one study per type (``services.gpu_types``),
    the comparison above the chosen type's study as a plain study shows it."""
    from servesim.report.capacity import gpu_types_document
    from servesim.services.gpu_types import compare_gpu_types
    from servesim.views.gpu_types import gpu_types_view

    types, n, v = len(body.gpu_types), body.n_trials, body.verify_seeds
    per_type = n + v
    at_type, last = [-1], [""]  # the type whose study runs: trials after anything else start one

    def progress(phase: str, done: int, total: int, _detail: Any = None) -> None:
        if phase == "trials" and last[0] != "trials":
            at_type[0] = min(at_type[0] + 1, types - 1)
        last[0] = phase
        at = max(at_type[0], 0) * per_type
        at += done if phase == "trials" else n + done * v // max(total, 1)
        report(min(at, types * per_type), types * per_type)

    result = compare_gpu_types(tune_request(body, env), progress=progress)
    document = gpu_types_document(result)  # no type can run: refused with each type's reason
    shown = result.chosen or next(iter(result.answers.values()))
    out = tune_result(shown, env)
    out["sections"].insert(0, gpu_types_view(result.answer).model_dump(mode="json"))
    return {**out, "gpu_types": result.answer.model_dump(mode="json"), "document": document}


def tune_result(answer: Any, env: Env) -> dict[str, Any]:
    """What the page draws of a study (the trials, their scatter, the importance, the
    recommendation card) and the answer's document."""
    from servesim.report.capacity import tune_document
    from servesim.views.recommendation import recommendation_view
    from servesim.views.trials import scatter_trials, trial_choices, trials_view

    res, rec = answer.study, answer.recommendation
    sections = [trials_view(res).model_dump(mode="json")]
    importance = param_importance(env["db_url"], res.study_name, res.objective)
    if importance is not None:
        sections.append(importance.model_dump(mode="json"))
    if rec is not None:
        sections.insert(0, recommendation_view(rec).model_dump(mode="json"))
    return {
        "executor": answer.executor,  # where the trials ran (--tune-executor)
        "study": res.model_dump(mode="json", exclude={"trials"}),
        "trials": [t.model_dump(mode="json") for t in res.trials],
        "scatter_trials": [t.number for t in scatter_trials(res)],  # the scatter's points, in order
        # the feasible trials to try, named as the verdict reads ("recommended", not "best")
        "trial_choices": [{"number": n, "label": label} for n, label in trial_choices(res, rec)],
        "recommendation": rec.model_dump(mode="json") if rec is not None else None,
        "no_recommendation": None
        if rec is not None
        else f"no recommendation for study {res.study_name} after {res.n_trials} trials",
        "sections": sections,
        "document": tune_document(answer),
    }


def layouts_job(body: TuneBody, env: Env, report: Report) -> dict[str, Any]:
    """``servesim tune --layouts``'s question for the body, answered by its service."""
    from servesim.report.capacity import layouts_document
    from servesim.services.layouts import compare
    from servesim.views.layouts import layouts_view

    report(0, 1)
    answer = compare(layouts_request(body, env))
    report(1, 1)
    return {
        "layouts": answer.answer.model_dump(mode="json"),
        "sections": [layouts_view(answer.answer).model_dump(mode="json")],
        "document": layouts_document(answer),
    }
