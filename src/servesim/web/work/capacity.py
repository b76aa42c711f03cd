"""Capacity jobs: a saturation sweep and a tuning study (stored in the workbench's database)."""

from __future__ import annotations

from typing import Any

from servesim.spec import DeploymentSpec
from servesim.traces import load_trace
from servesim.tuning import (
    Deployment,
    EvalContext,
    EvalSettings,
    Hardware,
    PercentileSLO,
    SaturationSettings,
    SearchSpace,
    TuneSettings,
    Workload,
    find_saturation,
    hardware_of,
    make_executor,
    recommend,
    space_from_mapping,
    tune,
)
from servesim.views.model import Section
from servesim.web.schemas import SaturateBody, TuneBody
from servesim.web.work import Env, Report, trace_path


def hardware(spec: DeploymentSpec) -> Hardware:
    """The study's hardware context of the request's deployment (as the CLI's ``saturate``/``tune``)."""
    return hardware_of(spec)


def workload(trace_id: str, env: Env) -> Workload:
    return Workload.from_trace(load_trace(trace_path(env, trace_id)))


def saturate_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.views.saturation import saturation_view

    body = SaturateBody.model_validate(params)
    wl = workload(body.trace_id, env)
    spec = body.deployment
    dep = Deployment.from_spec(spec, wl.default_max_model_len())
    rep = find_saturation(
        wl,
        dep,
        hardware(spec),
        body.slo,
        target_rate=body.target_rate or wl.base_rate,
        settings=SaturationSettings(seeds=list(range(body.seeds)), rtol=body.rtol),
        executor="local",
        progress=report,
    )
    return {
        "report": rep.model_dump(mode="json"),
        "sections": [saturation_view(rep).model_dump(mode="json")],
    }


def derived_study_name(
    wl: Workload,
    hw: Hardware,
    slo: PercentileSLO | None,
    space: SearchSpace,
    settings: TuneSettings,
    target_rate: float | None,
    ev: EvalSettings,
) -> str:
    """The name ``tune`` derives from everything that defines the study (the same settings resume
    the same study); known before the study starts, so the page can follow its trials."""
    from servesim.tuning.search import study_fingerprint, trial_spec

    spec = trial_spec(wl, settings, target_rate=target_rate)
    return f"servesim-tune-{study_fingerprint(wl, hw, slo, space.effective(hw), spec, ev)}"


def live_trials(db_url: str, study_name: str, limit: int = 300) -> list[dict[str, Any]]:
    """The study's finished trials so far (number, state, feasible, TTFT p99, goodput per GPU)."""
    import optuna

    from servesim.tuning.search import _record

    study = optuna.load_study(study_name=study_name, storage=db_url)
    out = []
    for t in study.get_trials(deepcopy=False)[-limit:]:
        r = _record(t)
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
    """Trials into the stored study (resumable), then the re-verified recommendation of the best."""
    import optuna

    from servesim.views.tuning import recommendation_view, scatter_trials, trials_view

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the job's progress says enough
    body = TuneBody.model_validate(params)
    wl = workload(body.trace_id, env)
    hw = hardware(body.deployment)
    space = space_from_mapping(body.space) if body.space else SearchSpace()
    settings = TuneSettings(
        objective=body.objective,
        n_trials=body.n_trials,
        seed=body.seed,
        seeds=list(range(body.trial_seeds)),
        max_gpus=body.max_gpus,
    )
    ev = EvalSettings()
    n = body.n_trials
    name = body.study_name or derived_study_name(wl, hw, body.slo, space, settings, body.target_rate, ev)

    mml = wl.default_max_model_len()
    current = None  # the user's configuration (the shared deployment panel's), the study's baseline
    if body.baseline:
        current = Deployment.from_spec(body.deployment, mml)

    def trial_progress(done: int, total: int) -> None:
        report(done, total + body.verify_seeds, {"study": name, "trials": live_trials(env["db_url"], name)})

    with make_executor(env["tune_executor"], EvalContext(wl, hw, body.slo, ev), n_jobs=1) as ex:  # type: ignore[arg-type]
        res = tune(
            wl,
            hw,
            body.slo,
            target_rate=body.target_rate,
            space=space,
            settings=settings,
            eval_settings=ev,
            executor=ex,
            n_jobs=1,
            storage=env["db_url"],
            study_name=name,
            progress=trial_progress,
            baseline=current,
        )
        rec = None
        if res.best is not None:
            by_number = {r.number: r for r in res.trials}
            candidates = []
            for num in res.shortlist(3):
                o = by_number[num].outcome
                if o is not None:
                    candidates.append(Deployment.model_validate({"max_model_len": mml, **o.params}))
            rec = recommend(
                wl,
                hw,
                body.slo,
                candidates,
                target_rate=res.target_rate_rps,
                verify_seeds=[1000 + i for i in range(body.verify_seeds)],
                eval_settings=ev,
                executor=ex,
                source={
                    "study": res.study_name,
                    "objective": res.objective,
                    "trials": res.shortlist(3),
                    "baseline_origin": "config" if current is not None else "vllm defaults",
                },
                baseline=Deployment.model_validate({"max_model_len": mml, **res.baseline.params})
                if res.baseline is not None
                else current,
                progress=lambda done, total: report(
                    n + done * body.verify_seeds // max(total, 1), n + body.verify_seeds
                ),
            )
    sections = [trials_view(res).model_dump(mode="json")]
    importance = param_importance(env["db_url"], name, res.objective)
    if importance is not None:
        sections.append(importance.model_dump(mode="json"))
    if rec is not None:
        sections.insert(0, recommendation_view(rec).model_dump(mode="json"))
    return {
        "executor": ex.kind,  # where the trials ran (--tune-executor)
        "study": res.model_dump(mode="json", exclude={"trials"}),
        "trials": [t.model_dump(mode="json") for t in res.trials],
        "scatter_trials": [t.number for t in scatter_trials(res)],  # the scatter's points, in order
        "recommendation": rec.model_dump(mode="json") if rec is not None else None,
        "no_recommendation": None
        if rec is not None
        else f"no feasible trial in study {res.study_name} after {res.n_trials} trials: relax the SLO, "
        "widen the search space or run more trials",
        "sections": sections,
    }
