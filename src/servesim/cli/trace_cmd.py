"""``servesim trace inspect|convert`` and ``servesim generate``: traces from the command line.

Bad input never shows a traceback: the error is printed as one line (file, row, field, reason)
on stderr and the exit code is 2. ``--json`` prints only machine-readable JSON on stdout (keys
sorted).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from servesim.cli.common import emit, out_option, print_json, said_written
from servesim.cli.tables import FitTable
from servesim.cli.trace_input import hash_block_size_option, say_drops, strict_option
from servesim.errors import InputError, InternalError
from servesim.report.documents import stamped
from servesim.traces import (
    BUNDLED_TRACES,
    FORMAT_NAMES,
    PRESETS,
    BurstArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    FixedLength,
    GammaArrivals,
    GeneratorSpec,
    LogNormalLength,
    OnOffArrivals,
    PoissonArrivals,
    PrefixSpec,
    RampArrivals,
    ResampledLength,
    TraceStats,
    generate_trace,
    inspect_trace,
    load_trace,
    preset_spec,
    write_trace,
)
from servesim.traces.arrivals import ArrivalModel
from servesim.traces.lengths import LengthModel

_TRACE_HELP = f"Trace file, or a bundled trace name ({', '.join(sorted(BUNDLED_TRACES))})."
_FORMAT_HELP = f"Input format (auto-detected when omitted): {', '.join(FORMAT_NAMES)}."


class ArrivalKind(StrEnum):
    poisson = "poisson"
    gamma = "gamma"
    constant = "constant"
    burst = "burst"
    onoff = "onoff"
    ramp = "ramp"
    diurnal = "diurnal"


def _stats_table(stats: TraceStats, title: str) -> Table:
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
    for name, ls in (("prompt tokens", stats.prompt), ("output tokens", stats.output)):
        table.add_row(
            name,
            f"mean {ls.mean:,.1f}  p50 {ls.p50:,.0f}  p90 {ls.p90:,.0f}  p99 {ls.p99:,.1f}  "
            f"min {ls.min:,}  max {ls.max:,}",
        )
    if stats.prefix_reuse_ratio is None:
        table.add_row("prefix reuse", "no prefix information")
    else:
        table.add_row(
            "prefix reuse",
            f"{stats.prefix_reuse_ratio:.1%} of prompt tokens (from {stats.prefix_reuse_from})",
        )
    table.add_row("prefix groups / tenants", f"{stats.num_prefix_groups} / {stats.num_tenants}")
    return table


def register(app: typer.Typer) -> None:
    trace_app = typer.Typer(
        help="Read, check and convert request traces.", no_args_is_help=True, rich_markup_mode=None
    )
    app.add_typer(trace_app, name="trace")

    @trace_app.command("inspect")
    def inspect_cmd(
        file: str = typer.Argument(..., help=_TRACE_HELP),
        format: str | None = typer.Option(None, "--format", "-f", help=_FORMAT_HELP),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        seed: int = typer.Option(0, "--seed", help="Seed for the arrivals drawn for seed JSON files."),
        out: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON only."),
    ) -> None:
        """Load a trace and print its statistics (rate, burstiness, lengths, prefix reuse)."""
        trace = load_trace(file, format=format, strict=strict, hash_block_size=hash_block_size, seed=seed)
        say_drops(trace.provenance)
        stats = inspect_trace(trace)
        if not emit(stamped("trace", stats.model_dump(mode="json")), as_json=as_json, out=out):
            Console().print(_stats_table(stats, f"{file}"))
            for note in trace.provenance.notes:
                typer.echo(f"note: {note}")
            said_written(out)

    @trace_app.command("convert")
    def convert_cmd(
        src: str = typer.Argument(..., help=_TRACE_HELP),
        dst: Path = typer.Argument(..., help="Output file: .csv, .jsonl, .json or .parquet (.gz for text)."),
        format: str | None = typer.Option(None, "--format", "-f", help=_FORMAT_HELP),
        to: str | None = typer.Option(None, "--to", help="Output format (default: from the extension)."),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        seed: int = typer.Option(0, "--seed", help="Seed for the arrivals drawn for seed JSON files."),
    ) -> None:
        """Read any supported trace and write it in servesim's native format."""
        trace = load_trace(src, format=format, strict=strict, hash_block_size=hash_block_size, seed=seed)
        say_drops(trace.provenance)
        write_trace(trace, dst, format=to)
        typer.echo(f"wrote {len(trace):,} requests to {dst} ({trace.provenance.num_dropped:,} rows dropped)")

    @app.command("generate")
    def generate_cmd(
        preset: str = typer.Argument(
            "default", help="Preset name (see --list-presets) or an arrival name such as poisson_100_rps."
        ),
        spec_file: Path | None = typer.Option(
            None, "--spec", help="YAML/JSON GeneratorSpec to start from (instead of the preset)."
        ),
        num_requests: int | None = typer.Option(None, "--num-requests", "-n", help="Number of requests."),
        rate: float | None = typer.Option(
            None,
            "--rate",
            help="Requests per second (on-rate for onoff, end rate for ramp, mean for diurnal).",
        ),
        arrival: ArrivalKind | None = typer.Option(None, "--arrival", help="Arrival process."),
        burstiness: float | None = typer.Option(
            None,
            "--burstiness",
            help="Gamma shape k (CV = 1/sqrt(k)), as in vllm bench serve; implies gamma.",
        ),
        no_rescale: bool = typer.Option(
            False, "--no-rescale", help="Poisson/gamma: do not stretch so the last request is at N/rate."
        ),
        rate_off: float | None = typer.Option(
            None, "--rate-off", help="onoff: requests per second while off."
        ),
        on_s: float | None = typer.Option(None, "--on-s", help="onoff: mean on period, seconds."),
        off_s: float | None = typer.Option(None, "--off-s", help="onoff: mean off period, seconds."),
        rate_start: float | None = typer.Option(
            None, "--rate-start", help="ramp: rate at t=0, requests per second."
        ),
        ramp_s: float | None = typer.Option(
            None, "--ramp-s", help="ramp: seconds from --rate-start to --rate."
        ),
        amplitude: float | None = typer.Option(
            None, "--amplitude", help="diurnal: relative rate swing, 0..1."
        ),
        period_s: float | None = typer.Option(
            None, "--period-s", help="diurnal: period of the cycle, seconds."
        ),
        prompt_mean: float | None = typer.Option(
            None, "--prompt-mean", help="Log-normal prompt tokens: mean."
        ),
        prompt_sigma: float | None = typer.Option(
            None, "--prompt-sigma", help="Log-normal prompt tokens: sigma."
        ),
        output_mean: float | None = typer.Option(
            None, "--output-mean", help="Log-normal output tokens: mean."
        ),
        output_sigma: float | None = typer.Option(
            None, "--output-sigma", help="Log-normal output tokens: sigma."
        ),
        lengths_from: str | None = typer.Option(
            None,
            "--lengths-from",
            help="Resample (prompt, output) pairs from a trace or length file, or azure-conv / azure-code.",
        ),
        prefix_groups: int | None = typer.Option(
            None, "--prefix-groups", help="Number of shared-prefix groups."
        ),
        prefix_len: int | None = typer.Option(None, "--prefix-len", help="Tokens in each shared prefix."),
        zipf: float | None = typer.Option(
            None, "--zipf", help="Zipf exponent of group popularity (0 = uniform)."
        ),
        prefix_fraction: float | None = typer.Option(
            None, "--prefix-fraction", help="Share of requests that use a prefix group (0..1)."
        ),
        seed: int | None = typer.Option(None, "--seed", help="Random seed (same seed, same trace)."),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Write the trace here (.csv, .jsonl, .json, .parquet)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the spec and statistics as JSON only."),
        list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
    ) -> None:
        """Generate a seeded synthetic trace from a preset plus overrides, and summarise it."""
        if list_presets:
            for name, (description, _) in PRESETS.items():
                typer.echo(f"{name:18} {description}")
            return
        base = _load_spec(spec_file) if spec_file is not None else preset_spec(preset)
        spec = apply_overrides(
            base,
            num_requests=num_requests,
            seed=seed,
            arrival=arrival.value if arrival is not None else None,
            rate=rate,
            burstiness=burstiness,
            no_rescale=no_rescale,
            rate_off=rate_off,
            on_s=on_s,
            off_s=off_s,
            rate_start=rate_start,
            ramp_s=ramp_s,
            amplitude=amplitude,
            period_s=period_s,
            prompt_mean=prompt_mean,
            prompt_sigma=prompt_sigma,
            output_mean=output_mean,
            output_sigma=output_sigma,
            lengths_from=lengths_from,
            prefix_groups=prefix_groups,
            prefix_len=prefix_len,
            zipf=zipf,
            prefix_fraction=prefix_fraction,
        )
        trace = generate_trace(spec)
        if out is not None:
            write_trace(trace, out)
        stats = inspect_trace(trace)
        if as_json:
            print_json(
                {
                    "out": None if out is None else str(out),
                    "spec": spec.model_dump(mode="json"),
                    "stats": stats.model_dump(mode="json"),
                }
            )
            return
        Console().print(_stats_table(stats, f"generated: {spec.name} (seed {spec.seed})"))
        typer.echo(f"wrote {len(trace):,} requests to {out}" if out is not None else "not written (no --out)")


def _load_spec(path: Path) -> GeneratorSpec:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    return GeneratorSpec.model_validate(data)


def apply_overrides(spec: GeneratorSpec, **opts: Any) -> GeneratorSpec:
    """``spec`` with the CLI options that were given (not None) applied; see ``generate --help``."""
    changes: dict[str, Any] = {}
    if opts.get("num_requests") is not None:
        changes["num_requests"] = opts["num_requests"]
    if opts.get("seed") is not None:
        changes["seed"] = opts["seed"]
    arrival = _arrival_override(spec.arrival, opts)
    if arrival is not None:
        changes["arrival"] = arrival
    changes.update(_length_overrides(spec, opts))
    prefix = _prefix_override(spec.prefix, opts)
    if prefix is not None:
        changes["prefix"] = prefix
    if not changes:
        return spec
    return GeneratorSpec.model_validate({**spec.model_dump(), **_dump(changes)})


def _dump(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in changes.items()}


def _current_rate(model: ArrivalModel) -> float | None:
    if isinstance(model, PoissonArrivals | GammaArrivals | ConstantArrivals):
        return model.rate
    if isinstance(model, OnOffArrivals):
        return model.rate_on
    if isinstance(model, RampArrivals):
        return model.rate_end
    if isinstance(model, DiurnalArrivals):
        return model.mean_rate
    return None


def _arrival_override(current: ArrivalModel, opts: dict[str, Any]) -> ArrivalModel | None:
    arrival_keys: tuple[str, ...] = ("arrival", "rate", "burstiness", "rate_off", "on_s", "off_s")
    arrival_keys += ("rate_start", "ramp_s", "amplitude", "period_s")
    if all(opts.get(k) is None for k in arrival_keys) and not opts.get("no_rescale"):
        return None
    kind = opts.get("arrival") or ("gamma" if opts.get("burstiness") is not None else current.kind)
    if kind == "poisson" and opts.get("burstiness") is not None:
        raise InputError("--burstiness needs --arrival gamma (Poisson is burstiness 1)")
    rate = opts.get("rate")
    if rate is None:
        rate = _current_rate(current) or 10.0

    def keep(option: str, attr: str, default: float) -> float:
        value = opts.get(option)
        if value is not None:
            return float(value)
        return float(getattr(current, attr, default))

    rescale = not opts.get("no_rescale") and getattr(current, "rescale", True)
    if kind == "poisson":
        return PoissonArrivals(rate=rate, rescale=rescale)
    if kind == "gamma":
        return GammaArrivals(rate=rate, burstiness=keep("burstiness", "burstiness", 1.0), rescale=rescale)
    if kind == "constant":
        return ConstantArrivals(rate=rate)
    if kind == "burst":
        return BurstArrivals()
    if kind == "onoff":
        return OnOffArrivals(
            rate_on=rate,
            rate_off=keep("rate_off", "rate_off", 0.0),
            mean_on_s=keep("on_s", "mean_on_s", 10.0),
            mean_off_s=keep("off_s", "mean_off_s", 10.0),
        )
    if kind == "ramp":
        return RampArrivals(
            rate_start=keep("rate_start", "rate_start", 0.0),
            rate_end=rate,
            duration_s=keep("ramp_s", "duration_s", 60.0),
        )
    return DiurnalArrivals(
        mean_rate=rate,
        amplitude=keep("amplitude", "amplitude", 0.5),
        period_s=keep("period_s", "period_s", 3600.0),
    )


def _lognormal(
    current: LengthModel, mean: float | None, sigma: float | None, default: LogNormalLength
) -> LengthModel:
    base = current if isinstance(current, LogNormalLength) else default
    return LogNormalLength(
        mean=base.mean if mean is None else mean,
        sigma=base.sigma if sigma is None else sigma,
        min=base.min,
        max=base.max,
    )


def _length_overrides(spec: GeneratorSpec, opts: dict[str, Any]) -> dict[str, Any]:
    source = opts.get("lengths_from")
    parametric = [opts.get(k) for k in ("prompt_mean", "prompt_sigma", "output_mean", "output_sigma")]
    if source is not None:
        if any(v is not None for v in parametric):
            raise InputError(
                "--lengths-from resamples real lengths; do not combine it with --prompt-*/--output-*"
            )
        return {"prompt": ResampledLength(source=source), "output": ResampledLength(source=source)}
    defaults = GeneratorSpec()
    out: dict[str, Any] = {}
    if opts.get("prompt_mean") is not None or opts.get("prompt_sigma") is not None:
        if not isinstance(defaults.prompt, LogNormalLength):
            raise InternalError("invariant broken: isinstance(defaults.prompt, LogNormalLength)")
        out["prompt"] = _lognormal(
            spec.prompt, opts.get("prompt_mean"), opts.get("prompt_sigma"), defaults.prompt
        )
    if opts.get("output_mean") is not None or opts.get("output_sigma") is not None:
        if not isinstance(defaults.output, LogNormalLength):
            raise InternalError("invariant broken: isinstance(defaults.output, LogNormalLength)")
        out["output"] = _lognormal(
            spec.output, opts.get("output_mean"), opts.get("output_sigma"), defaults.output
        )
    return out


def _prefix_override(current: PrefixSpec | None, opts: dict[str, Any]) -> PrefixSpec | None:
    keys = ("prefix_groups", "prefix_len", "zipf", "prefix_fraction")
    if all(opts.get(k) is None for k in keys):
        return None
    base = current or PrefixSpec(num_groups=8)
    return PrefixSpec(
        num_groups=base.num_groups if opts.get("prefix_groups") is None else opts["prefix_groups"],
        prefix_len=FixedLength(value=opts["prefix_len"])
        if opts.get("prefix_len") is not None
        else base.prefix_len,
        zipf_s=base.zipf_s if opts.get("zipf") is None else opts["zipf"],
        fraction=base.fraction if opts.get("prefix_fraction") is None else opts["prefix_fraction"],
        on_short_prompt=base.on_short_prompt,
    )
