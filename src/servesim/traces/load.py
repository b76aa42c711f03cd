"""``load_trace``: any supported file -> a validated, arrival-sorted ``Trace``.

The pipeline: resolve the path (or bundled name) -> pick the container (CSV/JSONL/JSON/Parquet)
and the layout (native, Azure, BurstGPT, Mooncake, Vidur, seed JSON) -> stream chunks ->
layout conversion -> vectorized validation -> drop duplicate ids -> format-specific arrival
fix-ups -> stable sort. Bad rows are dropped and listed in ``provenance.dropped`` (or raise
with ``strict=True``); nothing is dropped silently.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servesim.errors import shown
from servesim.traces.arrival_names import parse_arrival_name
from servesim.traces.arrivals import sample_arrivals, stream_rng
from servesim.traces.bundled import resolve_trace_path
from servesim.traces.errors import TraceError
from servesim.traces.frame import canonical_frame
from servesim.traces.layouts import (
    LAYOUTS,
    NATIVE,
    SEED,
    VIDUR_LENGTHS,
    Layout,
    check_columns,
    detect_layout,
    is_length_only,
    length_only_error,
)
from servesim.traces.readers import DEFAULT_CHUNK_ROWS, Opened, open_container
from servesim.traces.schema import DroppedRow, Trace, TraceFormat, TraceProvenance
from servesim.traces.sources import Container, check_readable, detect_container
from servesim.traces.validate import Issue, validate_chunk

#: How many dropped rows are listed in ``provenance.dropped`` (``num_dropped`` counts all).
MAX_LISTED_DROPS = 1000

_CONTAINERS: tuple[Container, ...] = ("csv", "jsonl", "json", "parquet")

#: Values accepted by ``format=``: a container, a layout, or ``native-<container>``.
FORMAT_NAMES: tuple[str, ...] = (
    *_CONTAINERS,
    *(f"native-{c}" for c in _CONTAINERS),
    "native",
    "azure",
    "burstgpt",
    "mooncake",
    "vidur",
    "seed-json",
)


def load_trace(
    source: str | os.PathLike[str],
    *,
    format: str | None = None,
    strict: bool = False,
    hash_block_size: int | None = None,
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Trace:
    """Read a trace file (or a bundled trace by name: ``azure-conv``, ``azure-code``).

    ``format``: one of ``FORMAT_NAMES``; auto-detected from the extension and the columns when
    omitted. ``strict``: raise ``TraceError`` at the first bad row instead of dropping bad rows.
    ``hash_block_size``: tokens per ``hash_ids`` entry; needed for native CSV/JSONL files that
    have hash_ids (JSON and Parquet written by servesim store it; Mooncake defaults to 512);
    when given it overrides the file's own value.
    ``seed``: seeds the arrival times drawn for seed JSON files. ``chunk_rows``: rows per chunk.
    """
    path, display = resolve_trace_path(source), str(source)
    container, layout = _plan(path, display, format)
    try:
        opened = open_container(container, path, display, chunk_rows)
        layout = _choose_layout(opened, layout, container, display)
        if layout is VIDUR_LENGTHS:
            raise length_only_error(display)
        return _read(
            path,
            display,
            container,
            layout,
            opened,
            strict=strict,
            hash_block_size=hash_block_size,
            seed=seed,
        )
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a cut-off .gz: one line naming the file
        raise TraceError(display, f"the compressed file is damaged or cut short ({exc})") from None


def load_length_source(source: str | os.PathLike[str]) -> Trace:
    """Like ``load_trace``, but also accepts Vidur's length-only files (arrivals all 0)."""
    path, display = resolve_trace_path(source), str(source)
    container, _ = _plan(path, display, None)
    opened = open_container(container, path, display, DEFAULT_CHUNK_ROWS)
    if is_length_only(opened.columns):
        layout = VIDUR_LENGTHS
    else:
        layout = _choose_layout(opened, None, container, display)
    return _read(path, display, container, layout, opened, strict=False, hash_block_size=None, seed=0)


def _plan(path: Path, display: str, format: str | None) -> tuple[Container, Layout | None]:
    """Container and (if forced) layout from ``format`` and the file."""
    check_readable(path, display)
    if format is None:
        return detect_container(path, display), None
    name = format.strip().lower()
    if name not in FORMAT_NAMES:
        raise TraceError(display, f"unknown format {shown(format)}; known: {', '.join(FORMAT_NAMES)}")
    if name in _CONTAINERS:
        return name, None
    if name.startswith("native-"):
        return name.removeprefix("native-"), NATIVE  # type: ignore[return-value]
    if name == "seed-json":
        return "json", SEED
    return detect_container(path, display), LAYOUTS[name]


def _choose_layout(opened: Opened, forced: Layout | None, container: Container, display: str) -> Layout:
    if forced is not None:
        layout = forced
    elif container == "json" and "arrival_distribution" in opened.meta:
        layout = SEED
    elif not opened.columns and container in ("json", "jsonl"):
        layout = NATIVE  # no record at all: an empty trace, nothing to detect
    else:
        layout = detect_layout(opened.columns, display)
    if opened.columns or container in ("csv", "parquet"):
        check_columns(layout, opened.columns, display)
    return layout


@dataclass
class _Drops:
    """Dropped rows: all counted, the first ``MAX_LISTED_DROPS`` (by row) kept for the report."""

    count: int = 0
    listed: list[Issue] = field(default_factory=list)

    def add(self, issues: list[Issue]) -> None:
        self.count += len(issues)
        self.listed = sorted(self.listed + issues[:MAX_LISTED_DROPS], key=lambda x: x[0])[:MAX_LISTED_DROPS]


@dataclass
class _Collected:
    """All chunks of a file, validated: the kept rows and what was dropped."""

    df: pd.DataFrame
    rows: np.ndarray  # file row number of each kept row
    drops: _Drops
    rows_read: int
    other_keys: set[str]  # file columns the layout does not use
    state: dict[str, Any]  # what the layout's convert() remembered (e.g. Azure's time 0)


def _read(
    path: Path,
    display: str,
    container: Container,
    layout: Layout,
    opened: Opened,
    *,
    strict: bool,
    hash_block_size: int | None,
    seed: int,
) -> Trace:
    if hash_block_size is not None and hash_block_size < 1:
        raise TraceError(display, f"hash_block_size must be >= 1 (got {hash_block_size})")
    block = hash_block_size or _meta_block_size(opened.meta, display) or layout.default_hash_block_size
    got = _collect(opened, layout, block, strict, display)
    df = got.df
    dups = _duplicates(df["req_id"], got.rows, layout)
    if dups:
        if strict:
            raise TraceError(display, dups[0][2], row=dups[0][0], field=dups[0][1])
        df = df[~np.isin(got.rows, [d[0] for d in dups])].reset_index(drop=True)
        got.drops.add(dups)

    notes = list(layout.notes)
    generator = _fix_arrivals(df, layout, opened.meta, got.state, seed, display, notes)
    order = np.argsort(df["arrival_time_s"].to_numpy(), kind="stable")
    reordered = bool(np.any(order != np.arange(len(order))))
    if reordered:
        df = df.iloc[order].reset_index(drop=True)
        notes.append("rows were not in arrival order; sorted by arrival time (stable)")
    if layout is NATIVE and "req_id" not in opened.columns and len(df):
        notes.append("the file has no req_id column; req_id = row number")
    if got.other_keys:
        notes.append(f"ignored columns: {', '.join(sorted(got.other_keys))}")
    if got.drops.count:
        notes.append(f"dropped {got.drops.count} bad row(s); see 'dropped'")

    prov = TraceProvenance(
        source=display,
        format=_format_name(layout, container),
        rows_read=got.rows_read,
        rows_kept=len(df),
        num_dropped=got.drops.count,
        dropped=[DroppedRow(row=r, field=f, reason=why) for r, f, why in got.drops.listed],
        reordered=reordered,
        hash_block_size=block if df["hash_ids"].notna().any() else None,
        generator=generator,
        notes=notes,
    )
    return Trace(df, prov)


def _collect(opened: Opened, layout: Layout, block: int | None, strict: bool, display: str) -> _Collected:
    """Stream the chunks through the layout's conversion and the vectorized checks."""
    state: dict[str, Any] = {}
    drops = _Drops()
    frames: list[pd.DataFrame] = []
    row_parts: list[np.ndarray] = []
    other_keys: set[str] = {c for c in opened.columns if c not in layout.known}
    rows_read = 0
    for raw in opened.chunks(layout):
        other_keys.update(raw.other_keys)
        conv = layout.convert(raw.frame, raw.rows, state)
        frame, rows, issues = validate_chunk(
            conv.columns,
            raw.rows,
            names=layout.names,
            pre_issues=conv.pre_issues,
            hash_block_size=block,
            relative_arrivals=layout.shift_to_first,
        )
        issues = sorted(raw.issues + issues, key=lambda x: x[0])
        rows_read += len(raw.rows) + len(raw.issues)
        if block is None:
            _require_block_size(frame, rows, display)
        if strict and issues:
            raise _first_strict_error(display, issues[0], frames, row_parts, frame, rows, layout)
        drops.add(issues)
        frames.append(frame)
        row_parts.append(rows)
    df = pd.concat(frames, ignore_index=True) if frames else _empty()
    rows_all = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64)
    return _Collected(df, rows_all, drops, rows_read, other_keys, state)


def _empty() -> pd.DataFrame:
    return canonical_frame({"req_id": [], "arrival_time_s": [], "prompt_len": [], "output_len": []}, 0)


def _format_name(layout: Layout, container: Container) -> TraceFormat:
    if layout is NATIVE:
        return f"native-{container}"  # type: ignore[return-value]
    if layout is SEED:
        return "seed-json"
    if layout is VIDUR_LENGTHS:
        return "vidur"
    return layout.name  # type: ignore[return-value]


def _meta_block_size(meta: dict[str, Any], display: str) -> int | None:
    value = meta.get("hash_block_size")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TraceError(
            display,
            f"hash_block_size must be a positive integer (got {shown(value)})",
            field="hash_block_size",
        )
    return value


def _require_block_size(frame: pd.DataFrame, rows: np.ndarray, display: str) -> None:
    has = frame["hash_ids"].notna().to_numpy()
    if has.any():
        raise TraceError(
            display,
            "hash_ids are given but the hash block size is unknown; pass hash_block_size=N "
            "(--hash-block-size N): CSV and JSONL files cannot store it",
            row=int(rows[np.argmax(has)]),
            field="hash_ids",
        )


def _duplicates(ids: pd.Series, rows: np.ndarray, layout: Layout) -> list[Issue]:
    """Issues for every repeated req_id after its first occurrence.

    ``ids`` are in file order (chunks are read in order), so "first" is the first in the file.
    """
    dup = ids.duplicated(keep="first").to_numpy()
    if not dup.any():
        return []
    firsts = ~dup & ids.isin(set(ids[dup])).to_numpy()
    first_row = dict(zip(ids[firsts].tolist(), rows[firsts].tolist(), strict=True))
    field = layout.names.get("req_id", "req_id")
    return [
        (int(row), field, f"duplicate req_id {shown(rid)} (first at row {first_row[rid]})")
        for rid, row in zip(ids[dup].tolist(), rows[dup].tolist(), strict=True)
    ]


def _first_strict_error(
    display: str,
    issue: Issue,
    frames: list[pd.DataFrame],
    row_parts: list[np.ndarray],
    frame: pd.DataFrame,
    rows: np.ndarray,
    layout: Layout,
) -> TraceError:
    """The first bad row in file order: ``issue``, unless a duplicate id comes before it."""
    before = rows < issue[0]
    ids = pd.concat([*(f["req_id"] for f in frames), frame["req_id"][before]], ignore_index=True)
    dups = _duplicates(ids, np.concatenate([*row_parts, rows[before]]), layout)
    first = min([issue, *dups], key=lambda x: x[0])
    return TraceError(display, first[2], row=first[0], field=first[1])


def _fix_arrivals(
    df: pd.DataFrame,
    layout: Layout,
    meta: dict[str, Any],
    state: dict[str, Any],
    seed: int,
    display: str,
    notes: list[str],
) -> dict[str, Any] | None:
    """Format-specific arrival times (units, relative time, seed draws); returns generator info."""
    arrival = df["arrival_time_s"]
    if layout.arrival_divisor != 1.0:
        df["arrival_time_s"] = arrival / layout.arrival_divisor
    if layout.shift_to_first and len(df):
        first = float(arrival.min())
        if first != 0.0:
            df["arrival_time_s"] = arrival - first
        earliest = pd.Timestamp(state["ref_ns"] + round(first * 1e9), unit="ns")
        notes.append(f"time 0 = {earliest} (the earliest request)")
    if layout is not SEED:
        return None
    name = meta.get("arrival_distribution")
    if not isinstance(name, str):
        raise TraceError(
            display,
            f"'arrival_distribution' must be a name (got {shown(name)})",
            field="arrival_distribution",
        )
    try:
        model = parse_arrival_name(name)
    except ValueError as exc:
        raise TraceError(display, str(exc), field="arrival_distribution") from None
    if seed < 0:
        raise TraceError(display, f"seed must be >= 0 (got {seed})")
    df["arrival_time_s"] = sample_arrivals(model, len(df), stream_rng(seed, "arrivals"))
    notes.append(f"arrival times drawn from {name!r} with seed {seed}")
    for key, value in meta.items():
        if key != "arrival_distribution":
            text = json.dumps(value, sort_keys=True, default=str)
            notes.append(f"ignored key {key!r} = {text if len(text) <= 200 else text[:197] + '...'}")
    return {"arrival_distribution": name, "arrival_model": model.model_dump(), "seed": seed}
