"""Helpers every command shares: one-line errors with exit code 2, JSON on stdout, atomic files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError


def fail(exc: BaseException | str) -> NoReturn:
    """Print a one-line error on stderr and exit with code 2 (no traceback)."""
    typer.echo(f"error: {one_line(exc)}", err=True)
    raise typer.Exit(2)


def one_line(exc: BaseException | str) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        text = str(exc.args[0]) if exc.args else text
    return " ".join(text.split())


def print_json(data: Any) -> None:
    """The machine-readable result alone on stdout (keys sorted: same input, same bytes)."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a file so that readers see the old content or the whole new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
