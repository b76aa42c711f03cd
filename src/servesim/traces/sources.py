"""Opening trace files: transparent gzip, the container kind, and precise encoding errors.

Kept apart from the format logic so that every reader gets the same answers to "is it
gzipped?", "is it empty?", "is it CSV, JSONL, JSON or Parquet?" and "where is the bad byte?".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path
from typing import IO, Literal, cast

from servesim.traces.bundled import BUNDLED_TRACES
from servesim.traces.errors import TraceError

Container = Literal["csv", "jsonl", "json", "parquet"]

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_EXTENSIONS: dict[str, Container] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == _GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is gzip (detected by content, not by name)."""
    if is_gzip(path):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return path.open("rb")


def open_text(path: Path) -> IO[str]:
    """UTF-8 text (strict: bad bytes raise ``UnicodeDecodeError``), gzip-aware."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="strict")


def check_readable(path: Path, display: str) -> None:
    """Fail early and clearly for a missing, non-regular or empty (0-byte) file."""
    if not path.exists():
        names = ", ".join(sorted(BUNDLED_TRACES))
        raise TraceError(display, f"no such file (nor a bundled trace name: {names})")
    if not path.is_file():
        raise TraceError(display, "not a regular file")
    if path.stat().st_size == 0:
        raise TraceError(display, "empty file (0 bytes); a trace needs at least a header or '[]'")
    if is_gzip(path):
        try:
            with gzip.open(path, "rb") as f:
                if not f.read(1):
                    raise TraceError(display, "empty file (gzip of 0 bytes)")
        except (OSError, EOFError) as exc:
            raise TraceError(display, f"corrupt gzip file ({exc})") from None


def detect_container(path: Path, display: str) -> Container:
    """CSV, JSONL, JSON or Parquet: from the extension (``.gz`` stripped), else from content."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in _EXTENSIONS:
        return _EXTENSIONS[suffixes[-1]]
    with open_binary(path) as f:
        head = f.read(64 * 1024)
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return "json"
    if text.startswith(b"{"):
        first_line = text.split(b"\n", 1)[0]
        try:
            obj = json.loads(first_line)
        except ValueError:
            return "json"  # a pretty-printed object spans lines
        return "json" if isinstance(obj, dict) and "requests" in obj else "jsonl"
    return "csv"


def utf8_error(path: Path, display: str, container: Container, header: list[str] | None = None) -> TraceError:
    """A ``TraceError`` naming the row and (best guess) field of the first non-UTF-8 byte."""
    line_no, prefix, bad = _first_bad_utf8(path)
    reason = f"not valid UTF-8 (byte 0x{bad:02x}); re-encode the file as UTF-8"
    row: int | None = None
    field: str | None = None
    if container == "csv":
        row = line_no - 1 if line_no > 1 else None  # line 1 is the header
        if header is None and row is not None:
            with open_binary(path) as f:
                header = next(csv.reader([f.readline().decode("utf-8", errors="replace")]), [])
        if header is not None and row is not None:
            idx = _csv_field_index(prefix)
            field = header[idx] if idx < len(header) else None
    elif container == "jsonl":
        row = line_no
        keys = re.findall(r'"([^"\\]*)"\s*:', prefix)
        field = keys[-1] if keys else None
    else:
        keys = re.findall(r'"([^"\\]*)"\s*:', prefix)
        field = keys[-1] if keys else None
        reason += f" (line {line_no} of the file)"
    return TraceError(display, reason, row=row, field=field)


def _first_bad_utf8(path: Path) -> tuple[int, str, int]:
    """(1-based line number, decoded text of that line before the bad byte, the bad byte)."""
    line_no = 0
    with open_binary(path) as f:
        for raw in f:
            line_no += 1
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return line_no, raw[: exc.start].decode("utf-8", errors="replace"), raw[exc.start]
    return line_no, "", 0  # not reached for a file that failed to decode


def _csv_field_index(prefix: str) -> int:
    """Index of the CSV field that the text ``prefix`` ends in (commas inside quotes ignored)."""
    in_quotes = False
    idx = 0
    for ch in prefix:
        if ch == '"':
            in_quotes = not in_quotes
        elif ch == "," and not in_quotes:
            idx += 1
    return idx
