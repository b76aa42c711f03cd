"""``generate_trace``: seeded, reproducible synthetic traffic from a ``GeneratorSpec``.

One seed drives independent random streams (arrivals, prompt, output, prefix, resample; see
``arrivals.stream_rng``), so changing e.g. the output-length model leaves the arrival times
unchanged, and a seed JSON file with ``poisson_100_rps`` gets the same arrivals as a spec with
``PoissonArrivals(rate=100)`` and the same seed. Request ids are ``r0``, ``r1``, ... in arrival
order.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from servesim.errors import InputError, shown
from servesim.traces.adapters import LoRASpec, assign_adapters
from servesim.traces.arrivals import ArrivalModel, PoissonArrivals, sample_arrivals, stream_rng
from servesim.traces.frame import canonical_frame
from servesim.traces.lengths import (
    LengthModel,
    LogNormalLength,
    ResampledLength,
    length_table,
    sample_parametric,
)
from servesim.traces.prefixes import PrefixSpec, assign_prefixes
from servesim.traces.schema import Trace, TraceProvenance

DEFAULT_RATE_RPS = 10.0


class GeneratorSpec(BaseModel):
    """Everything that defines a synthetic trace; the same spec and seed give the same trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("custom", description="Label recorded in the provenance.")
    num_requests: int = Field(1000, ge=0, description="Number of requests.")
    seed: int = Field(0, ge=0, description="Seed of every random draw.")
    arrival: ArrivalModel = Field(
        default_factory=lambda: PoissonArrivals(rate=DEFAULT_RATE_RPS), description="Arrival process."
    )
    prompt: LengthModel = Field(
        default_factory=lambda: LogNormalLength(mean=1200, sigma=0.6, max=8192), description="Prompt tokens."
    )
    output: LengthModel = Field(
        default_factory=lambda: LogNormalLength(mean=150, sigma=0.8, max=2048), description="Output tokens."
    )
    prefix: PrefixSpec | None = Field(None, description="Shared-prefix groups; None = no sharing.")
    id_prefix: str = Field("r", description="Request ids are id_prefix + index.")
    lora: LoRASpec | None = Field(None, description="LoRA adapters per request; None = the base model only.")

    @model_serializer(mode="wrap")
    def _drop_no_lora(self, handler: Any) -> Any:
        """A spec without adapters dumps as before the field existed (provenance, saved specs)."""
        d = handler(self)
        if isinstance(d, dict) and d.get("lora", 0) is None:
            del d["lora"]
        return d


def generate_trace(spec: GeneratorSpec) -> Trace:
    """Draw a trace from ``spec`` (arrival-sorted; ``provenance.generator`` holds the spec)."""
    n = spec.num_requests
    arrivals = sample_arrivals(spec.arrival, n, stream_rng(spec.seed, "arrivals"))
    prompt = _lengths(spec.prompt, n, spec.seed, "prompt")
    output = _lengths(spec.output, n, spec.seed, "output")
    columns: dict[str, object] = {
        "req_id": [f"{spec.id_prefix}{i}" for i in range(n)],
        "arrival_time_s": arrivals,
        "output_len": output,
    }
    if spec.prefix is not None:
        groups, plen, prompt = assign_prefixes(spec.prefix, prompt, stream_rng(spec.seed, "prefix"))
        columns.update(prefix_group=groups, prefix_len=plen)
    columns["prompt_len"] = prompt
    if spec.lora is not None:  # its own stream: adding adapters changes no other column
        columns["lora"] = assign_adapters(spec.lora, n, stream_rng(spec.seed, "lora"))
    notes = sorted(
        {
            f"{which} lengths resampled from {m.source!r}"
            for which, m in (("prompt", spec.prompt), ("output", spec.output))
            if isinstance(m, ResampledLength)
        }
    )
    prov = TraceProvenance(
        source=f"generator:{spec.name}",
        format="synthetic",
        rows_read=n,
        rows_kept=n,
        generator=spec.model_dump(mode="json"),
        notes=notes,
    )
    return Trace(canonical_frame(columns, n), prov)


def _lengths(model: LengthModel, n: int, seed: int, which: str) -> np.ndarray:
    if not isinstance(model, ResampledLength):
        return sample_parametric(model, n, stream_rng(seed, which))
    prompt, output = length_table(model.source)
    if len(prompt) == 0:
        raise InputError(f"length source {shown(model.source)} has no usable rows")
    # Indices depend on (seed, source) only: prompt and output from one source draw the same rows.
    rng = np.random.default_rng(
        np.random.SeedSequence(seed, spawn_key=(4, zlib.crc32(model.source.encode())))
    )
    idx = rng.integers(0, len(prompt), size=n)
    return (prompt if which == "prompt" else output)[idx].astype(np.int64)
