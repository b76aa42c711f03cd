"""``--requests-out FILE``: per-request records streamed to a JSON-lines or Parquet file.

The format comes from the file's suffix (``.jsonl``/``.ndjson``, ``.parquet``/``.pq``) or from
``--requests-format``; it is checked before the run starts, and the file is written atomically
(``servesim.engine.records.write_records``: nothing half-written on an error).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from servesim.errors import InputError, shown

REQUESTS_OUT_HELP = (
    "Stream the per-request records to this file: JSON lines (.jsonl) or Parquet (.parquet); "
    "they then leave --json's document unless --requests is given."
)
REQUESTS_FORMAT_HELP = "Format of --requests-out when its suffix does not say: jsonl or parquet."


def requests_out_option() -> Any:
    return typer.Option(None, "--requests-out", metavar="FILE", help=REQUESTS_OUT_HELP)


def requests_format_option() -> Any:
    return typer.Option(None, "--requests-format", metavar="jsonl|parquet", help=REQUESTS_FORMAT_HELP)


def records_format(path: Path | None, given: str | None) -> str | None:
    """The format to write ``--requests-out`` in (None without the flag); a clear error otherwise."""
    from servesim.services.run import RECORD_FORMATS, format_for

    if given is not None:
        fmt = given.strip().lower()
        if fmt not in RECORD_FORMATS:
            raise InputError(f"--requests-format {shown(given)}: use jsonl or parquet")
        if path is None:
            raise InputError("--requests-format needs --requests-out FILE")
        return fmt
    if path is None:
        return None
    implied = format_for(path)
    if implied is None:
        raise InputError(
            f"--requests-out {shown(str(path))}: the suffix names no format; end the name in .jsonl "
            "or .parquet, or add --requests-format jsonl|parquet"
        )
    return implied


__all__ = ["records_format", "requests_format_option", "requests_out_option"]
