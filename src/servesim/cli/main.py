"""The ``servesim`` console script: one Typer app, one sub-module per command group.

Commands are registered lazily: ``servesim --help`` lists them from the table below without
importing any command module, and ``servesim NAME ...`` imports only the module that defines
NAME. So the advisor's Anthropic/pydantic-ai stack, Optuna, SciPy and pandas load only for the
commands that use them (``benchmarks/startup.py`` measures it). ``tests/cli/test_lazy_cli.py``
checks that this table and the modules agree.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from servesim.errors import InternalError
from servesim.version import __version__

#: Plain Click help (no Rich panels): starts in a fraction of the time (Rich's help pulls in
#: markdown-it and pygments), wraps at the terminal's width without cutting words, and shows
#: metavars (INTEGER, PATH) rather than placeholders. Command modules' sub-apps use it too.
HELP_MARKUP = None

#: name -> (module whose ``register(app)`` defines it, the one-line help ``--help`` lists).
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "servesim.cli.simulate_cmd",
        "Replay a trace through one vLLM V1 replica; print latency, throughput and goodput.",
    ),
    "demo": (
        "servesim.cli.demo_cmd",
        "The whole workflow end to end on bundled data (ingest, simulate, saturate, tune, fail, "
        "recover, advise), with a report.",
    ),
    "scenario": (
        "servesim.cli.scenario_cmd",
        "Answer a question in a JSON file: a request list under a batch config, or a load on a "
        "KV-block budget (examples/inputs/).",
    ),
    "reschedule": (
        "servesim.cli.resched_cmd",
        "Re-admission order of interrupted requests, prefix-cache savings and projected SLA misses.",
    ),
    "recover": (
        "servesim.cli.recover_cmd",
        "Plan the recovery of jobs interrupted by a node failure: MIGRATE_STATE or COLD_RESTART each.",
    ),
    "cluster": (
        "servesim.cli.cluster_cmd",
        "Run a trace on a cluster with node failures; compare recovery strategies on p99 TTFT/E2E.",
    ),
    "saturate": (
        "servesim.cli.tuning_cmd",
        "Scale the arrival rate: goodput knee, saturation rate, curve and status per rate.",
    ),
    "tune": (
        "servesim.cli.tuning_cmd",
        "Search vLLM flags, TP and replicas with Optuna; recommend, re-verified on fresh seeds.",
    ),
    "advise": (
        "servesim.cli.advise_cmd",
        "Get scheduling, rescheduling or fallback advice, re-checked by simulation.",
    ),
    "trace": ("servesim.cli.trace_cmd", "Read, check and convert request traces."),
    "generate": (
        "servesim.cli.trace_cmd",
        "Generate a seeded synthetic trace from a preset plus overrides, and summarise it.",
    ),
    "generate-failures": (
        "servesim.cli.recover_cmd",
        "Write a seeded synthetic failure log (input for `servesim recover`).",
    ),
    "perf": (
        "servesim.cli.perf_cmd",
        "Model and GPU catalogs, KV-cache capacity, step times (the roofline model).",
    ),
    "calibrate": (
        "servesim.cli.perf_cmd",
        "Fit a profile's efficiency factors and overheads to measurements; report the fit's error.",
    ),
    "sim2real": (
        "servesim.cli.perf_cmd",
        "Re-create every experiment's workload, simulate it, and write predictions for score.py.",
    ),
    "report": ("servesim.cli.report_cmd", "Write a self-contained HTML report from servesim JSON results."),
    "log": ("servesim.cli.log_cmd", "Show the action log: what was run, with what inputs, what it wrote."),
    "dashboard": (
        "servesim.cli.dashboard_cmd",
        "Watch a run live in the terminal: the batch, the queue, KV and latencies.",
    ),
    "serve": ("servesim.cli.serve_cmd", "The web workbench on http://127.0.0.1:8000/ (a token elsewhere)."),
    "emulate": (
        "servesim.cli.emulate_cmd",
        "Serve an OpenAI-compatible emulated vLLM fleet (Ray Serve) timed by servesim's engine.",
    ),
    "schema": (
        "servesim.cli.schema_cmd",
        "Print the JSON Schema of servesim's input/output objects (JSON on stdout).",
    ),
}


def load_module_commands(module: str) -> dict[str, Any]:
    """Every command ``module.register(app)`` defines, as Click commands (imports the module)."""
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=HELP_MARKUP)

    @sub.callback()
    def _group() -> None:  # a callback makes Typer build a group even for one command
        """Commands of one module."""

    from servesim.cli.actions import log_commands

    importlib.import_module(module).register(sub)
    log_commands(sub)  # every action goes through the action log (servesim.cli.actions)
    group = typer.main.get_command(sub)
    if not isinstance(group, TyperGroup):
        raise InternalError("invariant broken: isinstance(group, TyperGroup)")
    return dict(group.commands)


class LazyGroup(TyperGroup):
    """The root group: lists commands from ``COMMANDS``; imports a module only to run its command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loaded: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Any]:
        """Every command, loaded (introspection and tests; ``--help`` and runs stay lazy)."""
        for name in COMMANDS:
            self._load(name)
        return {name: self._loaded[name] for name in COMMANDS}

    @commands.setter
    def commands(self, value: dict[str, Any]) -> None:  # click's __init__ assigns {}
        self.__dict__.setdefault("_loaded", {}).update(value or {})

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def _load(self, name: str) -> Any:
        if name not in self._loaded and name in COMMANDS:
            self._loaded.update(load_module_commands(COMMANDS[name][0]))
        return self._loaded.get(name)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        # For the listing in `servesim --help`: a stub carrying the one-line help (no import).
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name][1], callback=None)

    def invoke(self, ctx: Any) -> Any:
        """Run the command under the CLI's one error mapping (``common.invoke_mapped``): any user
        error a command did not word itself (a RecursionError from a nested input, a MemoryError
        from a size no bound caught) is one line and exit 2, never a traceback; anything else is
        a bug in servesim: its traceback, a line saying so and where to report it, exit 1."""
        from servesim.cli.common import invoke_mapped

        return invoke_mapped(lambda: super(LazyGroup, self).invoke(ctx))

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = str(args[0]) if args else None
        if name is not None and name in COMMANDS:
            cmd = self._load(name)
            return (cmd.name if cmd else name), cmd, args[1:]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="servesim",
    cls=LazyGroup,
    rich_markup_mode=HELP_MARKUP,
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
