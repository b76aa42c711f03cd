"""Reading, inspecting and converting traces: what ``servesim trace inspect|convert`` asks.

A trace is read the one way every command reads it (``servesim.traces.load_trace``: a file in any
supported format, or a bundled trace; rows that fail validation are skipped and listed, or with
``strict`` the first is an error naming file, row and field), inspected (rate, burstiness, lengths,
prefix reuse) and written in servesim's native format.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servesim.bounds import MAX_SEED
from servesim.traces import (
    BUNDLED_TRACES,
    FORMAT_NAMES,
    PRESETS,
    Trace,
    TraceError,
    TraceStats,
    generate_trace,
    inspect_trace,
    load_trace,
    open_trace,
    preset_spec,
    write_trace,
)
from servesim.traces.generate import GeneratorSpec
from servesim.traces.inspect import LengthStats
from servesim.traces.schema import RequestRecord, TraceProvenance


class TraceFile(BaseModel):
    """A trace file or bundled trace, and how to read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, description="Trace file, or a bundled trace name.")
    format: str | None = Field(None, description="Input format (auto-detected when omitted).")
    strict: bool = Field(False, description="Stop at the first bad row instead of skipping it.")
    hash_block_size: int | None = Field(None, ge=1, le=1 << 20, description="Tokens per hash_ids entry.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the arrivals drawn for seed JSON files.")

    def read(self) -> Trace:
        """The trace (its provenance lists every skipped row)."""
        return load_trace(
            self.source,
            format=self.format,
            strict=self.strict,
            hash_block_size=self.hash_block_size,
            seed=self.seed,
        )


def convert(trace: Trace, dst: Path, to: str | None = None) -> Path:
    """``trace`` written to ``dst`` in servesim's native format (``to``: the format, default from
    the extension), atomically."""
    write_trace(trace, dst, format=to)
    return dst


__all__ = [
    "BUNDLED_TRACES",
    "FORMAT_NAMES",
    "PRESETS",
    "GeneratorSpec",
    "LengthStats",
    "RequestRecord",
    "Trace",
    "TraceError",
    "TraceFile",
    "TraceProvenance",
    "TraceStats",
    "convert",
    "generate_trace",
    "inspect_trace",
    "load_trace",
    "open_trace",
    "preset_spec",
    "write_trace",
]
