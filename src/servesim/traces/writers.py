"""``write_trace``: a ``Trace`` -> native CSV / JSONL / JSON / Parquet, atomically and losslessly.

Atomic: the file is written to a temporary name in the target folder, flushed to disk, then
renamed over the target, so readers never see a half-written trace. Lossless: reading the file
back with ``load_trace`` gives the same frame (floats are written with ``repr`` precision;
``hash_ids`` as JSON lists / Arrow lists). Two conventions to know:

* An empty ``tenant`` / ``prefix_group`` text means "none" (CSV cannot tell them apart).
* CSV and JSONL cannot carry ``hash_block_size``: pass ``hash_block_size=`` when reading back a
  trace with ``hash_ids``. JSON stores it next to the requests; Parquet in its schema metadata.

``.gz`` after a text extension (``trace.csv.gz``) compresses with gzip.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from servesim.errors import InputError, shown
from servesim.io import staged_path
from servesim.traces.readers import PARQUET_META_KEY
from servesim.traces.schema import COLUMNS, Trace

WriteFormat = Literal["csv", "jsonl", "json", "parquet"]
_BY_EXTENSION: dict[str, WriteFormat] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_TEXT_COLUMNS = ("req_id", "tenant", "prefix_group", "lora")


def write_trace(trace: Trace, path: str | os.PathLike[str], format: str | None = None) -> Path:
    """Write ``trace`` to ``path`` (format from the extension unless given); returns the path."""
    target = Path(path)
    fmt = _resolve_format(target, format)
    compress = target.suffix.lower() == ".gz"
    if compress and fmt == "parquet":
        raise InputError("Parquet compresses internally; do not add .gz")
    writers = {"csv": _write_csv, "jsonl": _write_jsonl, "json": _write_json}
    with staged_path(target) as tmp:  # atomic, the user's umask, all-or-nothing
        if fmt == "parquet":
            _write_parquet(trace, tmp)
        else:
            with _open_out(tmp, compress) as f:
                writers[fmt](trace, f)
    return target


def _resolve_format(path: Path, format: str | None) -> WriteFormat:
    if format is not None:
        name = format.lower().removeprefix("native-")
        if name not in ("csv", "jsonl", "json", "parquet"):
            raise InputError(f"unknown output format {shown(format)}; known: csv, jsonl, json, parquet")
        return name  # type: ignore[return-value]
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in _BY_EXTENSION:
        return _BY_EXTENSION[suffixes[-1]]
    raise InputError(
        f"cannot tell the output format from {shown(path.name)}; use .csv, .jsonl, .json or .parquet"
    )


@contextlib.contextmanager
def _open_out(path: Path, compress: bool) -> Iterator[IO[str]]:
    if compress:
        with gzip.open(path, "wt", encoding="utf-8", newline="") as gz:
            yield gz
    else:
        with path.open("w", encoding="utf-8", newline="") as f:
            yield f


#: Optional columns a writer leaves out when no row has a value, so that a trace without them
#: writes the same file as before they existed (the reader fills the same default).
_OMIT_WHEN_EMPTY = ("spec_accept_rate", "lora")


def _written_columns(trace: Trace) -> list[str]:
    df = trace.df
    return [c for c in COLUMNS if c not in _OMIT_WHEN_EMPTY or bool(df[c].notna().any())]


def _write_csv(trace: Trace, f: IO[str]) -> None:
    df = trace.df[_written_columns(trace)].copy()
    df["hash_ids"] = [None if h is None else json.dumps(list(h)) for h in df["hash_ids"].tolist()]
    # A lone CR inside a text field is only quoted when CR is part of the line terminator.
    has_cr = any(_contains(df[c], "\r") for c in _TEXT_COLUMNS if c in df.columns)
    df.to_csv(f, index=False, lineterminator="\r\n" if has_cr else "\n", quoting=csv.QUOTE_MINIMAL)


def _contains(s: pd.Series, text: str) -> bool:
    present = s[s.notna()]
    return bool(len(present)) and bool(present.astype(str).str.contains(text, regex=False).any())


def _row_dicts(trace: Trace) -> Iterator[dict[str, Any]]:
    """One dict per row; None / NaN values are left out (the reader fills the same defaults)."""
    cols = {c: trace.df[c].tolist() for c in COLUMNS}
    for i in range(len(trace.df)):
        row: dict[str, Any] = {}
        for c in COLUMNS:
            v = cols[c][i]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            row[c] = list(v) if c == "hash_ids" else v
        yield row


def _write_jsonl(trace: Trace, f: IO[str]) -> None:
    if len(trace) == 0:
        f.write("\n")  # a 0-byte file is rejected as truncated; a blank line is an empty trace
    for row in _row_dicts(trace):
        f.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
        f.write("\n")


def _write_json(trace: Trace, f: IO[str]) -> None:
    f.write('{"hash_block_size": ' + json.dumps(trace.hash_block_size) + ', "requests": [')
    for i, row in enumerate(_row_dicts(trace)):
        f.write(",\n  " if i else "\n  ")
        f.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
    f.write("\n]}\n")


_ARROW_SCHEMA = pa.schema(
    [
        ("req_id", pa.string()),
        ("arrival_time_s", pa.float64()),
        ("prompt_len", pa.int64()),
        ("output_len", pa.int64()),
        ("priority", pa.int64()),
        ("tenant", pa.string()),
        ("sla_ttft_ms", pa.float64()),
        ("sla_e2e_ms", pa.float64()),
        ("prefix_group", pa.string()),
        ("prefix_len", pa.int64()),
        ("hash_ids", pa.list_(pa.int64())),
        ("spec_accept_rate", pa.float64()),
        ("lora", pa.string()),
    ]
)


def _write_parquet(trace: Trace, path: Path) -> None:
    df = trace.df
    arrays = []
    keep = set(_written_columns(trace))
    schema = pa.schema([fld for fld in _ARROW_SCHEMA if fld.name in keep])
    for fld in schema:
        values = df[fld.name]
        if pa.types.is_floating(fld.type) and fld.name != "arrival_time_s":
            arr = values.to_numpy(dtype=np.float64)
            arrays.append(pa.array(arr, type=fld.type, mask=np.isnan(arr)))  # NaN -> null
        elif pa.types.is_list(fld.type):
            arrays.append(pa.array([None if h is None else list(h) for h in values.tolist()], type=fld.type))
        else:
            arrays.append(
                pa.array(values.tolist() if values.dtype == object else values.to_numpy(), type=fld.type)
            )
    meta = {
        PARQUET_META_KEY: json.dumps({"hash_block_size": trace.hash_block_size, "format_version": 1}).encode()
    }
    table = pa.Table.from_arrays(arrays, schema=schema.with_metadata(meta))
    import pyarrow.parquet as pq  # here: 0.04 s of every command's start, for Parquet only

    pq.write_table(table, path)
