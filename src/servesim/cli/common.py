"""Helpers every command shares: one-line errors with exit code 2, JSON on stdout, atomic files."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from servesim.errors import describe, user_errors
from servesim.io import write_text_atomic


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback)."""
    typer.echo(f"error: {one_line(exc)}", err=True)
    raise typer.Exit(2)


class ErrorMappingGroup(TyperGroup):
    """The root command group: maps every user error (``servesim.errors.user_errors``) raised by
    any command to one line on stderr and exit status 2 — the CLI's one place that does it."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (Typer vendors click)
        try:
            return super().invoke(ctx)
        except user_errors() as exc:
            fail(exc)


def one_line(exc: BaseException | str) -> str:
    """The error as one line (``servesim.errors.describe``: the one place that words errors)."""
    return describe(exc)


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


__all__ = ["ErrorMappingGroup", "fail", "one_line", "print_json", "write_text_atomic"]
