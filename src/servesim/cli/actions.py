"""Every CLI action goes through the action log once: one wrapper, applied where commands register.

Why: a team trusts a number once it can see what was run, with what inputs, what it wrote and
how it ended. ``log_commands(app)`` wraps each registered command that does something (not
lookups such as ``schema`` or ``perf``) in ``servesim.actionlog.record_action``: parameters
(scrubbed of secrets), digests of the input files named on the command line, the output paths
(``--out``, ``--out-dir``, ``--outbox``, ... and whatever the command reports through
``current_action()``), the duration and the outcome; a one-line error from ``fail`` is recorded
as the error text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import typer

from servesim.actionlog import ActionHandle, AdvisorUsage, record_action
from servesim.io import check_output, check_outputs, output_transaction

#: Command path (as typed) -> the action name in the log. Commands not listed are not logged.
ACTIONS: dict[str, str] = {
    "trace inspect": "ingest",
    "trace convert": "ingest",
    "generate": "generate",
    "generate-failures": "generate",
    "simulate": "simulate",
    "scenario": "simulate",
    "cluster": "cluster",
    "saturate": "saturate",
    "tune": "tune",
    "recover": "recover",
    "reschedule": "reschedule",
    "advise": "advise",
    "calibrate": "calibrate",
    "sim2real": "sim2real",
    "report": "report",
    "demo": "demo",
}
#: Parameters that name files a command writes.
OUTPUT_PARAMS = (
    "out",
    "out_dir",
    "outbox",
    "step_log",
    "matrix",
    "action_log",
    "requests_out",
    "save_profile",
    "dst",
)
#: How an output parameter is spelled on the command line when it is not ``--kebab-name``.
FLAG_NAMES = {"dst": "DST"}
#: Output parameters that name a folder (the files go inside it), by name or (command, name).
FOLDER_PARAMS = {"out_dir", "outbox", ("report", "out"), ("demo", "out")}
#: Commands whose writes are not held back to the end: ``demo`` reads its own outputs back.
UNSTAGED = {"demo"}

_current: ContextVar[ActionHandle | None] = ContextVar("servesim_action", default=None)
_failure: ContextVar[str | None] = ContextVar("servesim_failure", default=None)


class CommandFailed(Exception):
    """A command ended with ``fail(...)``: its one-line message, for the log."""


def current_action() -> ActionHandle | None:
    """The running command's log handle (to add outputs or advisor usage), if it is logged."""
    return _current.get()


def note_failure(message: str) -> None:
    """Called by ``common.fail``: the message the log records as the command's error."""
    _failure.set(message)


def note_output(path: str | Path, handle: ActionHandle | None = None) -> None:
    """Record a path the running command wrote (once)."""
    handle = handle or current_action()
    if handle is not None and str(path) not in handle.outputs:
        handle.output(path)


def note_advisor(
    advisor: str, model: str | None, input_tokens: int | None, output_tokens: int | None
) -> None:
    handle = current_action()
    if handle is not None:
        handle.advisor = AdvisorUsage(
            advisor=advisor, model=model, input_tokens=input_tokens, output_tokens=output_tokens
        )


def _is_file(path: str | Path) -> bool:
    """``Path.is_file`` that says no for a name the system refuses (too long, a NUL)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _input_files(params: dict[str, Any]) -> Iterator[tuple[str, Path]]:
    for name, value in params.items():
        if name in OUTPUT_PARAMS:
            continue
        values = value if isinstance(value, list | tuple) else [value]
        for i, v in enumerate(values):
            if isinstance(v, str | Path) and str(v) and _is_file(v):
                yield (name if len(values) == 1 else f"{name}[{i}] {Path(v).name}"), Path(v)


@contextmanager
def logged_action(action: str, params: dict[str, Any]) -> Iterator[ActionHandle]:
    """``record_action`` for one CLI command: inputs digested, outputs collected, ``fail`` worded."""
    token = _failure.set(None)
    try:
        with record_action(action, params, interface="cli") as handle:
            for name, path in _input_files(params):
                handle.input_file(name, path)
            previous = _current.set(handle)
            try:
                yield handle
            except typer.Exit as exc:
                if exc.exit_code not in (0, None):
                    raise CommandFailed(_failure.get() or f"exit status {exc.exit_code}") from exc
                raise
            finally:
                _current.reset(previous)
                for name in OUTPUT_PARAMS:
                    value = params.get(name)
                    if isinstance(value, str | Path) and _is_file(value):
                        note_output(value, handle)
    finally:
        _failure.reset(token)


def check_command_outputs(command: str, params: dict[str, Any]) -> None:
    """The one rule for outputs, before any work: every path the command will write (``--out``,
    ``--step-log``, ``--matrix``, ``--outbox``, ...) can be written, and no two name one file."""
    files: dict[str, Any] = {}
    for name in OUTPUT_PARAMS:
        value = params.get(name)
        if not isinstance(value, str | Path):
            continue
        flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        if name in FOLDER_PARAMS or (command, name) in FOLDER_PARAMS:
            check_output(value, flag, folder=True)
        else:
            files[flag] = value
    check_outputs(files)


def _wrap(action: str, callback: Callable[..., Any], command: str) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        name = "apply-to-outbox" if action == "advise" and kwargs.get("apply") else action
        staged = nullcontext() if command in UNSTAGED else output_transaction()
        try:
            with logged_action(name, dict(kwargs)):
                check_command_outputs(command, kwargs)
                with staged:  # the command's files appear together at its end, or none does
                    return callback(*args, **kwargs)
        except CommandFailed as exc:
            cause = exc.__cause__
            raise cause if isinstance(cause, typer.Exit) else typer.Exit(2) from None

    return run


def log_commands(app: typer.Typer, prefix: str = "") -> None:
    """Wrap every command of ``app`` (and its sub-apps) that ``ACTIONS`` names, once."""
    for info in app.registered_commands:
        if info.callback is None:
            continue
        path = f"{prefix}{info.name or info.callback.__name__}"
        action = ACTIONS.get(path)
        if action is not None and not getattr(info.callback, "_servesim_logged", False):
            info.callback = _wrap(action, info.callback, path)
            info.callback._servesim_logged = True  # type: ignore[attr-defined]
    for group in app.registered_groups:
        if group.typer_instance is not None and group.name:
            log_commands(group.typer_instance, f"{prefix}{group.name} ")


__all__ = [
    "ACTIONS",
    "CommandFailed",
    "check_command_outputs",
    "current_action",
    "log_commands",
    "logged_action",
    "note_advisor",
    "note_failure",
    "note_output",
]
