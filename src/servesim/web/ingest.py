"""Turn an uploaded file or a generator preset into a stored trace (Parquet + a database row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.actionlog import file_digest, record_action
from servesim.errors import InputError, user_errors
from servesim.io import write_text_atomic
from servesim.services.traces import (
    Trace,
    TraceError,
    generate_trace,
    inspect_trace,
    load_trace,
    preset_spec,
    write_trace,
)
from servesim.web.db import TraceRow, now_iso
from servesim.web.problems import Problem
from servesim.web.settings import WebSettings
from servesim.web.storage import Storage, new_id


def _dropped(trace: Trace) -> list[dict[str, Any]]:
    return [d.model_dump(mode="json") for d in trace.provenance.dropped]


def summary_section(trace: Trace, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace's statistics and its summary view (rate over time, lengths, prefix sharing)."""
    from servesim.views.workload import workload_view

    stats = inspect_trace(trace).model_copy(update={"source": name})
    return stats.model_dump(mode="json"), workload_view(trace, stats).model_dump(mode="json")


def store(trace: Trace, name: str, origin: str, digest: str, storage: Storage) -> TraceRow:
    trace_id = new_id()
    write_trace(trace, storage.trace_file(trace_id))
    provenance = trace.provenance.model_copy(update={"source": name})
    write_text_atomic(storage.provenance_file(trace_id), provenance.model_dump_json() + "\n")
    stats, section = summary_section(trace, name)
    return TraceRow(
        id=trace_id,
        name=name,
        created_at=now_iso(),
        origin=origin,
        num_requests=len(trace),
        num_dropped=trace.provenance.num_dropped,
        digest=digest,
        stats=stats,
        dropped=_dropped(trace),
        summary=section,
    )


def too_many_rows(path: Path, limit: int) -> bool:
    """True when the file surely holds more than ``limit`` requests: read before any parsing, in
    bounded memory, and stopped as soon as it is known (Parquet: its footer; a line-based file,
    gzipped or not: its newlines counted in 1 MiB pieces). A JSON array is left to the reader."""
    import gzip

    with path.open("rb") as raw:
        magic = raw.read(4)
    if magic == b"PAR1":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows) > limit
    opener = gzip.open if magic[:2] == b"\x1f\x8b" else open
    lines = 0
    try:
        with opener(path, "rb") as f:
            while piece := f.read(1 << 20):
                lines += piece.count(b"\n")
                if lines > limit + 1:  # + a header line
                    return True
    except (OSError, EOFError):
        return False  # a broken file: the reader says what is wrong with it
    return False


def check_token_bounds(trace: Trace, name: str) -> None:
    """A row over the token bound (16,777,216, servesim.bounds) refuses the upload, naming the
    row: the reader drops such rows as it drops any bad row, but a run of the rest would not be
    the file the user meant. The reader's own check (every format) decides which rows are over."""
    from servesim.bounds import MAX_TOKENS

    bound = f"over the bound of {MAX_TOKENS:,}"
    over = [
        d for d in trace.provenance.dropped if d.field in ("prompt_len", "output_len") and bound in d.reason
    ]
    if over:
        first = over[0]
        raise TraceError(
            name,
            f"{first.reason} tokens ({len(over):,} row(s) are)",
            row=first.row,
            field=first.field,
        )


def ingest_upload(
    path: Path, name: str, fmt: str | None, settings: WebSettings, storage: Storage
) -> TraceRow:
    """Validate an uploaded file: bad rows are listed; a file with no usable row is a 422."""
    params = {"name": name, "format": fmt, "bytes": path.stat().st_size}
    with record_action("ingest", params, interface="web", folder=settings.data_dir) as act:
        digest = file_digest(path)
        act.inputs["trace"] = digest
        if too_many_rows(path, settings.max_requests_per_trace):
            raise Problem(
                413,
                f"{name}: more than {settings.max_requests_per_trace:,} requests; "
                f"this server takes at most {settings.max_requests_per_trace:,} (refused before parsing)",
            )
        try:
            trace = load_trace(path, format=fmt)
        except TraceError as exc:  # say it with the user's file name, never the server's path
            raise TraceError(name, exc.reason, row=exc.row, field=exc.field) from None
        except user_errors() as exc:
            raise InputError(f"{name}: {str(exc).replace(str(path), name)}") from None
        check_token_bounds(trace, name)
        if len(trace) == 0:
            rows = _dropped(trace)
            raise Problem(
                422,
                f"{name}: no usable request: all {trace.provenance.rows_read:,} rows were rejected"
                if rows
                else f"{name}: the file holds no request",
                errors=rows,
            )
        if len(trace) > settings.max_requests_per_trace:
            raise Problem(
                413,
                f"{name}: {len(trace):,} requests; "
                f"this server takes at most {settings.max_requests_per_trace:,}",
            )
        return store(trace, name, "upload", digest, storage)


def generate(
    preset: str, num_requests: int, seed: int, name: str | None, settings: WebSettings, storage: Storage
) -> TraceRow:
    if num_requests > settings.max_requests_per_trace:
        raise Problem(
            422,
            f"num_requests {num_requests:,}: this server takes at most {settings.max_requests_per_trace:,}",
        )
    params = {"preset": preset, "num_requests": num_requests, "seed": seed}
    with record_action("generate", params, interface="web", folder=settings.data_dir):
        spec = preset_spec(preset).model_copy(update={"num_requests": num_requests, "seed": seed})
        trace = generate_trace(spec)
        label = name or f"{preset} ({num_requests:,} requests, seed {seed})"
        return store(trace, label, "generated", f"generator:{preset}:{num_requests}:{seed}", storage)
