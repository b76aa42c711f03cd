"""``servesim simulate``: one vLLM replica over a trace.

Every engine setting is a vLLM key, taken from ``--config FILE`` (YAML or JSON) and/or a
``--kebab-case`` flag of the same name (a flag wins over the file). ``--json`` prints the
report alone on stdout; ``--out`` writes it to a file (atomically); ``--step-log`` writes one
JSON line per engine step, to compare with vLLM's own scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from servesim.cli.common import cli_slo, json_bytes, request_slo
from servesim.cli.engine_flags import data_parallel_deployment_flags, deployment_spec, engine_flags
from servesim.cli.progress import progress_sink
from servesim.cli.records_out import records_format, requests_format_option, requests_out_option
from servesim.cli.trace_input import hash_block_size_option, seed_option, strict_option
from servesim.events import StepLogWriter
from servesim.heap import unmap_large_blocks
from servesim.io import atomic_file
from servesim.services.cluster import PreparedCluster, PreparedDisaggregated
from servesim.services.deployment import DeploymentSpec, Rebuild, ResolvedDeployment, resolve_for_trace
from servesim.services.inputs import TraceInput
from servesim.services.run import PreparedRun, SimulateAnswer, SimulateRequest, prepare
from servesim.services.traces import Trace

TRACE_HELP = (
    "Trace file, bundled trace (azure-conv, azure-code) or generator preset "
    "(default, poisson_100_rps, bursty, ...; see `servesim generate --list-presets`)."
)


def say_setup(setup: ResolvedDeployment, as_json: bool) -> None:
    """The first lines of a human-readable output: what times the steps, and the vllm serve
    defaults applied; extrapolation warnings on stderr (never on --json's stdout)."""
    for note in setup.notes:
        typer.echo(f"warning: {note}", err=True)
    if not as_json:
        typer.echo(f"timed as: {setup.timed_as}")
        if setup.defaults_line:
            typer.echo(setup.defaults_line)


def deploy(
    spec: DeploymentSpec, trace: Trace | None, *, as_json: bool = True
) -> tuple[ResolvedDeployment, Rebuild]:
    """``servesim.spec.resolve`` of the command's deployment (the KV cache sized for the trace's
    longest request unless the config sets ``max_model_len``; without a trace, a server's, the
    config's stands), said on the first lines unless ``as_json``, and how to redo it after a flag
    change (the dashboard's restart)."""
    resolved, rebuild = resolve_for_trace(spec, trace)
    say_setup(resolved, as_json)
    return resolved, rebuild


def say_prepared(prepared: PreparedRun | PreparedCluster | PreparedDisaggregated, as_json: bool) -> None:
    """What a run will be, before it starts: warnings on stderr; with a human output, the
    ``timed as`` and ``defaults`` lines first on stdout."""
    for line in prepared.warnings:
        typer.echo(line, err=True)
    if not as_json:
        for line in prepared.header:
            typer.echo(line)


def run_and_report(
    prepared: PreparedRun,
    *,
    as_json: bool,
    out: Path | None,
    step_log: Path | None,
    include_requests: bool,
    views: bool = True,
    requests_out: Path | None = None,
    requests_format: str | None = None,
) -> SimulateAnswer:
    """Run a prepared request (``servesim.services.run``), with a step log and a progress bar
    when asked, then report it (``report_answer``)."""
    writer = StepLogWriter(str(step_log)) if step_log is not None else None
    try:
        with progress_sink(not as_json) as sink:
            answer = prepared.run(progress=sink, observers=[writer] if writer is not None else [])
    except BaseException:
        if writer is not None:
            writer.abort()  # a failed run leaves no step log
        raise
    if writer is not None:
        writer.close()
    report_answer(
        answer,
        as_json=as_json,
        out=out,
        include_requests=include_requests,
        views=views,
        requests_out=requests_out,
        requests_format=requests_format,
    )
    return answer


def report_answer(
    answer: SimulateAnswer,
    *,
    as_json: bool,
    out: Path | None,
    include_requests: bool,
    views: bool = True,
    requests_out: Path | None = None,
    requests_format: str | None = None,
) -> None:
    """The summary view (or with ``--json`` the answer's document alone on stdout); ``out``: the
    same document as a file (the report's input); ``requests_out``: the per-request records as a
    JSON-lines or Parquet file. Records are streamed from the result's columns a chunk at a time
    (``servesim.engine.records``), never built all at once."""
    from servesim.report.documents import simulate_document

    result = answer.result
    fmt = records_format(requests_out, requests_format)
    if requests_out is not None and fmt is not None:
        from servesim.services.run import write_records

        write_records(requests_out, result.requests, "parquet" if fmt == "parquet" else "jsonl")
    if out is not None or as_json:
        doc = simulate_document(answer, sections=views)

        def pieces() -> Iterator[bytes]:
            if not include_requests:
                yield json_bytes(doc)
                return
            from servesim.services.run import document_chunks

            yield from document_chunks(doc, result.requests, json_bytes)

        if out is not None:
            with atomic_file(out) as fh:
                fh.writelines(pieces())
                fh.write(b"\n")
        if as_json:
            for piece in pieces():  # click writes bytes to the binary stdout
                typer.echo(piece, nl=False)
            typer.echo(b"")
            return
    from servesim.cli.render import print_section
    from servesim.views.simulation import summary_view

    console = Console()
    if len(answer.trace):
        print_section(summary_view(result.summary, title=answer.title), console)
        if answer.data_parallel_line:
            console.print(answer.data_parallel_line, soft_wrap=True)
    else:  # nothing to measure: no 0.0 ms latencies; the files hold the empty run's result
        console.print(f"{answer.title}: no requests, nothing to measure", soft_wrap=True)
    if out is not None:
        console.print(f"report written to {out}", soft_wrap=True)  # a path is never cut
    if requests_out is not None:
        console.print(f"per-request records written to {requests_out}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @data_parallel_deployment_flags
    @engine_flags
    def simulate_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
        slo: str | None = typer.Option(
            None,
            help="p99 caps, also per-request goodput thresholds: "
            "ttft_p99_ms=500,tpot_p99_ms=50,e2e_p99_ms=20000.",
        ),
        seed: int = seed_option("Seed for generated traces and seed-JSON arrivals."),
        num_requests: int | None = typer.Option(
            None, "--num-requests", "-n", help="Requests to generate (presets only)."
        ),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        step_log: Path | None = typer.Option(None, help="Write one JSON line per engine step here."),
        out: Path | None = typer.Option(None, help="Write the JSON report here."),
        requests: bool | None = typer.Option(
            None,
            "--requests/--no-requests",
            help="Per-request records in the JSON document (default: yes, unless --requests-out takes them).",
        ),
        requests_out: Path | None = requests_out_option(),
        requests_format: str | None = requests_format_option(),
        views: bool = typer.Option(
            True, "--views/--no-views", help="Charts' data (workload, histograms, per-step series) in JSON."
        ),
        naive: bool = typer.Option(False, help="Use the naive loop (the fast path's reference)."),
        check_invariants: bool = typer.Option(
            False, help="Check block/token conservation every step (slow)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report alone on stdout."),
        *,
        flags: dict[str, Any],
        deployment: DeploymentSpec,
    ) -> None:
        """Replay a trace through one vLLM V1 replica; print latency, throughput and goodput."""
        request_slo(slo)  # --slo's wording, and good= refused for a single run, before any work
        records_format(requests_out, requests_format)  # a bad name fails before the run
        unmap_large_blocks()  # a big run's freed columns leave its resident memory (servesim.heap)
        request = SimulateRequest(
            trace=TraceInput(
                source=trace,
                seed=seed,
                num_requests=num_requests,
                strict=strict,
                hash_block_size=hash_block_size,
            ),
            deployment=deployment_spec(deployment, config, flags),
            slo=cli_slo(slo),
            naive=naive,
            check_invariants=check_invariants,
        )
        prepared = prepare(request)
        say_prepared(prepared, as_json)
        if (
            len(prepared.trace) == 0
            and not as_json
            and out is None
            and requests_out is None
            and step_log is None
        ):
            typer.echo(f"{trace}: no requests, nothing to measure (--json gives the empty report)")
            return
        run_and_report(
            prepared,
            as_json=as_json,
            out=out,
            step_log=step_log,
            include_requests=requests if requests is not None else requests_out is None,
            views=views,
            requests_out=requests_out,
            requests_format=requests_format,
        )
