"""Containers: stream a CSV, JSONL, JSON or Parquet file as chunks of rows with row numbers.

Readers know nothing about trace formats beyond which columns to keep as text; the layout
(``layouts.py``) gives meaning to the columns. CSV and Parquet are read in C/Arrow in chunks of
``chunk_rows`` rows, so a million-row file never needs more than one chunk of raw data in
memory. JSONL is parsed line by line (to report the line of a bad record); a JSON document is
loaded whole, so prefer CSV, JSONL or Parquet for very large traces.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from servesim.traces.errors import TraceError
from servesim.traces.layouts import Layout
from servesim.traces.sources import Container, is_gzip, open_text, utf8_error
from servesim.traces.validate import MISSING_TEXTS, Issue

#: Rows per chunk: large enough to amortise per-chunk overhead, small enough for bounded memory.
DEFAULT_CHUNK_ROWS = 200_000

#: Key under which servesim stores its metadata (hash_block_size) in a Parquet schema.
PARQUET_META_KEY = b"servesim"


@dataclass
class RawChunk:
    """Rows as read (file column names), their 1-based row numbers, and unparsable rows."""

    frame: pd.DataFrame
    rows: np.ndarray
    issues: list[Issue] = field(default_factory=list)
    other_keys: list[str] = field(default_factory=list)  # JSON keys the layout does not use


@dataclass
class Opened:
    """An opened file: its columns (for format detection), metadata, and a chunk iterator."""

    columns: list[str]
    meta: dict[str, Any]
    chunks: Callable[[Layout], Iterator[RawChunk]]


def open_container(container: Container, path: Path, display: str, chunk_rows: int) -> Opened:
    openers = {"csv": _open_csv, "jsonl": _open_jsonl, "json": _open_json, "parquet": _open_parquet}
    return openers[container](path, display, chunk_rows)


# --- CSV ------------------------------------------------------------------------------------


def _open_csv(path: Path, display: str, chunk_rows: int) -> Opened:
    try:
        with open_text(path) as f:
            first = next(csv.reader(f), [])
    except UnicodeDecodeError:
        raise utf8_error(path, display, "csv") from None
    header = [h.strip().lstrip("\ufeff").strip() for h in first]
    if not any(header):
        raise TraceError(display, "no header row (the first line is empty)", row=None)
    dups = sorted({h for h in header if header.count(h) > 1})
    if dups:
        raise TraceError(display, f"duplicate column name(s) in the header: {', '.join(map(repr, dups))}")

    def chunks(layout: Layout) -> Iterator[RawChunk]:
        text = [c for c in header if c in layout.text_columns]
        # Text columns: only an empty cell is missing; numeric columns: the usual NA spellings,
        # except NaN's, which stay text for the checks (a NaN priority is a bad row, not 0).
        na_values: Any = {i: ([""] if c in text else sorted(MISSING_TEXTS)) for i, c in enumerate(header)}
        reader = pd.read_csv(
            path,
            header=0,
            names=list(range(len(header))),  # positions; renamed below (robust to a BOM)
            index_col=False,
            dtype={header.index(c): object for c in text},
            keep_default_na=False,
            na_values=na_values,
            chunksize=chunk_rows,
            compression="gzip" if is_gzip(path) else None,
            encoding="utf-8",
        )
        try:
            with reader:
                for frame in reader:
                    frame.columns = header
                    _empty_cells_as_none(frame)
                    rows = frame.index.to_numpy(dtype=np.int64) + 1
                    yield RawChunk(frame.reset_index(drop=True), rows)
        except UnicodeDecodeError:
            raise utf8_error(path, display, "csv", header) from None
        except pd.errors.ParserError as exc:
            raise _csv_parser_error(display, exc) from None

    return Opened(header, {}, chunks)


def _empty_cells_as_none(frame: pd.DataFrame) -> None:
    """pandas gives an empty cell of a text column as a float NaN: make it None, so that the
    checks tell it (the field's default) from a literal NaN (a bad value; NaN text stays text)."""
    for name in frame.columns:
        col = frame[name]
        if col.dtype.kind not in "biufcmM" and bool(col.isna().any()):  # object or str dtype
            frame[name] = col.astype(object).where(col.notna(), None)


def _csv_parser_error(display: str, exc: Exception) -> TraceError:
    """pandas says 'Expected 3 fields in line 7, saw 4': line 7 is data row 6."""
    msg = str(exc).replace("Error tokenizing data. C error: ", "").strip()
    m = re.search(r"line (\d+)", msg)
    row = int(m.group(1)) - 1 if m else None
    return TraceError(display, f"malformed CSV ({msg})", row=row)


# --- JSONL ----------------------------------------------------------------------------------


def _open_jsonl(path: Path, display: str, chunk_rows: int) -> Opened:
    columns: list[str] = []
    try:
        with open_text(path) as f:
            for i, line in enumerate(f):
                if i > 1000:
                    break
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    columns = [str(k) for k in obj]
                    break
    except UnicodeDecodeError:
        raise utf8_error(path, display, "jsonl") from None

    def chunks(layout: Layout) -> Iterator[RawChunk]:
        objs: list[dict[str, Any]] = []
        rows: list[int] = []
        issues: list[Issue] = []
        line_no = 0
        try:
            with open_text(path) as f:
                for line_no, line in enumerate(f, start=1):
                    text = line.strip()
                    if not text:
                        continue
                    try:
                        obj = json.loads(text)
                    except ValueError as exc:
                        issues.append((line_no, None, f"invalid JSON ({_json_msg(exc)})"))
                        continue
                    if not isinstance(obj, dict):
                        issues.append((line_no, None, f"not a JSON object ({type(obj).__name__})"))
                        continue
                    objs.append(obj)
                    rows.append(line_no)
                    if len(objs) >= chunk_rows:
                        yield _records_chunk(objs, rows, issues, layout, columns)
                        objs, rows, issues = [], [], []
        except UnicodeDecodeError:
            raise utf8_error(path, display, "jsonl") from None
        if objs or issues:
            yield _records_chunk(objs, rows, issues, layout, columns)

    return Opened(columns, {}, chunks)


def _json_msg(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.colno}"
    return str(exc)


def _records_chunk(
    objs: list[dict[str, Any]], rows: list[int], issues: list[Issue], layout: Layout, columns: list[str]
) -> RawChunk:
    """Column-wise frame of the layout's keys (missing keys -> None; pandas infers dtypes)."""
    seen: set[str] = set()
    for obj in objs:
        seen.update(obj)
    keys = [k for k in layout.known if k in seen or k in columns or k in layout.required]
    # Object columns on purpose: the per-value checks keep big integers exact.
    data = {k: pd.Series([o.get(k) for o in objs], dtype=object) for k in keys}
    frame = pd.DataFrame(data, index=pd.RangeIndex(len(objs)))
    other = sorted(str(k) for k in seen - set(layout.known))
    return RawChunk(frame, np.asarray(rows, dtype=np.int64), issues, other)


# --- JSON document --------------------------------------------------------------------------


def _open_json(path: Path, display: str, chunk_rows: int) -> Opened:
    try:
        with open_text(path) as f:
            doc = json.load(f)
    except UnicodeDecodeError:
        raise utf8_error(path, display, "json") from None
    except json.JSONDecodeError as exc:
        raise TraceError(
            display, f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    if isinstance(doc, list):
        requests, meta = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("requests"), list):
        requests = doc["requests"]
        meta = {k: v for k, v in doc.items() if k != "requests"}
    else:
        raise TraceError(display, "expected a JSON list of requests or an object with a 'requests' list")
    first = next((r for r in requests if isinstance(r, dict)), {})
    columns = [str(k) for k in first]

    def chunks(layout: Layout) -> Iterator[RawChunk]:
        for start in range(0, len(requests), chunk_rows):
            objs: list[dict[str, Any]] = []
            rows: list[int] = []
            issues: list[Issue] = []
            for i, obj in enumerate(requests[start : start + chunk_rows], start=start + 1):
                if isinstance(obj, dict):
                    objs.append(obj)
                    rows.append(i)
                else:
                    issues.append((i, None, f"not a JSON object ({type(obj).__name__})"))
            yield _records_chunk(objs, rows, issues, layout, columns)

    return Opened(columns, meta, chunks)


# --- Parquet --------------------------------------------------------------------------------


def _keep_as_objects(col: pa.Array) -> bool:
    """Lists, text with nulls and float columns holding a NaN (pandas would make NaN and null
    the same value: a NaN is a bad value, a null the field's default) are read as Python objects."""
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        return True
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return bool(col.null_count > 0)  # pandas would give a null as NaN: None is "no value"
    if pa.types.is_floating(col.type):
        import pyarrow.compute as pc

        return bool(pc.any(pc.is_nan(col)).as_py())
    return False


def _open_parquet(path: Path, display: str, chunk_rows: int) -> Opened:
    if is_gzip(path):
        raise TraceError(display, "gzip-compressed Parquet is not supported (Parquet compresses internally)")
    import pyarrow.parquet as pq  # here: 0.04 s of every command's start, for Parquet traces only

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(display, f"not a readable Parquet file ({exc})") from None
    schema = pf.schema_arrow
    columns = list(schema.names)
    meta: dict[str, Any] = {}
    raw_meta = (schema.metadata or {}).get(PARQUET_META_KEY)
    if raw_meta:
        try:
            loaded = json.loads(raw_meta)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            meta = loaded

    def chunks(layout: Layout) -> Iterator[RawChunk]:
        wanted = [c for c in columns if c in layout.known]
        offset = 0
        try:
            for batch in pf.iter_batches(batch_size=chunk_rows, columns=wanted):
                data = {
                    name: pd.Series(col.to_pylist(), dtype=object)
                    if _keep_as_objects(col)
                    else col.to_pandas(integer_object_nulls=True)  # ints with nulls stay exact
                    for name, col in zip(batch.schema.names, batch.columns, strict=True)
                }
                frame = pd.DataFrame(data, index=pd.RangeIndex(batch.num_rows))
                rows = np.arange(offset + 1, offset + batch.num_rows + 1, dtype=np.int64)
                offset += batch.num_rows
                yield RawChunk(frame, rows)
        except pa.ArrowException as exc:
            raise TraceError(
                display, f"corrupt Parquet data after row {offset} ({exc})", row=offset + 1
            ) from None

    return Opened(columns, meta, chunks)
