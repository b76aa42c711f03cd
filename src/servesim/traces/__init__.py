"""Traces: read real request logs, generate synthetic traffic, describe what a trace holds.

Public API::

    load_trace(path_or_bundled_name, *, format=None, strict=False, hash_block_size=None, seed=0) -> Trace
    open_trace("file.csv" | "azure-conv" | "poisson_100_rps", seed=0) -> Trace   (what CLIs accept)
    write_trace(trace, path, format=None) -> Path
    generate_trace(GeneratorSpec(...)) -> Trace;  preset_spec("default") -> GeneratorSpec
    inspect_trace(trace) -> TraceStats
    bundled_trace_path("azure-conv") -> Path

Module map: ``schema`` (types) · ``errors`` · ``sources`` (files, gzip, encoding) · ``readers``
(CSV/JSONL/JSON/Parquet chunks) · ``layouts`` (native, Azure, BurstGPT, Mooncake, Vidur, seed
JSON) · ``validate`` (vectorized checks) · ``load`` · ``writers`` · ``arrivals`` /
``arrival_names`` / ``lengths`` / ``prefixes`` / ``generate`` / ``presets`` (synthetic traffic)
· ``inspect`` (statistics) · ``bundled`` (shipped traces).
"""

from servesim.traces.adapters import LoRASpec
from servesim.traces.arrival_names import parse_arrival_name
from servesim.traces.arrivals import (
    ArrivalModel,
    BurstArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
)
from servesim.traces.bundled import BUNDLED_TRACES, bundled_trace_path
from servesim.traces.errors import TraceError
from servesim.traces.generate import GeneratorSpec, generate_trace
from servesim.traces.inspect import LengthStats, TraceStats, inspect_trace
from servesim.traces.lengths import FixedLength, LengthModel, LogNormalLength, ResampledLength, UniformLength
from servesim.traces.load import FORMAT_NAMES, load_trace
from servesim.traces.prefixes import PrefixSpec
from servesim.traces.presets import PRESETS, preset_spec
from servesim.traces.resolve import open_trace
from servesim.traces.schema import COLUMNS, DroppedRow, RequestRecord, Trace, TraceProvenance
from servesim.traces.writers import write_trace

__all__ = [
    "BUNDLED_TRACES",
    "COLUMNS",
    "FORMAT_NAMES",
    "PRESETS",
    "ArrivalModel",
    "BurstArrivals",
    "ConstantArrivals",
    "DiurnalArrivals",
    "DroppedRow",
    "FixedLength",
    "GammaArrivals",
    "GeneratorSpec",
    "LengthModel",
    "LengthStats",
    "LoRASpec",
    "LogNormalLength",
    "OnOffArrivals",
    "PoissonArrivals",
    "PrefixSpec",
    "RampArrivals",
    "RequestRecord",
    "ResampledLength",
    "Trace",
    "TraceError",
    "TraceProvenance",
    "TraceStats",
    "UniformLength",
    "bundled_trace_path",
    "generate_trace",
    "inspect_trace",
    "load_trace",
    "open_trace",
    "parse_arrival_name",
    "preset_spec",
    "write_trace",
]
