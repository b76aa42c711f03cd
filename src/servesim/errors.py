"""One exception root for everything servesim refuses, so each interface maps errors once.

``ServesimError`` is the root (as httpx has one). Input errors also subclass ``ValueError`` (callers
that catch bad input generically keep working); an engine that cannot make progress also
subclasses ``RuntimeError``. Interfaces map the root once: the CLI prints ``describe(exc)`` on one
line and exits with status 2; the web server answers with RFC 9457 problem details. Anything else
(a bare ``ValueError``, an ``InternalError``) is a bug in servesim: the CLI prints its traceback
and ``bug_line()`` and exits with status 1; the web server answers 500 "internal error".

``describe`` also renders the few foreign exceptions a user's input can raise at a boundary
(Pydantic validation, an unreadable file, bad YAML/JSON), so an interface's one ``except`` clause
is ``except USER_ERRORS``.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

#: Values shown in error messages are cut to this many characters (a 10 MB field is not echoed).
MAX_SHOWN_VALUE = 80


class ServesimError(Exception):
    """Root of every error servesim raises on purpose: bad input, bad configuration, a stalled engine."""


class InputError(ServesimError, ValueError):
    """Input that servesim cannot use: a trace, a configuration, a record, a flag value."""


class UnknownNameError(InputError, KeyError):
    """A name servesim does not know (a bundled trace, a preset): an ``InputError`` that is also a
    ``KeyError``, as a failed lookup is; its message is the sentence, not a quoted key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigError(InputError):
    """An engine or deployment configuration that vLLM (or servesim) would refuse."""


class EngineStallError(ServesimError, RuntimeError):
    """The engine cannot make progress (a configuration vLLM would also hang on)."""


class InternalError(AssertionError):
    """An invariant that guards a result broke: a bug in servesim, never the user's input (so not
    a ``ServesimError``: the CLI lets it through with its traceback, to be reported). Raised by
    explicit checks, which ``python -O`` keeps (an ``assert`` would be stripped); an
    ``AssertionError`` subclass so that existing callers that expect one still catch it."""


def shown(value: object, limit: int = MAX_SHOWN_VALUE) -> str:
    """``repr(value)`` cut to ``limit`` characters (with the full length said), for messages."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"


def reject_bool(value: object) -> object:
    """For integer fields (a Pydantic ``mode="before"`` validator): JSON ``true`` is not 1."""
    if isinstance(value, bool):
        raise InputError(f"expected an integer, got {value!r}")
    return value


def describe(exc: BaseException | str) -> str:
    """A one-line, user-facing description of an error (no traceback, values truncated)."""
    if isinstance(exc, str):
        return " ".join(exc.split())
    if isinstance(exc, ValidationError):
        parts = []
        for e in exc.errors():
            loc = ".".join(map(str, e["loc"]))
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
        return " ".join("; ".join(parts).split())
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, RecursionError):
        return "input nested too deeply"
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        text = str(exc.args[0]) if exc.args else text
    return " ".join(text.split())


def user_errors() -> tuple[type[Exception], ...]:
    """What an interface catches at its boundary and reports as the user's error (exit 2 / 4xx).

    Only what the user's input or environment causes: servesim's own ``ServesimError`` (every
    ``InputError``/``ConfigError`` servesim raises for bad input), Pydantic's ``ValidationError``,
    unparseable JSON/YAML, undecodable text, input nested too deeply, and ``OSError`` (a path that
    is missing, unreadable or not a file; a full disk; a refused connection: the environment, not
    servesim). A bare ``ValueError``/``TypeError``/``KeyError`` is not here: servesim raises its
    own classes for bad input, so one of those is a bug and is reported as one (``bug_line``).
    YAML's error type is added when PyYAML is importable (a dependency, but imported lazily).
    """
    extra: tuple[type[Exception], ...] = ()
    try:
        import yaml

        extra = (yaml.YAMLError,)
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        pass
    return (
        ServesimError,
        ValidationError,
        json.JSONDecodeError,
        UnicodeDecodeError,
        OSError,
        RecursionError,
        *extra,
    )


def is_user_error(exc: BaseException) -> bool:
    """``exc`` is one of ``user_errors()`` (the user's input or environment, not a bug)."""
    return isinstance(exc, user_errors())


def report_to() -> str:
    """Where a bug is reported: the issue tracker among the package's project URLs, else its name."""
    from importlib import metadata

    try:
        urls: list[str] = list(metadata.metadata("servesim").get_all("Project-URL") or [])
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        urls = []
    pairs = [u.split(",", 1) for u in urls if "," in u]
    for label, url in pairs:
        if any(w in label.lower() for w in ("issue", "bug", "tracker")):
            return str(url).strip()
    return "the servesim project's issue tracker"


def bug_line() -> str:
    """The line printed under the traceback of an error that is not the user's: a servesim bug."""
    return (
        "servesim: this is a bug in servesim, not your input — please report it with the "
        f"command you ran: {report_to()}"
    )


__all__ = [
    "MAX_SHOWN_VALUE",
    "ConfigError",
    "EngineStallError",
    "InputError",
    "InternalError",
    "ServesimError",
    "UnknownNameError",
    "bug_line",
    "describe",
    "is_user_error",
    "reject_bool",
    "report_to",
    "shown",
    "user_errors",
]
