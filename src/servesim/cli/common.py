"""Helpers every command shares: one-line errors with exit code 2 (a bug: its traceback, exit 1),
JSON on stdout, atomic files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from servesim.cli.actions import note_failure
from servesim.errors import InputError, bug_line, describe, user_errors
from servesim.io import write_text_atomic

#: A path the README and docs name: the files shipped in the checkout's ``examples/`` folder.
_EXAMPLES_PATH = re.compile(r"(?<![\w/.])(?:\./)?examples/[\w./-]+")


def checkout_hint(message: str) -> str:
    """`` (...)``: where ``examples/...`` lies, when ``message`` names one that is not here (a
    command copied from the README run outside the checkout); else ``""``."""
    missing = [p for p in dict.fromkeys(_EXAMPLES_PATH.findall(message)) if not Path(p.rstrip(".")).exists()]
    if not missing:
        return ""
    return (
        f" ({missing[0].rstrip('.')} is relative to the servesim checkout: examples/ ships there; "
        "run the command from the checkout's root, or give the file's full path)"
    )


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback); a missing
    ``examples/...`` file says that it is relative to the checkout."""
    message = one_line(exc)
    message += checkout_hint(message)
    note_failure(message)
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def report_bug(exc: BaseException) -> NoReturn:
    """An error that is not the user's: its traceback on stderr, then ``bug_line()``; exit 1."""
    import traceback

    note_failure(f"internal error ({type(exc).__name__}): {describe(exc)}")
    typer.echo("".join(traceback.format_exception(exc)).rstrip("\n"), err=True)
    typer.echo(bug_line(), err=True)
    raise typer.Exit(1)


def invoke_mapped(invoke: Callable[[], Any]) -> Any:
    """Run ``invoke()`` with the CLI's one error mapping: a user error (``user_errors()``, or a
    ``MemoryError`` from a size no bound caught) is one line and exit 2 (``fail``); anything else
    but Click's own exits, Ctrl-C (exit 130) and a closed stdout pipe (quiet) is a bug
    (``report_bug``: traceback, the line saying so, exit 1)."""
    try:
        return invoke()
    except (typer.Exit, typer.Abort, typer.TyperException, BrokenPipeError):
        raise  # Typer's main turns these into their exit status (a broken pipe: quietly)
    except MemoryError:
        fail("input too large for this machine's memory")
    except user_errors() as exc:
        fail(exc)
    except Exception as exc:
        report_bug(exc)


class ErrorMappingGroup(TyperGroup):
    """A command group with the CLI's one error mapping (``invoke_mapped``): a user error is one
    line on stderr and exit status 2; a bug is its traceback, a line saying so, exit 1."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (Typer vendors click)
        return invoke_mapped(lambda: super(ErrorMappingGroup, self).invoke(ctx))


def one_line(exc: BaseException | str) -> str:
    """The error as one line (``servesim.errors.describe``: the one place that words errors)."""
    return describe(exc)


def json_bytes(data: Any) -> bytes:
    """``data`` as indented JSON with sorted keys (orjson: several times faster than ``json``;
    NaN/inf become null, which JSON has no other word for)."""
    import orjson

    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(data, option=opts, default=str)


def timed_as(step_time_model: dict[str, Any], num_gpu_blocks: int | None = None) -> str:
    """The ``timed as: ...`` line from a step-time model's description (``describe_model``)."""
    from servesim.services.inputs import timing_words

    return timing_words(step_time_model, num_gpu_blocks)


def cli_slo(text: str | None) -> Any:
    """``--slo`` of every command: ``servesim.spec.parse_slo``, its error worded for the flag
    (the same line whichever command was given it)."""
    from servesim.services.deployment import parse_slo

    try:
        return parse_slo(text)
    except InputError as e:
        raise InputError(str(e).replace("SLO ", "--slo ", 1)) from None


def request_slo(text: str | None) -> Any:
    """``--slo`` of simulate/cluster/dashboard/advise: ``servesim.spec.parse_slo`` (the one parser
    and wording of every command), as the engine's per-request thresholds (each p99 cap is also
    each request's goodput threshold). ``good=FRACTION`` is a requirement across a sweep or a
    study, so a single run refuses it rather than ignore it."""
    from servesim.services.deployment import SLOError

    goal = cli_slo(text)
    if goal is None:
        return None
    try:
        return goal.per_request()
    except SLOError as e:
        raise InputError(e.worded_for("--slo")) from None


def print_timed_as(text: str) -> None:
    """The first line of every human-readable output: what times the engine's steps."""
    typer.echo(f"timed as: {text}")


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json_bytes(data))


def out_option() -> Any:
    """``--out FILE``: every result command's (the document ``--json`` prints, as a file)."""
    return typer.Option(None, "--out", help="Write the JSON result here (the document --json prints).")


def emit(doc: Any, *, as_json: bool, out: Path | None) -> bool:
    """The result document: to ``out`` (atomically) and/or alone on stdout. True when ``--json``
    printed it (the caller prints no human output then); with ``--out`` alone, the human output
    follows and ends with where the file went (``said_written``)."""
    if out is not None:
        write_text_atomic(out, json_bytes(doc).decode() + "\n")
    if as_json:
        print_json(doc)
    return as_json


def said_written(out: Path | None) -> None:
    """The last line of a human output that also wrote ``--out``."""
    if out is not None:
        typer.echo(f"result written to {out}")


__all__ = [
    "ErrorMappingGroup",
    "cli_slo",
    "emit",
    "fail",
    "invoke_mapped",
    "json_bytes",
    "one_line",
    "out_option",
    "print_json",
    "print_timed_as",
    "report_bug",
    "request_slo",
    "said_written",
    "timed_as",
    "write_text_atomic",
]


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """``--token`` or the first line of ``--token-file`` (a server's; never printed)."""
    if token is not None and token_file is not None:
        raise InputError("give --token or --token-file, not both")
    if token_file is None:
        return token or None
    lines = token_file.read_text(encoding="utf-8").splitlines()
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise InputError(f"{token_file}: the token file is empty")
    return secret
