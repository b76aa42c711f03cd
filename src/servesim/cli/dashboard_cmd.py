"""``servesim dashboard``: a trace replayed live in the terminal, on one replica or a cluster.

The engine flags, the trace, the deployment (``--model/--gpu/--tp``), the fleet (``--replicas``,
``--router``, ``--fail``, the pools, ...) and ``--slo`` mean what they mean for ``simulate`` and
``cluster``: the same request (``SimulateRequest``, or the ``ClusterSpec`` of ``cli.cluster_flags``)
prepared by the same service. ``--headless`` is that service's answer and document; ``--ui
simple`` steps the same run live, then prints the same document. Textual is imported only when
the full-screen dashboard starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from servesim.cli.capacity_options import ConfigOpt, TraceArg, TraceFlags, trace_options
from servesim.cli.cluster_flags import ClusterInputs, FleetFlags, cluster_spec, fleet_options
from servesim.cli.cluster_output import print_cluster
from servesim.cli.common import cli_slo, fail, request_slo
from servesim.cli.engine_flags import deployment_flags, deployment_spec, engine_flags
from servesim.cli.pd_output import print_pd
from servesim.cli.simulate_cmd import report_answer, say_prepared
from servesim.errors import InputError, InternalError, shown, user_errors
from servesim.services.cluster import (
    ClusterRequest,
    PreparedCluster,
    PreparedDisaggregated,
    prepare_cluster,
)
from servesim.services.deployment import DeploymentSpec
from servesim.services.run import PreparedRun, SimulateAnswer, SimulateRequest, prepare

if TYPE_CHECKING:
    from servesim.tui.spec import DashboardSpec, PDDashboardSpec

Prepared = PreparedRun | PreparedCluster | PreparedDisaggregated

SloOpt = Annotated[str | None, typer.Option(help="SLOs for the gauges, e.g. ttft_p99_ms=500,tpot_p99_ms=50.")]
SpeedOpt = Annotated[
    str, typer.Option(help="Simulated seconds per wall second (10x, 0.5x); + and - change it.")
]
UiOpt = Annotated[str, typer.Option(help="full (the dashboard) or simple (progress lines).")]
HeadlessOpt = Annotated[bool, typer.Option(help="No display: run to the end, print simulate's summary.")]
StartOpt = Annotated[float, typer.Option(min=0, help="Open at this simulated time (fast-forwarded).")]
PausedOpt = Annotated[bool, typer.Option(help="Open paused.")]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="With --headless or --ui simple: write the JSON result here.")
]


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
    app.command("dashboard")(dashboard_cmd)


@deployment_flags
@engine_flags
@trace_options("Seed for generated traces and random routers.")
@fleet_options(
    replicas_help="Identical replicas n0..n{N-1} (default 1: one replica).",
    recovery_help="Recovery of interrupted jobs: planner (default), migrate or restart.",
)
def dashboard_cmd(
    trace: TraceArg,
    config: ConfigOpt = None,
    slo: SloOpt = None,
    speed: SpeedOpt = "1x",
    ui: UiOpt = "full",
    headless: HeadlessOpt = False,
    start_at: StartOpt = 0.0,
    paused: PausedOpt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --headless: the JSON result alone on stdout.")
    ] = False,
    out: OutOpt = None,
    *,
    flags: dict[str, Any],
    deployment: DeploymentSpec,
    source: TraceFlags,
    fleet: FleetFlags,
) -> None:
    """Watch a trace run live: batch slots, the waiting queue, KV, latency against the SLO."""
    try:
        rate = parse_speed(speed)
        if ui not in ("full", "simple"):
            raise InputError(f"--ui {shown(ui)}: use full or simple")
        request_slo(slo)  # refused before any line is printed, as every command does
        if not (headless or ui == "simple"):
            for flag, given in (("--json", as_json), ("--out", out is not None)):
                if given:
                    raise InputError(f"{flag} needs --headless or --ui simple (the dashboard is for people)")
        prepared = _prepare(trace, config, slo, flags, deployment, source, fleet)
        # the run's first lines (a disaggregated run's summary says its own timing)
        say_prepared(prepared, as_json or not headless or isinstance(prepared, PreparedDisaggregated))
        if headless or ui == "simple":
            _run_plain(prepared, headless=headless, speed=rate, as_json=as_json, out=out)
            return
        spec = dashboard_spec(prepared)
        if not sys.stdout.isatty():  # a pipe or a file: the full screen would wait for keys forever
            raise InputError("the full-screen dashboard needs a terminal: use --ui simple or --headless")
    except user_errors() as exc:
        fail(exc)
    from servesim.tui.app import DashboardApp

    DashboardApp(spec, speed=rate, paused=paused, start_at=start_at).run()


def _prepare(
    trace: str,
    config: Path | None,
    slo: str | None,
    flags: dict[str, Any],
    deployment: DeploymentSpec,
    source: TraceFlags,
    fleet: FleetFlags,
) -> Prepared:
    """The request the flags state, prepared by its service: ``servesim simulate``'s for one
    replica, ``servesim cluster``'s for replicas, failures or pools (its defaults: one replica,
    the planner's recovery)."""
    if not fleet.fleet_asked:
        dep = deployment_spec(deployment, config, flags)
        return prepare(SimulateRequest(trace=source.input(trace), deployment=dep, slo=cli_slo(slo)))
    inputs = ClusterInputs(
        trace,
        deployment,
        flags,
        config,
        fleet,
        cli_slo(slo),
        seed=source.seed,
        num_requests=source.num_requests,
    )
    spec = cluster_spec(inputs, default_replicas=1, default_recovery="planner")
    if spec.disaggregated is None and (spec.recovery == "compare" or spec.replicas is not None):
        raise InputError(
            "the dashboard runs one recovery strategy on identical replicas or on pools: "
            "--recovery compare and a --cluster file of named replicas are for servesim cluster"
        )
    return prepare_cluster(ClusterRequest(spec=spec, trace=source.input(trace)))


def dashboard_spec(prepared: Prepared) -> DashboardSpec | PDDashboardSpec:
    """What the full-screen dashboard steps: the prepared request's trace, engines and failures."""
    from servesim.tui.spec import DashboardSpec, PDDashboardSpec

    if isinstance(prepared, PreparedDisaggregated):
        slo = prepared.resolved.slo
        return PDDashboardSpec(
            prepared.trace, prepared.title, prepared.request.spec, prepared.resolved, slo=slo
        )
    if isinstance(prepared, PreparedRun):
        setup = prepared.setup
        return DashboardSpec(
            prepared.trace,
            prepared.request.trace.name,
            setup.config,
            setup.step_time,
            slo=prepared.slo,
            rebuild=prepared.rebuild,
            kv_connector=setup.kv_connector if setup.config.kv_offloading_size is not None else None,
        )
    from servesim.services.deployment import resolve_for_trace, runnable_deployment

    r = prepared.resolved
    setup = r.setups[0]
    _, rebuild = resolve_for_trace(runnable_deployment(prepared.request.spec.deployment), prepared.trace)
    return DashboardSpec(
        prepared.trace,
        prepared.request.trace_input().name,
        setup.config,
        setup.step_time,
        replicas=len(r.replicas),
        router=r.router,
        failures=tuple(r.events),
        recovery=r.strategies[0],
        context=r.link.context(),
        kv_checkpointing=r.link.kv_checkpointing,
        slo=r.slo,
        rebuild=rebuild,
        kv_connector=setup.kv_connector if setup.config.kv_offloading_size is not None else None,
    )


def _run_plain(prepared: Prepared, *, headless: bool, speed: float, as_json: bool, out: Path | None) -> None:
    """``--headless``: the service's answer; ``--ui simple``: the same run stepped live (progress
    lines), answered as the service answers it. Then the command's summary or document."""
    from servesim.tui.simple import run_simple

    def stepped() -> Any:
        return run_simple(
            dashboard_spec(prepared).start(), sys.stderr if as_json else sys.stdout, speed=speed
        )

    if isinstance(prepared, PreparedDisaggregated):
        print_pd(prepared.run() if headless else prepared.answer(stepped()), as_json, out)
        return
    if isinstance(prepared, PreparedCluster):
        print_cluster(prepared.run() if headless else prepared.answer(stepped()), as_json, out)
        return
    result = prepared.run() if headless else SimulateAnswer(prepared, stepped())
    if not isinstance(result, SimulateAnswer):
        raise InternalError("a one-replica dashboard run ended without its answer")
    report_answer(result, as_json=as_json, out=out, include_requests=True)


__all__ = ["dashboard_cmd", "dashboard_spec", "parse_speed", "register"]
