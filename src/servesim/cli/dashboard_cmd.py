"""``servesim dashboard``: a trace replayed live in the terminal, on one replica or a cluster.

The engine flags, the trace, the deployment (``--model/--gpu/--tp``), the cluster (``--replicas``,
``--router``, ``--fail``) and ``--slo`` mean what they mean for ``simulate`` and ``cluster``: the same
parsing and setup code. Textual is imported only when the full-screen dashboard starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from servesim.bounds import MAX_REPLICAS
from servesim.cli.cluster_output import parse_fail, print_cluster
from servesim.cli.common import cli_slo, fail, request_slo
from servesim.cli.engine_flags import deployment_flags, deployment_spec, engine_flags
from servesim.cli.pd_cmd import check_timing, disagg_spec, pd_cluster_spec, pd_failures, print_pd
from servesim.cli.simulate_cmd import TRACE_HELP, report_answer, say_prepared
from servesim.cluster.compare import LinkSpec
from servesim.cluster.pd import DisaggSpec
from servesim.cluster.pd_results import PDResult
from servesim.engine import SLO
from servesim.errors import InputError, InternalError, shown, user_errors
from servesim.report.documents import disaggregated_title
from servesim.services.cluster import ClusterRequest, prepare_aggregated
from servesim.services.inputs import TraceInput
from servesim.services.run import PreparedRun, SimulateAnswer, SimulateRequest, prepare
from servesim.spec import DeploymentSpec, ResolvedDisaggregated, resolve_cluster
from servesim.traces.schema import Trace

if TYPE_CHECKING:
    from servesim.tui.spec import PDDashboardSpec


def parse_speed(text: str) -> float:
    """``10x``, ``10`` or ``0.5x``: simulated seconds per wall-clock second."""
    raw = text.strip().lower().removesuffix("x")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError(f"--speed {shown(text)}: give a positive factor such as 10x or 0.5x")
    return value


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    @deployment_flags
    @engine_flags
    def dashboard_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
        replicas: int = typer.Option(
            1, "--replicas", min=1, max=MAX_REPLICAS, help="Identical replicas n0..n{N-1}."
        ),
        router: str | None = typer.Option(
            None, help="Router policy of a cluster (default least_outstanding)."
        ),
        fail_at: list[str] = typer.Option([], "--fail", help="NODE@TIME[+RECOVER_AFTER], repeatable."),
        recovery: str = typer.Option(
            "planner", help="Recovery of interrupted jobs: planner, migrate or restart."
        ),
        kv_checkpointing: str = typer.Option("continuous", help="none | on_warning | continuous."),
        slo: str | None = typer.Option(
            None, help="SLOs for the gauges, e.g. ttft_p99_ms=500,tpot_p99_ms=50."
        ),
        seed: int = typer.Option(0, help="Seed for generated traces and random routers."),
        num_requests: int | None = typer.Option(None, "--num-requests", "-n", help="Requests (presets)."),
        speed: str = typer.Option(
            "1x", help="Simulated seconds per wall second (10x, 0.5x); + and - change it."
        ),
        ui: str = typer.Option("full", help="full (the dashboard) or simple (progress lines)."),
        headless: bool = typer.Option(False, help="No display: run to the end, print simulate's summary."),
        start_at: float = typer.Option(0.0, min=0, help="Open at this simulated time (fast-forwarded)."),
        paused: bool = typer.Option(False, help="Open paused."),
        as_json: bool = typer.Option(
            False, "--json", help="With --headless: the JSON result alone on stdout."
        ),
        out: Path | None = typer.Option(
            None, "--out", help="With --headless or --ui simple: write the JSON result here."
        ),
        prefill_replicas: int | None = typer.Option(
            None, min=1, max=64, help="Disaggregated: replicas of the prefill pool (with --decode-replicas)."
        ),
        decode_replicas: int | None = typer.Option(
            None, min=1, max=64, help="Disaggregated: decode pool size."
        ),
        link_name: str | None = typer.Option(
            None, "--link", help="Disaggregated: KV-transfer link preset (default rdma-400g)."
        ),
        short_prompt_tokens: int | None = typer.Option(
            None, min=0, help="Disaggregated: prompts shorter than this prefill on the decode replica."
        ),
        *,
        flags: dict[str, Any],
        deployment: DeploymentSpec,
    ) -> None:
        """Watch a trace run live: batch slots, the waiting queue, KV, latency against the SLO."""
        from servesim import RouterSpec
        from servesim.cluster import FailurePlan
        from servesim.tui.spec import DashboardSpec

        try:
            rate = parse_speed(speed)
            if ui not in ("full", "simple"):
                raise InputError(f"--ui {shown(ui)}: use full or simple")
            dep = deployment_spec(deployment, config, flags)
            goal = request_slo(slo)  # refused before any line is printed, as every command does
            disagg = disagg_spec(
                {},
                dep.engine,
                prefill_replicas,
                decode_replicas,
                link_name,
                short_prompt_tokens,
                deployment.model,
                deployment.tp,
            )
            if disagg is None and (link_name is not None or short_prompt_tokens is not None):
                raise InputError(
                    "--link and --short-prompt-tokens are for a disaggregated cluster: "
                    "give --prefill-replicas and --decode-replicas"
                )
            source = TraceInput(source=trace, seed=seed, num_requests=num_requests)
            if disagg is not None:
                tr = source.open()
                pd_spec = _pd_spec(
                    disagg,
                    deployment,
                    tr,
                    trace,
                    fail_at,
                    seed=seed,
                    num_requests=num_requests,
                    goal=goal,
                    slo_text=slo,
                    replicas=replicas,
                    router=router,
                    recovery=recovery,
                    kv_checkpointing=kv_checkpointing,
                )
                if headless or ui == "simple":
                    _run_pd_plain(pd_spec, disagg, headless=headless, speed=rate, as_json=as_json, out=out)
                    return
                if as_json:
                    raise InputError("--json needs --headless (the dashboard is for people)")
                if out is not None:
                    raise InputError("--out needs --headless or --ui simple (the dashboard is for people)")
        except user_errors() as exc:
            fail(exc)
        if disagg is not None:
            from servesim.tui.app import DashboardApp

            DashboardApp(pd_spec, speed=rate, paused=paused, start_at=start_at).run()
            return
        try:
            prepared = prepare(SimulateRequest(trace=source, deployment=dep, slo=cli_slo(slo)))
            say_prepared(prepared, as_json or not headless)
            tr, setup, rebuild = prepared.trace, prepared.setup, prepared.rebuild
            cfg, step = setup.config, setup.step_time
            events = sorted((parse_fail(x) for x in fail_at), key=lambda e: (e.time_s, e.node))
            FailurePlan(events=events)
            link = LinkSpec.model_validate(
                {
                    "kv_checkpointing": kv_checkpointing,
                    "tp": deployment.tp or 1,
                    **({"model": deployment.model} if deployment.model else {}),
                }
            )
            route = (
                RouterSpec.model_validate({"policy": router, "seed": seed}) if router is not None else None
            )
            spec = DashboardSpec(
                tr,
                trace,
                cfg,
                step,
                replicas=replicas,
                router=route,
                failures=tuple(events),
                recovery=recovery,
                context=link.context() if replicas > 1 or events or route else None,
                kv_checkpointing=link.kv_checkpointing,
                slo=goal,
                rebuild=rebuild,
                kv_connector=setup.kv_connector if cfg.kv_offloading_size is not None else None,
            )
            if spec.is_cluster and any(e.node not in {f"n{i}" for i in range(replicas)} for e in events):
                raise InputError(f"--fail names a replica that does not exist; replicas: n0..n{replicas - 1}")
            run = None
            if spec.is_cluster:  # the ClusterSpec ``servesim cluster`` records for the same flags
                from servesim.spec import ClusterSpec

                policy = (route or RouterSpec()).policy
                run = ClusterSpec(
                    trace=trace,
                    num_requests=num_requests,
                    seed=seed,
                    deployment=dep.model_copy(update={"replicas": replicas, "router": policy}),
                    router=route if route is not None and route != RouterSpec(policy=policy) else None,
                    link=link.model_dump(exclude={"model", "tp"}),
                    failures=events,
                    recovery=recovery,
                    slo=cli_slo(slo) if goal is not None else None,
                )
            if headless or ui == "simple":
                _run_plain(
                    spec,
                    headless=headless,
                    speed=rate,
                    as_json=as_json,
                    prepared=prepared,
                    out=out,
                    run=run,
                )
                return
            if as_json:
                raise InputError("--json needs --headless (the dashboard is for people)")
            if out is not None:
                raise InputError("--out needs --headless or --ui simple (the dashboard is for people)")
        except user_errors() as exc:
            fail(exc)
        from servesim.tui.app import DashboardApp

        DashboardApp(spec, speed=rate, paused=paused, start_at=start_at).run()


def _pd_spec(
    disagg: DisaggSpec,
    deployment: DeploymentSpec,
    tr: Trace,
    trace: str,
    fail_at: list[str],
    *,
    seed: int,
    num_requests: int | None,
    goal: SLO | None,
    slo_text: str | None,
    replicas: int,
    router: str | None,
    recovery: str,
    kv_checkpointing: str,
) -> PDDashboardSpec:
    """A disaggregated dashboard run: the ``ClusterSpec`` ``servesim cluster --prefill-replicas
    ... --decode-replicas ...`` records for the same flags (``cli.pd_cmd``'s plumbing), resolved."""
    from servesim.tui.spec import PDDashboardSpec

    for flag, given in (
        ("--replicas", replicas != 1),
        ("--router", router is not None),
        ("--recovery", recovery != "planner"),
        ("--kv-checkpointing", kv_checkpointing != "continuous"),
    ):
        if given:
            raise InputError(
                f"{flag} is for an aggregated cluster; a disaggregated one routes and recovers "
                "as deployed (docs/cluster.md): leave it out"
            )
    check_timing(deployment.step_time_ms, deployment.linear_step_time, deployment.model, deployment.gpu)
    events = pd_failures(
        disagg,
        [parse_fail(x) for x in fail_at],
        tr,
        mtbf_s=None,
        warning_s=0.0,
        recover_after_s=None,
        seed=seed,
    )
    timing = {
        "step_time_ms": deployment.step_time_ms,
        "linear_step_time": deployment.linear_step_time,
        "gpu_memory_utilization": deployment.gpu_memory_utilization,
        "profile": deployment.profile,
    }
    head = {"trace": trace, "num_requests": num_requests, "seed": seed}
    spec = pd_cluster_spec(
        head,
        disagg,
        deployment.gpu,
        timing,
        events,
        "disaggregated cluster",
        slo=cli_slo(slo_text) if goal is not None else None,
    )
    resolved = resolve_cluster(spec, tr)
    if not isinstance(resolved, ResolvedDisaggregated):
        raise InternalError("a disaggregated cluster resolved without its pools")
    title = disaggregated_title(trace, len(tr))
    return PDDashboardSpec(tr, title, spec, resolved, slo=goal)


def _run_pd_plain(
    spec: PDDashboardSpec,
    disagg: DisaggSpec,
    *,
    headless: bool,
    speed: float,
    as_json: bool,
    out: Path | None,
) -> None:
    """``--headless`` / ``--ui simple`` of a disaggregated run: what ``servesim cluster`` prints
    (and writes) for the same flags."""
    from servesim.tui.simple import run_simple

    live = spec.start()
    result: Any = (
        live.finish() if headless else run_simple(live, sys.stderr if as_json else sys.stdout, speed=speed)
    )
    if not isinstance(result, PDResult):
        raise InternalError("a disaggregated run ended without its P/D result")
    print_pd(
        result, disagg, spec.title, spec.resolved.timed_as, as_json, spec.cluster, spec.trace.provenance, out
    )


def _run_plain(
    spec: Any,
    *,
    headless: bool,
    speed: float,
    as_json: bool,
    prepared: PreparedRun | None = None,
    out: Path | None = None,
    run: Any = None,
) -> None:
    """``--headless`` (straight to the end) or ``--ui simple`` (progress lines), then the summary;
    ``run``: a cluster's ``ClusterSpec``, recorded in its document."""
    from servesim.cluster import ClusterResult
    from servesim.engine import SimulationResult
    from servesim.tui.simple import run_simple

    if headless and prepared is not None and not spec.is_cluster:  # simulate's run and document
        report_answer(prepared.run(), as_json=as_json, out=out, include_requests=True)
        return
    if spec.is_cluster:  # servesim cluster's request, answer and document
        if run is None:
            raise InternalError("a cluster dashboard run without its ClusterSpec")
        cluster = prepare_aggregated(ClusterRequest(spec=run), trace=spec.trace)
        if headless:
            answer = cluster.run()
        else:
            stepped = run_simple(spec.start(), sys.stderr if as_json else sys.stdout, speed=speed)
            if not isinstance(stepped, ClusterResult):
                raise InternalError("a cluster dashboard run ended without its cluster result")
            answer = cluster.answer(stepped)
        print_cluster(answer, as_json, out)
        return
    result = run_simple(spec.start(), sys.stderr if as_json else sys.stdout, speed=speed)
    if not isinstance(result, SimulationResult):
        raise InternalError("a one-replica dashboard run ended without its simulation result")
    if prepared is None:
        raise InternalError("a one-replica dashboard run without its prepared request")
    report_answer(SimulateAnswer(prepared, result), as_json=as_json, out=out, include_requests=True)
