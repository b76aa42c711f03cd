"""A generated trace: ``GenerateRequest`` -> ``GeneratedTrace``.

``servesim generate`` starts from a preset (or a ``GeneratorSpec`` file) and lays the user's
overrides over it (``GeneratorOverrides``: a rate, an arrival process and its parameters, length
distributions, shared prefixes, a seed): the same rules for every interface, so the same request
gives the same trace (same seed, same bytes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError, InternalError
from servesim.traces import (
    PRESETS,
    BurstArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    FixedLength,
    GammaArrivals,
    GeneratorSpec,
    LogNormalLength,
    LoRASpec,
    OnOffArrivals,
    PoissonArrivals,
    PrefixSpec,
    RampArrivals,
    ResampledLength,
    Trace,
    TraceStats,
    generate_trace,
    inspect_trace,
    preset_spec,
    write_trace,
)
from servesim.traces.arrivals import ArrivalModel
from servesim.traces.lengths import LengthModel

ArrivalKind = Literal["poisson", "gamma", "constant", "burst", "onoff", "ramp", "diurnal"]


class GeneratorOverrides(BaseModel):
    """What the user changes of a preset (None: the preset's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: int | None = Field(None, description="Number of requests.")
    rate: float | None = Field(
        None, description="Requests per second (on-rate for onoff, end rate for ramp, mean for diurnal)."
    )
    arrival: ArrivalKind | None = Field(None, description="Arrival process.")
    burstiness: float | None = Field(
        None, description="Gamma shape k (CV = 1/sqrt(k)), as in vllm bench serve; implies gamma."
    )
    no_rescale: bool = Field(
        False, description="Poisson/gamma: do not stretch so the last request is at N/rate."
    )
    rate_off: float | None = Field(None, description="onoff: requests per second while off.")
    on_s: float | None = Field(None, description="onoff: mean on period, seconds.")
    off_s: float | None = Field(None, description="onoff: mean off period, seconds.")
    rate_start: float | None = Field(None, description="ramp: rate at t=0, requests per second.")
    ramp_s: float | None = Field(None, description="ramp: seconds from --rate-start to --rate.")
    amplitude: float | None = Field(None, description="diurnal: relative rate swing, 0..1.")
    period_s: float | None = Field(None, description="diurnal: period of the cycle, seconds.")
    prompt_mean: float | None = Field(None, description="Log-normal prompt tokens: mean.")
    prompt_sigma: float | None = Field(None, description="Log-normal prompt tokens: sigma.")
    output_mean: float | None = Field(None, description="Log-normal output tokens: mean.")
    output_sigma: float | None = Field(None, description="Log-normal output tokens: sigma.")
    lengths_from: str | None = Field(
        None,
        description="Resample (prompt, output) pairs from a trace or length file, "
        "or azure-conv / azure-code.",
    )
    prefix_groups: int | None = Field(None, description="Number of shared-prefix groups.")
    prefix_len: int | None = Field(None, description="Tokens in each shared prefix.")
    zipf: float | None = Field(None, description="Zipf exponent of group popularity (0 = uniform).")
    prefix_fraction: float | None = Field(
        None, description="Share of requests that use a prefix group (0..1)."
    )
    lora_adapters: int | None = Field(None, description="Number of LoRA adapters the requests name.")
    lora_zipf: float | None = Field(None, description="Zipf exponent of adapter popularity (0 = uniform).")
    lora_fraction: float | None = Field(
        None, description="Share of requests that name a LoRA adapter (0..1; the rest: the base model)."
    )
    seed: int | None = Field(None, description="Random seed (same seed, same trace).")


class GenerateRequest(BaseModel):
    """A preset (or a spec file) and the overrides laid over it; ``out``: where to write it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str = Field("default", description="Preset name or an arrival name such as poisson_100_rps.")
    spec_file: Path | None = Field(None, description="A YAML/JSON GeneratorSpec to start from instead.")
    overrides: GeneratorOverrides = Field(default_factory=GeneratorOverrides)
    out: Path | None = Field(None, description="Write the trace here (.csv, .jsonl, .json, .parquet).")


@dataclass(frozen=True)
class GeneratedTrace:
    """The spec that generated the trace, the trace, and its statistics."""

    spec: GeneratorSpec
    trace: Trace
    stats: TraceStats


def presets() -> list[tuple[str, str]]:
    """(name, description) of every generator preset."""
    return [(name, description) for name, (description, _) in PRESETS.items()]


def generate(request: GenerateRequest) -> GeneratedTrace:
    """The trace of the request's spec (written to ``out`` when given), with its statistics."""
    base = load_spec(request.spec_file) if request.spec_file is not None else preset_spec(request.preset)
    spec = apply_overrides(base, **request.overrides.model_dump())
    trace = generate_trace(spec)
    if request.out is not None:
        write_trace(trace, request.out)
    return GeneratedTrace(spec=spec, trace=trace, stats=inspect_trace(trace))


def load_spec(path: Path) -> GeneratorSpec:
    """A ``GeneratorSpec`` file (``.json``, else YAML)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    return GeneratorSpec.model_validate(data)


def apply_overrides(spec: GeneratorSpec, **opts: Any) -> GeneratorSpec:
    """``spec`` with the overrides that were given (not None) applied; see ``generate --help``."""
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
    lora = _lora_override(spec.lora, opts)
    if lora is not None:
        changes["lora"] = lora
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


def _lora_override(current: LoRASpec | None, opts: dict[str, Any]) -> LoRASpec | None:
    keys = ("lora_adapters", "lora_zipf", "lora_fraction")
    if all(opts.get(k) is None for k in keys):
        return None
    base = current or LoRASpec(num_adapters=8)
    return LoRASpec(
        num_adapters=base.num_adapters if opts.get("lora_adapters") is None else opts["lora_adapters"],
        zipf_s=base.zipf_s if opts.get("lora_zipf") is None else opts["lora_zipf"],
        fraction=base.fraction if opts.get("lora_fraction") is None else opts["lora_fraction"],
    )


__all__ = [
    "ArrivalKind",
    "GenerateRequest",
    "GeneratedTrace",
    "GeneratorOverrides",
    "apply_overrides",
    "generate",
    "load_spec",
    "presets",
]
