"""Files under the data folder, named by the server only (no client string ever becomes a path)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from servesim.errors import InputError, shown

_ID = re.compile(r"^[0-9a-f]{32}$")
#: Upload names are kept for display only; their extension picks the reader.
UPLOAD_SUFFIXES = (
    ".csv",
    ".jsonl",
    ".json",
    ".parquet",
    ".csv.gz",
    ".jsonl.gz",
    ".json.gz",
)
#: An upload name the server reads (any case): the ``name`` query's documented pattern.
UPLOAD_NAME_PATTERN = r"(?i)(" + "|".join(re.escape(s) for s in UPLOAD_SUFFIXES) + r")$"


def new_id() -> str:
    return uuid.uuid4().hex


def check_id(value: str) -> str:
    if not _ID.fullmatch(value):
        raise InputError(f"not an id: {value[:40]!r}")
    return value


def upload_suffix(name: str) -> str | None:
    """The reader-relevant suffix of an upload's name (``.csv``, ``.jsonl.gz`` ...), or None."""
    low = name.lower()
    return next((s for s in sorted(UPLOAD_SUFFIXES, key=len, reverse=True) if low.endswith(s)), None)


def display_name(name: str) -> str:
    """A file name fit to show: the last path part, printable characters only, at most 120."""
    base = re.split(r"[\\/]", name)[-1]
    cleaned = "".join(c for c in base if c.isprintable()).strip()
    return cleaned[:120] or "upload"


class Storage:
    """``traces/<id>.parquet``, ``runs/<id>.parquet`` (per-request records), ``bench/<id>.json``
    (vllm bench serve results), ``uploads/`` (scratch)."""

    def __init__(self, root: Path) -> None:
        self.root = root / "web"
        for sub in ("traces", "runs", "uploads", "bench"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def trace_file(self, trace_id: str) -> Path:
        return self.root / "traces" / f"{check_id(trace_id)}.parquet"

    def provenance_file(self, trace_id: str) -> Path:
        """How a stored trace was read when it came in (its format, notes and skipped rows): a
        run's document says that, as the CLI's does for the same file, not the Parquet copy's."""
        return self.root / "traces" / f"{check_id(trace_id)}.provenance.json"

    def requests_file(self, job_id: str) -> Path:
        return self.root / "runs" / f"{check_id(job_id)}.parquet"

    def bench_file(self, bench_id: str) -> Path:
        return self.root / "bench" / f"{check_id(bench_id)}.json"

    def scratch(self, suffix: str) -> Path:
        if suffix not in UPLOAD_SUFFIXES:
            raise InputError(f"unsupported suffix {shown(suffix)}")
        return self.root / "uploads" / f"{new_id()}{suffix}"
