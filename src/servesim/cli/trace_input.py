"""Reading a trace at the command line: one loader and one pair of options for every command.

Every command that reads a trace takes ``--strict`` (stop at the first bad row) and
``--hash-block-size`` (tokens per ``hash_ids`` entry, which CSV/JSONL cannot store), and says on
stderr, in one line, how many rows it skipped and why (file, row, field) — nothing is lost
without a word. The same list is in the JSON result's ``trace_provenance``.
"""

from __future__ import annotations

from typing import Any

import typer

from servesim.bounds import MAX_SEED
from servesim.services.traces import Trace, TraceProvenance, open_trace

#: Skipped rows named on the stderr line (all are counted; the JSON lists the first 1000).
LISTED_ON_STDERR = 3
#: A reason longer than this is cut on the stderr line (a 10 MB bad value is not echoed).
MAX_REASON_CHARS = 160

STRICT_HELP = "Stop at the first bad row (file, row, field) instead of skipping it."
HASH_BLOCK_HELP = "Tokens per hash_ids entry (native CSV/JSONL traces with hash_ids cannot store it)."


def strict_option() -> Any:
    """``--strict``: the first bad row is an error (exit 2) instead of a skipped row."""
    return typer.Option(False, "--strict", help=STRICT_HELP)


def seed_option(help_text: str = "Seed of generated traces.") -> Any:
    """``--seed N``: a non-negative integer that fits JSON and numpy (``bounds.MAX_SEED``)."""
    return typer.Option(0, "--seed", min=0, max=MAX_SEED, help=help_text)


def hash_block_size_option() -> Any:
    """``--hash-block-size N``: tokens per ``hash_ids`` entry of a native CSV/JSONL trace."""
    return typer.Option(None, "--hash-block-size", min=1, max=1 << 20, metavar="TOKENS", help=HASH_BLOCK_HELP)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def drops_line(prov: TraceProvenance) -> str | None:
    """The one-line account of skipped rows, or None when none was skipped."""
    if not prov.num_dropped:
        return None
    shown = [
        f"row {d.row}" + (f", {d.field}" if d.field else "") + f": {_cut(d.reason)}"
        for d in prov.dropped[:LISTED_ON_STDERR]
    ]
    more = prov.num_dropped - len(shown)
    tail = f"; and {more:,} more" if more > 0 else ""
    return (
        f"warning: skipped {prov.num_dropped:,} bad row(s) of {_cut(prov.source)} "
        f"(kept {prov.rows_kept:,} of {prov.rows_read:,}): {'; '.join(shown)}{tail} "
        "(all listed in --json's trace_provenance; --strict stops at the first)"
    )


def say_drops(prov: TraceProvenance | None) -> None:
    """Print the skipped-rows line on stderr (never on --json's stdout)."""
    line = None if prov is None else drops_line(prov)
    if line is not None:
        typer.echo(line, err=True)


def read_trace(
    source: str,
    *,
    seed: int = 0,
    num_requests: int | None = None,
    strict: bool = False,
    hash_block_size: int | None = None,
) -> Trace:
    """``open_trace`` (file, bundled trace or preset) that reports every skipped row on stderr."""
    trace = open_trace(
        source, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
    )
    say_drops(trace.provenance)
    return trace


def provenance_json(prov: TraceProvenance | None) -> dict[str, Any] | None:
    """``trace_provenance`` for a command's JSON result."""
    return None if prov is None else prov.model_dump(mode="json")


__all__ = [
    "drops_line",
    "hash_block_size_option",
    "provenance_json",
    "read_trace",
    "say_drops",
    "seed_option",
    "strict_option",
]
