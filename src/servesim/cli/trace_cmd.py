"""``servesim trace inspect|convert`` and ``servesim generate``: traces from the command line.

The reading, inspecting and generating are services (``servesim.services.traces``,
``servesim.services.generate``); this module spells them as commands. Bad input never shows a
traceback: the error is printed as one line (file, row, field, reason) on stderr and the exit
code is 2. ``--json`` prints only machine-readable JSON on stdout (keys sorted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servesim.cli.common import emit, out_option, print_json, said_written
from servesim.cli.model_flags import model_flags
from servesim.cli.tables import FitTable
from servesim.cli.trace_input import hash_block_size_option, say_drops, seed_option, strict_option
from servesim.report.documents import stamped
from servesim.services.generate import GenerateRequest, GeneratorOverrides, generate, presets
from servesim.services.traces import (
    BUNDLED_TRACES,
    FORMAT_NAMES,
    LengthStats,
    TraceFile,
    TraceStats,
    convert,
    inspect_trace,
)

_TRACE_HELP = f"Trace file, or a bundled trace name ({', '.join(sorted(BUNDLED_TRACES))})."
_FORMAT_HELP = f"Input format (auto-detected when omitted): {', '.join(FORMAT_NAMES)}."
_SEED_HELP = "Seed for the arrivals drawn for seed JSON files."

Source = Annotated[str, typer.Argument(help=_TRACE_HELP)]
Format = Annotated[str | None, typer.Option("--format", "-f", help=_FORMAT_HELP)]


def _length_row(ls: LengthStats) -> str:
    return (
        f"mean {ls.mean:,.1f}  p50 {ls.p50:,.0f}  p90 {ls.p90:,.0f}  p99 {ls.p99:,.1f}  "
        f"min {ls.min:,}  max {ls.max:,}"
    )


def stats_table(stats: TraceStats, title: str) -> Table:
    """A trace's statistics as a two-column table."""
    table = FitTable(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("format", stats.format)
    table.add_row("requests", f"{stats.num_requests:,}")
    table.add_row("dropped rows", f"{stats.num_dropped:,}")
    for d in stats.dropped_examples:
        where = f"row {d.row}" + (f", field '{d.field}'" if d.field else "")
        table.add_row("", f"{where}: {d.reason}")
    if stats.reordered:
        table.add_row("reordered", "yes (sorted by arrival time)")
    table.add_row("time span", f"{stats.time_span_s:,.1f} s")
    table.add_row("mean rate", f"{stats.mean_rate_rps:.3f} req/s")
    table.add_row("inter-arrival CV", f"{stats.iat_cv:.2f}  (1 = Poisson)")
    table.add_row("dispersion (1 s)", f"{stats.dispersion_1s:.2f}  (1 = Poisson); peak {stats.peak_1s}/s")
    table.add_row("prompt tokens", _length_row(stats.prompt))
    table.add_row("output tokens", _length_row(stats.output))
    if stats.prefix_reuse_ratio is None:
        table.add_row("prefix reuse", "no prefix information")
    else:
        table.add_row(
            "prefix reuse",
            f"{stats.prefix_reuse_ratio:.1%} of prompt tokens (from {stats.prefix_reuse_from})",
        )
    table.add_row("prefix groups / tenants", f"{stats.num_prefix_groups} / {stats.num_tenants}")
    return table


def inspect_cmd(
    file: Source,
    format: Format = None,
    strict: bool = strict_option(),
    hash_block_size: int | None = hash_block_size_option(),
    seed: int = seed_option(_SEED_HELP),
    out: Path | None = out_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON only."),
) -> None:
    """Load a trace and print its statistics (rate, burstiness, lengths, prefix reuse)."""
    trace = TraceFile(
        source=file, format=format, strict=strict, hash_block_size=hash_block_size, seed=seed
    ).read()
    say_drops(trace.provenance)
    stats = inspect_trace(trace)
    if not emit(stamped("trace", stats.model_dump(mode="json")), as_json=as_json, out=out):
        Console().print(stats_table(stats, f"{file}"))
        for note in trace.provenance.notes:
            typer.echo(f"note: {note}")
        said_written(out)


def convert_cmd(
    src: Source,
    dst: Path = typer.Argument(..., help="Output file: .csv, .jsonl, .json or .parquet (.gz for text)."),
    format: Format = None,
    to: str | None = typer.Option(None, "--to", help="Output format (default: from the extension)."),
    strict: bool = strict_option(),
    hash_block_size: int | None = hash_block_size_option(),
    seed: int = seed_option(_SEED_HELP),
) -> None:
    """Read any supported trace and write it in servesim's native format."""
    trace = TraceFile(
        source=src, format=format, strict=strict, hash_block_size=hash_block_size, seed=seed
    ).read()
    say_drops(trace.provenance)
    convert(trace, dst, to)
    typer.echo(f"wrote {len(trace):,} requests to {dst} ({trace.provenance.num_dropped:,} rows dropped)")


@model_flags(GeneratorOverrides, "overrides", aliases={"num_requests": ("-n",)}, switches=("no_rescale",))
def generate_cmd(
    preset: str = typer.Argument(
        "default", help="Preset name (see --list-presets) or an arrival name such as poisson_100_rps."
    ),
    spec_file: Path | None = typer.Option(
        None, "--spec", help="YAML/JSON GeneratorSpec to start from (instead of the preset)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the trace here (.csv, .jsonl, .json, .parquet)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the spec and statistics as JSON only."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
    *,
    overrides: GeneratorOverrides,
) -> None:
    """Generate a seeded synthetic trace from a preset plus overrides, and summarise it."""
    if list_presets:
        for name, description in presets():
            typer.echo(f"{name:18} {description}")
        return
    made = generate(GenerateRequest(preset=preset, spec_file=spec_file, overrides=overrides, out=out))
    if as_json:
        print_json(
            {
                "out": None if out is None else str(out),
                "spec": made.spec.model_dump(mode="json"),
                "stats": made.stats.model_dump(mode="json"),
            }
        )
        return
    Console().print(stats_table(made.stats, f"generated: {made.spec.name} (seed {made.spec.seed})"))
    typer.echo(
        f"wrote {len(made.trace):,} requests to {out}" if out is not None else "not written (no --out)"
    )


def register(app: typer.Typer) -> None:
    trace_app = typer.Typer(
        help="Read, check and convert request traces.", no_args_is_help=True, rich_markup_mode=None
    )
    app.add_typer(trace_app, name="trace")
    trace_app.command("inspect")(inspect_cmd)
    trace_app.command("convert")(convert_cmd)
    app.command("generate")(generate_cmd)
