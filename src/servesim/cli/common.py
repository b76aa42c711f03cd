"""Helpers every command shares: one-line errors with exit code 2, JSON on stdout, atomic files."""

from __future__ import annotations

from typing import Any, NoReturn

import typer

from servesim.errors import describe
from servesim.io import write_text_atomic


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback)."""
    typer.echo(f"error: {one_line(exc)}", err=True)
    raise typer.Exit(2)


def one_line(exc: BaseException | str) -> str:
    """The error as one line (``servesim.errors.describe``: the one place that words errors)."""
    return describe(exc)


def json_bytes(data: Any) -> bytes:
    """``data`` as indented JSON with sorted keys (orjson: several times faster than ``json``;
    NaN/inf become null, which JSON has no other word for)."""
    import orjson

    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(data, option=opts, default=str)


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json_bytes(data))


__all__ = ["fail", "json_bytes", "one_line", "print_json", "write_text_atomic"]
