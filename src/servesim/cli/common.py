"""Helpers every command shares: one-line errors with exit code 2, JSON on stdout, atomic files."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer

from servesim.cli.actions import note_failure
from servesim.errors import describe
from servesim.io import write_text_atomic


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback)."""
    message = one_line(exc)
    note_failure(message)
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def one_line(exc: BaseException | str) -> str:
    """The error as one line (``servesim.errors.describe``: the one place that words errors)."""
    return describe(exc)


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


__all__ = ["fail", "one_line", "print_json", "write_text_atomic"]
