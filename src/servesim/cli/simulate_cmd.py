"""``servesim simulate``: one vLLM replica over a trace.

Every engine setting is a vLLM key, taken from ``--config FILE`` (YAML or JSON) and/or a
``--kebab-case`` flag of the same name (a flag wins over the file). ``--json`` prints the
report alone on stdout; ``--out`` writes it to a file (atomically); ``--step-log`` writes one
JSON line per engine step, to compare with vLLM's own scheduler.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from servesim.cli.common import fail, print_json, write_text_atomic
from servesim.cli.engine_flags import DeploymentFlags, deployment_flags, engine_flags
from servesim.engine import (
    SLO,
    ConstantStepTime,
    EngineConfig,
    EngineStallError,
    LinearStepTime,
    SimulationResult,
    StepTimeModel,
    simulate,
)
from servesim.events import Observer, ProgressCallback, StepLogWriter
from servesim.perf import PerfError
from servesim.traces import Trace, TraceError, open_trace

TRACE_HELP = (
    "Trace file, bundled trace (azure-conv, azure-code) or generator preset "
    "(default, poisson_100_rps, bursty, ...; see `servesim generate --list-presets`)."
)


def _file_keys(path: Path | None) -> set[str]:
    if path is None:
        return set()
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {str(k).replace("-", "_") for k in data} if isinstance(data, dict) else set()


def engine_config(config_file: Path | None, flags: dict[str, Any]) -> EngineConfig:
    """The engine config from a vLLM-keyed file plus flag overrides (flags win)."""
    given = {k: (v.value if isinstance(v, StrEnum) else v) for k, v in flags.items() if v is not None}
    if config_file is not None:
        return EngineConfig.from_file(config_file, **given)
    return EngineConfig(**given)


def step_time_model(step_time_ms: float | None) -> StepTimeModel:
    if step_time_ms is not None:
        return ConstantStepTime(step_time_s=step_time_ms / 1000.0)
    return LinearStepTime()


def hardware_setup(
    config: EngineConfig,
    trace: Trace,
    *,
    model: str,
    gpu: str,
    tp: int,
    gpu_memory_utilization: float,
    profile: str | None,
    blocks_given: bool,
) -> tuple[EngineConfig, StepTimeModel]:
    """Step times and KV blocks of ``model`` on ``tp`` x ``gpu`` (servesim.perf), as vLLM would
    size its cache at ``gpu_memory_utilization`` (unless ``--num-gpu-blocks`` was given)."""
    from servesim.perf import deployment_setup

    mml = config.max_model_len or trace.default_max_model_len()
    setup = deployment_setup(
        model,
        gpu,
        tp,
        profile,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        block_size=config.block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=mml,
        size_kv_cache=not blocks_given,
    )
    for note in setup.notes:  # extrapolation notes: one line each on stderr, never on --json's stdout
        typer.echo(f"warning: {note}", err=True)
    if setup.num_gpu_blocks is not None:
        config = config.model_copy(update={"num_gpu_blocks": setup.num_gpu_blocks})
    step = setup.step_time
    return EngineConfig.model_validate(config.model_dump()), step


Rebuild = Callable[[EngineConfig], tuple[EngineConfig, StepTimeModel]]


def deploy(
    dep: DeploymentFlags, config: EngineConfig, trace: Trace, config_file: Path | None, flags: dict[str, Any]
) -> tuple[EngineConfig, StepTimeModel, Rebuild | None]:
    """The engine config and step times of the deployment flags (the KV cache sized for
    ``--model`` unless ``--num-gpu-blocks`` was given), and how to redo it after a flag change."""
    if dep.model is None:
        return config, step_time_model(dep.step_time_ms), None
    if dep.step_time_ms is not None:
        raise ValueError("give --model (roofline step times) or --step-time-ms, not both")
    model = dep.model
    blocks_given = flags.get("num_gpu_blocks") is not None or "num_gpu_blocks" in _file_keys(config_file)

    def rebuild(cfg: EngineConfig) -> tuple[EngineConfig, StepTimeModel]:
        return hardware_setup(
            cfg,
            trace,
            model=model,
            gpu=dep.gpu,
            tp=dep.tp,
            gpu_memory_utilization=dep.gpu_memory_utilization,
            profile=dep.profile,
            blocks_given=blocks_given,
        )

    cfg, step = rebuild(config)
    return cfg, step, rebuild


@contextmanager
def progress_bar(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A Rich progress bar on stderr (only for humans: never with --json or without a terminal);
    yields its ``update(done, total)`` (wrap it in ``ProgressCallback`` to observe a run)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def run_and_report(
    trace: Trace,
    config: EngineConfig,
    model: StepTimeModel,
    *,
    slo: SLO | None,
    as_json: bool,
    out: Path | None,
    step_log: Path | None,
    include_requests: bool,
    naive: bool,
    title: str,
    check_invariants: bool = False,
    views: bool = True,
) -> SimulationResult:
    writer = StepLogWriter(str(step_log)) if step_log is not None else None
    try:
        with progress_bar(not as_json, "simulating") as hook:
            observers: list[Observer] = [] if hook is None else [ProgressCallback(hook)]
            if writer is not None:
                observers.append(writer)
            result = simulate(
                trace,
                config,
                model,
                slo=slo,
                fast=not naive,
                observers=observers,
                check_invariants=check_invariants,
            )
    finally:
        if writer is not None:
            writer.close()
    report_result(
        result, trace, as_json=as_json, out=out, include_requests=include_requests, title=title, views=views
    )
    return result


def report_result(
    result: SimulationResult,
    trace: Trace,
    *,
    as_json: bool,
    out: Path | None,
    include_requests: bool,
    title: str,
    views: bool = True,
) -> None:
    """The summary view (or with ``--json`` the result document alone on stdout); ``out``: the
    same document as a file (the report's input)."""
    doc: dict[str, Any] = {}
    if out is not None or as_json:
        from servesim.report.documents import simulation_document
        from servesim.traces import inspect_trace

        doc = simulation_document(
            result,
            trace=trace,
            stats=inspect_trace(trace),
            title=title,
            include_requests=include_requests,
            sections=views,
        )
        if out is not None:
            write_text_atomic(out, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if as_json:
        print_json(doc)
    else:
        from servesim.cli.render import print_section
        from servesim.views.simulation import summary_view

        console = Console()
        print_section(summary_view(result.summary, title=title), console)
        if out is not None:
            console.print(f"report written to {out}")


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @deployment_flags
    @engine_flags
    def simulate_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
        slo: str | None = typer.Option(None, help="Goodput SLOs, e.g. ttft_ms=500,tpot_ms=50,e2e_ms=20000."),
        seed: int = typer.Option(0, help="Seed for generated traces and seed-JSON arrivals."),
        num_requests: int | None = typer.Option(
            None, "--num-requests", "-n", help="Requests to generate (presets only)."
        ),
        step_log: Path | None = typer.Option(None, help="Write one JSON line per engine step here."),
        out: Path | None = typer.Option(None, help="Write the JSON report here."),
        requests: bool = typer.Option(True, "--requests/--no-requests", help="Per-request records in JSON."),
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
        deployment: DeploymentFlags,
    ) -> None:
        """Replay a trace through one vLLM V1 replica; print latency, throughput and goodput."""
        try:
            cfg = engine_config(config, flags)
            goal = SLO.parse(slo) if slo else None
            tr = open_trace(trace, seed=seed, num_requests=num_requests)
            cfg, step_model, _ = deploy(deployment, cfg, tr, config, flags)
            run_and_report(
                tr,
                cfg,
                step_model,
                slo=goal,
                as_json=as_json,
                out=out,
                step_log=step_log,
                include_requests=requests,
                naive=naive,
                check_invariants=check_invariants,
                title=f"{trace}: {len(tr):,} requests",
                views=views,
            )
        except (TraceError, ValidationError, ValueError, OSError, EngineStallError, PerfError) as exc:
            fail(exc)
