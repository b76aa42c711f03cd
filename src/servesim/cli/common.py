"""Helpers every command shares: one-line errors with exit code 2, JSON on stdout, atomic files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from servesim.cli.actions import note_failure
from servesim.errors import describe, shown, user_errors
from servesim.io import write_text_atomic


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback)."""
    message = one_line(exc)
    note_failure(message)
    typer.echo(f"error: {message}", err=True)
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


def json_bytes(data: Any) -> bytes:
    """``data`` as indented JSON with sorted keys (orjson: several times faster than ``json``;
    NaN/inf become null, which JSON has no other word for)."""
    import orjson

    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(data, option=opts, default=str)


def timed_as(step_time_model: dict[str, Any], num_gpu_blocks: int | None = None) -> str:
    """The ``timed as: ...`` line from a step-time model's description (``describe_model``)."""
    kind = step_time_model.get("kind")
    if kind == "constant":
        text = f"every engine step {1000 * float(step_time_model['step_time_s']):g} ms (constant, as asked)"
    elif kind == "linear":
        text = "servesim's linear step model (an uncalibrated stand-in, as asked)"
    elif kind == "roofline":
        text = (
            f"{step_time_model.get('model')} on {step_time_model.get('tp', 1)} x "
            f"{step_time_model.get('gpu')}, roofline step times"
        )
    else:
        text = f"a {kind or 'custom'} step-time model"
    return text if num_gpu_blocks is None else f"{text}; {num_gpu_blocks:,} KV blocks"


def parse_slo(text: str | None) -> Any:
    """``--slo`` of simulate/cluster/advise in the syntax every command shares: the percentile
    explicit (``ttft_p99_ms=500,tpot_p99_ms=50``, as saturate/tune). Each cap is also the
    per-request threshold that goodput counts; a bare ``ttft_ms`` is refused with the spelling."""
    if not text:
        return None
    from servesim.engine import SLO

    for part in filter(None, (p.strip() for p in text.split(","))):
        key = part.partition("=")[0].strip().lower()
        metric = key.removesuffix("_ms").partition("_")[0]
        if key in ("ttft_ms", "tpot_ms", "e2e_ms", "ttft", "tpot", "e2e"):
            raise ValueError(
                f"--slo {shown(key)} names no percentile: write {metric}_p99_ms (the cap on the run's p99, "
                "also each request's goodput threshold), as in saturate and tune"
            )
    return SLO.parse(text)


def print_timed_as(text: str) -> None:
    """The first line of every human-readable output: what times the engine's steps."""
    typer.echo(f"timed as: {text}")


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json_bytes(data))


__all__ = [
    "ErrorMappingGroup",
    "fail",
    "json_bytes",
    "one_line",
    "parse_slo",
    "print_json",
    "print_timed_as",
    "timed_as",
    "write_text_atomic",
]


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """``--token`` or the first line of ``--token-file`` (a server's; never printed)."""
    if token is not None and token_file is not None:
        raise ValueError("give --token or --token-file, not both")
    if token_file is None:
        return token or None
    lines = token_file.read_text(encoding="utf-8").splitlines()
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ValueError(f"{token_file}: the token file is empty")
    return secret
