"""``servesim saturate TRACE --slo ttft_p99_ms=...,tpot_p99_ms=...``: scale the arrival rate and find
the SLO knee and the unstable rate, with the throughput-latency curve and a state per rate.

The command builds a ``SaturateRequest`` from its flags and calls ``servesim.services.capacity``
(the web's saturation job and the demo's sweep call the same service); ``--json`` prints
``report.capacity.saturate_document`` of the answer alone on stdout; errors are one line on
stderr with exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from servesim.cli.capacity_options import (
    ConfigOpt,
    ExecutorKind,
    JsonOpt,
    SloOpt,
    TraceArg,
    TraceFlags,
    check_timing,
    run_options,
    trace_options,
)
from servesim.cli.capacity_render import ERRORS, failed, print_header, print_saturation
from servesim.cli.common import cli_slo, emit
from servesim.cli.engine_flags import cluster_deployment_flags, deployment_spec, engine_flags
from servesim.cli.progress import progress_sink
from servesim.cli.trace_input import say_drops
from servesim.services.capacity import Execution, SaturateRequest
from servesim.services.deployment import DeploymentSpec

TargetOpt = Annotated[
    float | None, typer.Option(help="Load to judge headroom at (default: the trace's rate).")
]
SeedsOpt = Annotated[int, typer.Option(min=1, max=20, help="Fresh seeds (replicates) per rate.")]
RtolOpt = Annotated[float, typer.Option(help="Relative resolution of the rate search.")]
MinRateOpt = Annotated[float | None, typer.Option(help="Lowest rate to try.")]
MaxRateOpt = Annotated[float | None, typer.Option(help="Highest rate to try.")]
CompareOffOpt = Annotated[
    bool,
    typer.Option(
        "--compare-off/--no-compare-off",
        help="With --speculative-config: also search the deployment with speculation off and "
        "state the load where speculation stops paying (doubles the simulations).",
    ),
]
OutOpt = Annotated[Path | None, typer.Option(help="Write the JSON report here.")]


def register(app: typer.Typer) -> None:
    @app.command("saturate")
    @cluster_deployment_flags
    @engine_flags
    @trace_options("Seed of generated traces (the sweep's seeds are fresh seeds of this traffic).")
    @run_options(
        ExecutorKind.local,
        "Where simulations run (a search takes seconds: local by default).",
        "Workers (process pool or Ray CPUs).",
    )
    def saturate_cmd(
        trace: TraceArg,
        slo: SloOpt = None,
        target_rate: TargetOpt = None,
        config: ConfigOpt = None,
        seeds: SeedsOpt = 3,
        rtol: RtolOpt = 0.02,
        min_rate: MinRateOpt = None,
        max_rate: MaxRateOpt = None,
        compare_off: CompareOffOpt = True,
        out: OutOpt = None,
        as_json: JsonOpt = False,
        *,
        flags: dict[str, Any],
        deployment: DeploymentSpec,
        source: TraceFlags,
        run: Execution,
    ) -> None:
        """Scale the arrival rate: goodput knee, saturation rate, curve and status per rate."""
        from servesim.report.capacity import saturate_document
        from servesim.services.capacity import saturate

        try:
            spec = deployment_spec(deployment, config, flags)
            check_timing(spec)
            request = SaturateRequest(
                trace=source.input(trace),
                deployment=spec,
                slo=cli_slo(slo),
                target_rate=target_rate,
                seeds=seeds,
                rtol=rtol,
                min_rate=min_rate,
                max_rate=max_rate,
                compare_off=compare_off,
                execution=run,
            )
            with progress_sink(not as_json) as sink:
                answer = saturate(request, progress=sink)
        except ERRORS as exc:
            failed(exc)
        say_drops(answer.provenance)
        if emit(saturate_document(answer), as_json=as_json, out=out):
            return
        print_header(answer.hardware, request.deployment, answer.defaults_applied)
        print_saturation(answer.report)
