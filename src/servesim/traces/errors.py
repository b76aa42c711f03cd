"""The one exception type of trace handling, so that callers can say *where* a trace is wrong.

Row numbers count data records from 1, the way a user counts them in the file:

* CSV: the header is **not** counted; row 1 is the first record after the header (file line 2,
  unless a quoted field spans lines or blank lines are skipped).
* JSONL: row N is line N of the file (blank lines are skipped but still counted).
* JSON: row N is the N-th element of the request list.
* Parquet: row N is the N-th row of the table.
"""

from __future__ import annotations

from servesim.errors import InputError


class TraceError(InputError):
    """A trace file (or generator spec) cannot be read as asked.

    ``file``, ``row``, ``field`` say where (each may be ``None`` when the problem is not tied to
    one row or field); ``reason`` says what. ``str(err)`` is a one-line message such as
    ``trace.csv: row 17: field 'prompt_len': negative token count (-5)``.
    """

    def __init__(self, file: str, reason: str, *, row: int | None = None, field: str | None = None) -> None:
        self.file = file
        self.row = row
        self.field = field
        self.reason = reason
        super().__init__(format_location(file, row, field) + reason)

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments need help to survive pickling (pytest-xdist, multiprocessing).
        return (_rebuild, (self.file, self.reason, self.row, self.field))


def _rebuild(file: str, reason: str, row: int | None, field: str | None) -> TraceError:
    return TraceError(file, reason, row=row, field=field)


def format_location(file: str | None, row: int | None, field: str | None) -> str:
    """``'f.csv: row 3: field 'x': '`` with the parts that are known (empty string if none)."""
    parts = []
    if file:
        parts.append(f"{file}: ")
    if row is not None:
        parts.append(f"row {row}: ")
    if field is not None:
        parts.append(f"field '{field}': ")
    return "".join(parts)
