"""``servesim simulate`` and ``servesim demo``: one vLLM replica over a trace.

Every engine setting is a vLLM key, taken from ``--config FILE`` (YAML or JSON) and/or a
``--kebab-case`` flag of the same name (a flag wins over the file). ``--json`` prints the
report alone on stdout; ``--out`` writes it to a file (atomically); ``--step-log`` writes one
JSON line per engine step, to compare with vLLM's own scheduler.
"""

from __future__ import annotations

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
from rich.table import Table

from servesim.cli.common import fail, json_bytes, parse_slo, print_json
from servesim.cli.trace_input import hash_block_size_option, read_trace, strict_option
from servesim.engine import (
    SLO,
    EngineConfig,
    EngineStallError,
    SimulationResult,
    StepTimeModel,
    simulate,
)
from servesim.engine.engine import jsonl_sink
from servesim.engine.results import ClassMetrics
from servesim.io import write_bytes_atomic
from servesim.perf import PerfError
from servesim.perf.setup import DEFAULT_GPU, DEFAULT_MODEL, ReplicaSetup, replica_setup
from servesim.traces import Trace, TraceError, open_trace

TRACE_HELP = (
    "Trace file, bundled trace (azure-conv, azure-code) or generator preset "
    "(default, poisson_100_rps, bursty, ...; see `servesim generate --list-presets`)."
)


class Policy(StrEnum):
    fcfs = "fcfs"
    priority = "priority"


class Mitigation(StrEnum):
    none = "none"
    protect = "protect"
    boost = "boost"


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


def say_setup(setup: ReplicaSetup, as_json: bool) -> None:
    """The first line of a human-readable output: what times the steps; warnings on stderr."""
    for note in setup.notes:  # extrapolation notes: one line each on stderr, never on --json's stdout
        typer.echo(f"warning: {note}", err=True)
    if not as_json:
        typer.echo(f"timed as: {setup.timed_as}")


@contextmanager
def progress_bar(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A Rich progress bar on stderr (only for humans: never with --json or without a terminal)."""
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


def summary_table(result: SimulationResult, title: str) -> Table:
    s = result.summary
    table = Table(title=title, title_justify="left")
    table.add_column("metric", style="bold")
    for col in ("mean", "p50", "p90", "p99", "max"):
        table.add_column(col, justify="right")
    for name, st in (
        ("TTFT ms", s.ttft_ms),
        ("TPOT ms", s.tpot_ms),
        ("ITL ms", s.itl_ms),
        ("E2E ms", s.e2e_ms),
        ("queue ms", s.queue_ms),
    ):
        table.add_row(name, *(f"{x:,.1f}" for x in (st.mean, st.p50, st.p90, st.p99, st.max)))
    return table


def totals_table(result: SimulationResult) -> Table:
    s = result.summary
    table = Table(show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row(
        "requests",
        f"{s.num_requests:,} ({s.num_finished:,} finished, {s.num_length_capped:,} capped by max_model_len, "
        f"{s.num_rejected_prompt_too_long + s.num_rejected_queue_timeout:,} rejected)",
    )
    table.add_row(
        "duration", f"{s.duration_s:,.1f} s in {s.num_steps:,} engine steps (busy {s.busy_s:,.1f} s)"
    )
    table.add_row(
        "throughput",
        f"{s.request_throughput:,.2f} req/s, {s.output_token_throughput:,.0f} output tok/s, "
        f"{s.total_token_throughput:,.0f} total tok/s",
    )
    if s.slo is not None:
        table.add_row(
            "goodput", f"{s.goodput:,.2f} req/s ({s.num_good:,} of {s.num_requests:,} meet the SLO)"
        )
    table.add_row(
        "batch",
        f"mean {s.mean_running:,.1f} running (max {s.max_running}), {s.mean_batch_tokens:,.0f} tokens/step; "
        f"mean {s.mean_waiting:,.1f} waiting (max {s.max_waiting})",
    )
    table.add_row("KV cache", f"mean {s.mean_kv_usage:.1%} used, max {s.max_kv_usage:.1%}")
    table.add_row(
        "preemptions",
        f"{s.num_preemptions:,} ({s.num_preempted_requests:,} requests, at most "
        f"{s.max_preemptions_per_request} each); {s.recomputed_tokens:,} tokens recomputed, "
        f"{s.reused_tokens:,} reused from the cache",
    )
    if s.num_starved:
        table.add_row(
            "starvation", f"{s.num_starved:,} requests STARVED (see the report's per-class figures)"
        )
    if s.prefix_cache_hit_rate is not None:
        table.add_row("prefix cache", f"hit rate {s.prefix_cache_hit_rate:.1%}")
    return table


def class_table(label: str, classes: dict[str, ClassMetrics]) -> Table:
    table = Table(title=f"by {label}", title_justify="left")
    for col in (label, "requests", "finished", "preemptions (max)", "starved", "SLA misses", "TTFT p99 ms"):
        table.add_column(col, justify="right")
    table.add_column("recomputed / reused tokens", justify="right")
    for name, c in classes.items():
        table.add_row(
            name,
            f"{c.num_requests:,}",
            f"{c.num_finished:,}",
            f"{c.num_preemptions:,} ({c.max_preemptions_per_request})",
            f"{c.num_starved:,}",
            f"{c.sla_violations:,}",
            f"{c.ttft_p99_ms:,.1f}",
            f"{c.recomputed_tokens:,} / {c.reused_tokens:,}",
        )
    return table


def report_json(result: SimulationResult, trace: Trace, include_requests: bool) -> dict[str, Any]:
    """The ``SimulationReport`` as JSON-ready data; the per-request records go straight from the
    result's columns to the JSON writer (no model per request: 100k requests in ~0.2 s)."""
    report = result.report(include_requests=False)
    report.trace_provenance = trace.provenance
    doc = report.model_dump(mode="json")
    doc["requests"] = result.request_rows() if include_requests else None
    return doc


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
) -> SimulationResult:
    sink = close = None
    if step_log is not None:
        sink, close = jsonl_sink(str(step_log))
    try:
        with progress_bar(not as_json, "simulating") as hook:
            result = simulate(
                trace,
                config,
                model,
                slo=slo,
                fast=not naive,
                step_log=sink,
                progress=hook,
                check_invariants=check_invariants,
            )
    finally:
        if close is not None:
            close()
    doc = report_json(result, trace, include_requests)
    if out is not None:
        write_bytes_atomic(out, json_bytes(doc) + b"\n")
    if as_json:
        print_json(doc)
    else:
        console = Console()
        console.print(summary_table(result, title))
        console.print(totals_table(result))
        for label, classes in (
            ("priority", result.summary.by_priority),
            ("tenant", result.summary.by_tenant),
        ):
            if len(classes) > 1:
                console.print(class_table(label, classes))
        if out is not None:
            console.print(f"report written to {out}")
    return result


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
        max_num_seqs: int | None = typer.Option(None, help="Most requests in the running batch."),
        max_num_batched_tokens: int | None = typer.Option(None, help="Token budget of one engine step."),
        block_size: int | None = typer.Option(None, help="Tokens per KV block."),
        num_gpu_blocks: int | None = typer.Option(None, help="KV blocks in the pool (incl. the null block)."),
        enable_chunked_prefill: bool | None = typer.Option(
            None,
            "--enable-chunked-prefill/--no-enable-chunked-prefill",
            help="Split long prompts across steps.",
        ),
        enable_prefix_caching: bool | None = typer.Option(
            None, "--enable-prefix-caching/--no-enable-prefix-caching", help="Reuse KV of identical prefixes."
        ),
        long_prefill_token_threshold: int | None = typer.Option(None, help="Per-request token cap per step."),
        policy: Policy | None = typer.Option(None, help="Waiting-queue order."),
        max_model_len: int | None = typer.Option(None, help="Context limit (default: longest request + 1)."),
        watermark: float | None = typer.Option(None, help="Fraction of blocks kept free for admissions."),
        queue_timeout_s: float | None = typer.Option(None, help="Reject requests unscheduled this long."),
        starvation_threshold: int | None = typer.Option(
            None, help="Preemptions that flag a request STARVED."
        ),
        starvation_mitigation: Mitigation | None = typer.Option(
            None, help="Spare STARVED requests as victims (protect) and raise their priority (boost)."
        ),
        step_time_ms: float | None = typer.Option(
            None, help="Every step takes this long (for step-by-step comparison) instead of the model's."
        ),
        linear_step_time: bool = typer.Option(
            False, help="servesim's linear step model (uncalibrated) instead of the model's."
        ),
        model: str | None = typer.Option(
            None, help=f"Served model (catalog name or config.json); default {DEFAULT_MODEL}."
        ),
        gpu: str | None = typer.Option(None, help=f"GPU of the replica; default {DEFAULT_GPU}."),
        tp: int | None = typer.Option(
            None, "--tp", "--tensor-parallel-size", min=1, max=64, help="Tensor-parallel degree; default 1."
        ),
        gpu_memory_utilization: float = typer.Option(
            0.9, min=0.01, max=1.0, help="vLLM's memory share (sizes the KV cache)."
        ),
        profile: str | None = typer.Option(None, help="Calibrated hardware profile (JSON path or name)."),
        slo: str | None = typer.Option(
            None,
            help="p99 caps, also per-request goodput thresholds: "
            "ttft_p99_ms=500,tpot_p99_ms=50,e2e_p99_ms=20000.",
        ),
        seed: int = typer.Option(0, help="Seed for generated traces and seed-JSON arrivals."),
        num_requests: int | None = typer.Option(
            None, "--num-requests", "-n", help="Requests to generate (presets only)."
        ),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        step_log: Path | None = typer.Option(None, help="Write one JSON line per engine step here."),
        out: Path | None = typer.Option(None, help="Write the JSON report here."),
        requests: bool = typer.Option(True, "--requests/--no-requests", help="Per-request records in JSON."),
        naive: bool = typer.Option(False, help="Use the naive loop (the fast path's reference)."),
        check_invariants: bool = typer.Option(
            False, help="Check block/token conservation every step (slow)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report alone on stdout."),
    ) -> None:
        """Replay a trace through one vLLM V1 replica; print latency, throughput and goodput."""
        try:
            cfg = engine_config(
                config,
                {
                    "max_num_seqs": max_num_seqs,
                    "max_num_batched_tokens": max_num_batched_tokens,
                    "block_size": block_size,
                    "num_gpu_blocks": num_gpu_blocks,
                    "enable_chunked_prefill": enable_chunked_prefill,
                    "enable_prefix_caching": enable_prefix_caching,
                    "long_prefill_token_threshold": long_prefill_token_threshold,
                    "policy": policy,
                    "max_model_len": max_model_len,
                    "watermark": watermark,
                    "queue_timeout_s": queue_timeout_s,
                    "starvation_threshold": starvation_threshold,
                    "starvation_mitigation": starvation_mitigation,
                },
            )
            goal = parse_slo(slo)
            tr = read_trace(
                trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
            )
            setup = replica_setup(
                cfg,
                model=model,
                gpu=gpu,
                tp=tp,
                gpu_memory_utilization=gpu_memory_utilization,
                profile=profile,
                max_model_len=cfg.max_model_len or tr.default_max_model_len(),
                num_gpu_blocks_given=num_gpu_blocks is not None or "num_gpu_blocks" in _file_keys(config),
                step_time_ms=step_time_ms,
                linear=linear_step_time,
            )
            say_setup(setup, as_json)
            cfg, step_model = setup.config, setup.step_time
            if len(tr) == 0 and not as_json:  # nothing to measure: no 0.0 ms latencies
                typer.echo(f"{trace}: no requests, nothing to measure (--json gives the empty report)")
                return
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
            )
        except (TraceError, ValidationError, ValueError, OSError, EngineStallError, PerfError) as exc:
            fail(exc)

    @app.command("demo")
    def demo_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report alone on stdout."),
    ) -> None:
        """The main job on bundled data: one hour of Azure's conversation trace (19,366 real
        requests) through one vLLM replica of Llama-3.1-8B on an H100 (vLLM's H100 defaults:
        max_num_seqs 1024, max_num_batched_tokens 8192; KV cache sized at 90 % of memory)."""
        trace = open_trace("azure-conv")
        base = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=1024, max_model_len=16384)
        setup = replica_setup(base, max_model_len=base.max_model_len)  # the default deployment
        say_setup(setup, as_json)
        cfg, step = setup.config, setup.step_time
        run_and_report(
            trace,
            cfg,
            step,
            slo=SLO(ttft_ms=1000, tpot_ms=100),
            as_json=as_json,
            out=None,
            step_log=None,
            include_requests=False,
            naive=False,
            title="demo: Azure LLM trace 2023 (conversation) on Llama-3.1-8B, one H100",
        )
