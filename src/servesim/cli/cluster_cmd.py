"""``servesim cluster``: a trace on a cluster, replicas behind a router with node failures (the
recovery strategies compared) or prefill/decode pools (each request's time split by leg).

The command states the run as a ``ClusterSpec`` (``cli.cluster_flags``: the deployment, engine
and fleet flags and files) and asks ``servesim.services.cluster`` for the answer, the same one the
web, the dashboard's ``--headless`` and the demo get for the same spec; ``--json`` prints its
document (``report.documents.cluster_answer_document``) alone on stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from servesim.cli.capacity_options import ConfigOpt, JsonOpt, TraceArg, TraceFlags, trace_options
from servesim.cli.cluster_flags import ClusterInputs, FleetFlags, cluster_spec, fleet_options
from servesim.cli.cluster_output import print_cluster
from servesim.cli.common import cli_slo, request_slo
from servesim.cli.engine_flags import data_parallel_deployment_flags, engine_flags
from servesim.cli.pd_output import print_pd
from servesim.services.cluster import POLICIES, ClusterRequest, PreparedDisaggregated, prepare_cluster
from servesim.services.deployment import DeploymentSpec

SloOpt = Annotated[
    str | None,
    typer.Option(help="p99 caps, also per-request goodput thresholds: ttft_p99_ms=500,tpot_p99_ms=50."),
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Write the JSON result here (the document --json prints).")
]


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster_cmd)


@data_parallel_deployment_flags
@engine_flags
@trace_options("Seed for generated traces, random routers and MTBF failures.")
@fleet_options(
    replicas_help="Identical replicas n0..n{N-1} (default 2).",
    recovery_help=f"compare (default: a run without the failure and every strategy), or one of: "
    f"{', '.join(POLICIES)}.",
)
def cluster_cmd(
    trace: TraceArg,
    config: ConfigOpt = None,
    slo: SloOpt = None,
    out: OutOpt = None,
    as_json: JsonOpt = False,
    *,
    flags: dict[str, Any],
    deployment: DeploymentSpec,
    source: TraceFlags,
    fleet: FleetFlags,
) -> None:
    """Run a trace on a cluster with node failures; compare recovery strategies on p99 TTFT/E2E.
    With prefill and decode pools (--prefill-replicas/--decode-replicas, or a cluster file with
    ``prefill`` and ``decode``), run it disaggregated instead and split each request's time by leg."""
    request_slo(slo)  # --slo's wording, and good= refused for a single run, before any work
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
    request = ClusterRequest(spec=cluster_spec(inputs), trace=source.input(trace))
    prepared = prepare_cluster(request)
    for line in prepared.warnings:  # skipped rows, extrapolation notes: once the input is known good
        typer.echo(line, err=True)
    if isinstance(prepared, PreparedDisaggregated):
        print_pd(prepared.run(), as_json, out)
        return
    answer = prepared.run()
    if not as_json:
        for line in prepared.header:
            typer.echo(line)
    print_cluster(answer, as_json, out)
