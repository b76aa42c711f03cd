"""The ``servesim`` console script: one Typer app, one sub-module per command group."""

from __future__ import annotations

import typer

from servesim import __version__
from servesim.cli.common import ErrorMappingGroup

app = typer.Typer(
    cls=ErrorMappingGroup,
    name="servesim",
    help=(
        "Simulate vLLM-style LLM serving without a GPU: read or generate traffic, replay it "
        "through a step-exact model of vLLM V1's scheduler, and get latency, throughput and "
        "goodput answers."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"servesim {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """servesim command line."""


def _register() -> None:
    # Imported here so that each command module stays independent of the others.
    from servesim.cli import (
        advise_cmd,
        cluster_cmd,
        dashboard_cmd,
        demo_cmd,
        log_cmd,
        report_cmd,
        resched_cmd,
        schema_cmd,
        serve_cmd,
        simulate_cmd,
    )
    from servesim.cli.actions import log_commands
    from servesim.cli.perf_cmd import register as register_perf_commands
    from servesim.cli.recover_cmd import register as register_recover_commands
    from servesim.cli.trace_cmd import register as register_trace_commands
    from servesim.cli.tuning_cmd import register as register_tuning_commands

    schema_cmd.register(app)
    simulate_cmd.register(app)
    resched_cmd.register(app)
    cluster_cmd.register(app)
    dashboard_cmd.register(app)
    advise_cmd.register(app)
    log_cmd.register(app)
    demo_cmd.register(app)
    report_cmd.register(app)
    register_trace_commands(app)
    register_perf_commands(app)
    register_tuning_commands(app)
    register_recover_commands(app)
    log_commands(app)
    serve_cmd.register(app)


_register()
