"""Per-request records streamed from the result's columns to their output, a chunk at a time.

A run of a million requests keeps its records once, as the columns of
``SimulationResult.requests``; the writers here turn ``CHUNK_ROWS`` rows at a time into JSON
lines, Parquet record batches or the ``requests`` array of the JSON report, so the records never
exist a second time as a million Python dicts. Every writer gives the same rows: the fields of
``RequestResult`` (NaN is null), which are ``servesim simulate --json``'s per-request records.
pyarrow and orjson are imported only by the writers that use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, get_args

from servesim.engine.results import RequestResult
from servesim.io import atomic_file

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: Rows turned into Python objects at a time (about 30 MB of dicts).
CHUNK_ROWS = 20_000

#: The per-request record's fields, in the order of ``RequestResult``.
REQUEST_FIELDS: tuple[str, ...] = tuple(RequestResult.model_fields)

RecordFormat = Literal["jsonl", "parquet"]
RECORD_FORMATS: tuple[RecordFormat, ...] = ("jsonl", "parquet")
_SUFFIXES: dict[str, RecordFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def format_for(path: str | Path) -> RecordFormat | None:
    """The record format a file name implies (``.jsonl``/``.ndjson``, ``.parquet``/``.pq``), or None."""
    return _SUFFIXES.get(Path(path).suffix.lower())


def _columns(requests: pd.DataFrame, extra: bool) -> list[str]:
    names = list(REQUEST_FIELDS)
    if extra:  # a cluster's frame also says which replica closed each request
        names += [c for c in requests.columns if c not in REQUEST_FIELDS]
    return names


def rows_of(part: pd.DataFrame, names: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of ``part`` as JSON-ready dicts (NaN and missing labels -> None), column by column
    (``tolist``), not row by row through pandas."""
    columns: list[list[Any]] = []
    for name in names:
        col = part[name]
        values = col.tolist()
        if col.dtype.kind == "f" and bool(col.isna().any()):
            values = [None if v != v else v for v in values]
        elif col.dtype == object:
            values = [None if (v is None or v != v) else v for v in values]
        columns.append(values)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def row_chunks(requests: pd.DataFrame, *, extra: bool = False) -> Iterator[list[dict[str, Any]]]:
    """The per-request records, ``CHUNK_ROWS`` at a time (``extra``: also columns beyond
    ``RequestResult``'s, such as a cluster's ``replica``)."""
    names = _columns(requests, extra)
    step = CHUNK_ROWS
    for lo in range(0, len(requests), step):
        yield rows_of(requests.iloc[lo : lo + step], names)


def write_jsonl(fh: IO[bytes], requests: pd.DataFrame, *, extra: bool = False) -> None:
    """One JSON object per line per request (the fields in ``RequestResult``'s order)."""
    import orjson

    dumps = orjson.dumps
    for rows in row_chunks(requests, extra=extra):
        fh.write(b"\n".join(dumps(r) for r in rows) + b"\n")


def arrow_schema(requests: pd.DataFrame, *, extra: bool = False) -> pa.Schema:
    """The Parquet schema of the records: ``RequestResult``'s types, nullable where it says so."""
    import pyarrow as pa

    types = {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_()}
    fields = []
    for name in _columns(requests, extra):
        info = RequestResult.model_fields.get(name)
        if info is None:  # a column beyond the record's (a cluster's replica name)
            dtype = requests[name].dtype
            fields.append(pa.field(name, pa.string() if dtype.kind == "O" else pa.from_numpy_dtype(dtype)))
            continue
        args = get_args(info.annotation) or (info.annotation,)
        base = next(a for a in args if a is not type(None))
        fields.append(pa.field(name, types[base], nullable=type(None) in args))
    return pa.schema(fields)


def write_parquet(fh: IO[bytes], requests: pd.DataFrame, *, extra: bool = False) -> None:
    """The records as Parquet, one row group of ``CHUNK_ROWS`` rows at a time (NaN is null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(requests, extra=extra)
    names = schema.names
    step = CHUNK_ROWS
    with pq.ParquetWriter(fh, schema) as writer:
        for lo in range(0, len(requests), step):
            part = requests.iloc[lo : lo + step][names]
            writer.write_batch(pa.RecordBatch.from_pandas(part, schema=schema, preserve_index=False))
        if not len(requests):
            writer.write_table(schema.empty_table())


def write_records(
    path: str | Path, requests: pd.DataFrame, fmt: RecordFormat, *, extra: bool = False
) -> Path:
    """Stream the records to ``path`` atomically: the whole file appears, or none on an error."""
    writer = write_parquet if fmt == "parquet" else write_jsonl
    with atomic_file(path) as fh:
        writer(fh, requests, extra=extra)
    return Path(path)


def document_chunks(
    doc: dict[str, Any], requests: pd.DataFrame, dumps: Callable[[Any], bytes]
) -> Iterator[bytes]:
    """``dumps(doc)`` with ``doc["requests"]`` set to the records, as pieces of bytes: the same
    bytes as dumping the whole document at once, with only one chunk of rows built at a time.

    ``dumps`` must indent by two spaces (``orjson.OPT_INDENT_2``, as the CLI's ``json_bytes``);
    the array is spliced in where a unique placeholder string stood."""
    marker = f"servesim-requests-{uuid.uuid4().hex}"
    body = dumps({**doc, "requests": marker})
    head, sep, tail = body.partition(b'"' + marker.encode() + b'"')
    if not sep:  # pragma: no cover - the placeholder is always dumped as itself
        raise RuntimeError("the requests placeholder was not found in the dumped document")
    indent = _indent_before(head)
    yield head
    if not len(requests):
        yield b"[]"
    else:
        first = True
        for rows in row_chunks(requests):
            text = dumps(rows)  # b"[\n  {\n    ...\n  }\n]"
            inner = text[2:-2].replace(b"\n", b"\n" + indent)
            yield (b"[\n" if first else b",\n") + indent + inner
            first = False
        yield b"\n" + indent + b"]"
    yield tail


def _indent_before(head: bytes) -> bytes:
    """The indentation of the line the placeholder value sits on (its key's indentation)."""
    line = head[head.rfind(b"\n") + 1 :]
    return line[: len(line) - len(line.lstrip(b" "))]


__all__ = [
    "CHUNK_ROWS",
    "RECORD_FORMATS",
    "REQUEST_FIELDS",
    "RecordFormat",
    "arrow_schema",
    "document_chunks",
    "format_for",
    "row_chunks",
    "rows_of",
    "write_jsonl",
    "write_parquet",
    "write_records",
]
