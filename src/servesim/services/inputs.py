"""What every request shares: where its trace comes from, and how a service reports progress.

``TraceInput`` names a trace the way a user does (a file, a bundled trace, a generator preset with
its size and seed) plus how to read it (``strict``, ``hash_block_size``) and the name the results
show (``label``: the web stores an upload under an id but shows the name it was uploaded as). The
CLI, the web and the demo all open a trace through it, so the same input is read the same way.

``Progress`` is the one progress callback of every service: ``(phase, done, total)``, where a
phase is what an interface shows as one bar (``simulating``, ``rates``, ``trials``,
``verifying``); ``detail`` carries a small JSON-able snapshot when a phase has one to show.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from servesim.bounds import MAX_SEED
from servesim.traces.schema import TraceProvenance

if TYPE_CHECKING:
    from servesim.traces import Trace

#: Skipped rows named in the warning line (all are counted; the document lists the first 1000).
LISTED_DROPS = 3
#: A reason longer than this is cut in the warning line (a 10 MB bad value is not echoed).
MAX_REASON_CHARS = 160


class TraceInput(BaseModel):
    """A trace as the user names it, and how to read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, description="Trace file, bundled trace or generator preset.")
    num_requests: int | None = Field(None, ge=0, description="Requests to generate (presets only).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of generated traces and seed-JSON arrivals.")
    strict: bool = Field(False, description="Stop at the first bad row instead of skipping it.")
    hash_block_size: int | None = Field(
        None, ge=1, le=1 << 20, description="Tokens per hash_ids entry (CSV/JSONL cannot store it)."
    )
    label: str | None = Field(None, description="The name results show (default: source).")
    provenance: TraceProvenance | None = Field(
        None,
        description="How the trace was read where it was read first (the web reads an upload once, "
        "keeps it as Parquet and its provenance beside it): the results say that, not the copy's.",
    )

    @property
    def name(self) -> str:
        """The trace's name in titles and provenance."""
        return self.label or (self.provenance.source if self.provenance is not None else self.source)

    def open(self) -> Trace:
        """The trace (``servesim.traces.open_trace``), its provenance named ``name``."""
        from servesim.traces import open_trace

        trace = open_trace(
            self.source,
            seed=self.seed,
            num_requests=self.num_requests,
            strict=self.strict,
            hash_block_size=self.hash_block_size,
        )
        if self.provenance is not None:
            trace.provenance = self.provenance
        if self.label is not None:
            trace.provenance = trace.provenance.model_copy(update={"source": self.label})
        return trace


class Progress(Protocol):
    """A service's progress: ``phase`` names what is counted; ``detail`` is an optional snapshot."""

    def __call__(
        self, phase: str, done: int, total: int, detail: Mapping[str, Any] | None = None, /
    ) -> None: ...


def counter(progress: Progress | None, phase: str) -> Callable[[int, int], None] | None:
    """The library's ``progress(done, total)`` callback of one phase (None without a sink)."""
    if progress is None:
        return None

    def update(done: int, total: int) -> None:
        progress(phase, done, total)

    return update


def timing_words(step_time_model: Mapping[str, Any], num_gpu_blocks: int | None = None) -> str:
    """What times the engine's steps, from a step-time model's description (``describe_model``):
    the words after ``timed as:`` in every interface."""
    kind = step_time_model.get("kind")
    if kind == "constant":
        text = f"every engine step {1000 * float(step_time_model['step_time_s']):g} ms (constant, as asked)"
    elif kind == "linear":
        text = "servesim's linear step model (an uncalibrated stand-in, as asked)"
    elif kind == "roofline":
        text = (
            f"{step_time_model.get('model')} on {step_time_model.get('tp', 1)} x "
            f"{step_time_model.get('gpu')}, roofline step times"
        )
    else:
        text = f"a {kind or 'custom'} step-time model"
    return text if num_gpu_blocks is None else f"{text}; {num_gpu_blocks:,} KV blocks"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def dropped_rows_line(prov: TraceProvenance | None) -> str | None:
    """The one-line warning for skipped rows (None when none was skipped): every interface says
    it the same way, and the document's ``trace_provenance`` lists them all."""
    if prov is None or not prov.num_dropped:
        return None
    shown = [
        f"row {d.row}" + (f", {d.field}" if d.field else "") + f": {_cut(d.reason)}"
        for d in prov.dropped[:LISTED_DROPS]
    ]
    more = prov.num_dropped - len(shown)
    tail = f"; and {more:,} more" if more > 0 else ""
    return (
        f"warning: skipped {prov.num_dropped:,} bad row(s) of {_cut(prov.source)} "
        f"(kept {prov.rows_kept:,} of {prov.rows_read:,}): {'; '.join(shown)}{tail} "
        "(all listed in --json's trace_provenance; --strict stops at the first)"
    )


__all__ = ["Progress", "TraceInput", "counter", "dropped_rows_line", "timing_words"]
