"""The action log: one JSON line per action a user took (CLI or web), in the data folder.

Why: before a team trusts a number it wants to know what was run, with what, by whom and how long
it took. Each line records the time, the action, its parameters, the digests of its inputs, the
paths it wrote, the advisor's model and token usage (when one answered), the duration and the
outcome or error. Lines are appended with one ``write`` on a file opened in append mode under an
exclusive lock, so concurrent writers (two commands, the web server's jobs) interleave whole
lines and a crash never leaves half a line behind the last complete one. Secrets never reach
it: parameters are scrubbed of anything that looks like a key, token or password.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from servesim.paths import data_dir

LOG_NAME = "actions.jsonl"
Outcome = Literal["ok", "error"]
#: A parameter whose name ends in one of these words (``api_key``, ``auth_token``, ``password``) is
#: never written; ``max_num_batched_tokens`` or ``long_prefill_token_threshold`` are not secrets.
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "authorization", "credential", "credentials")
REDACTED = "<redacted>"


class AdvisorUsage(BaseModel):
    """Which advisor answered and what it cost (Claude: model and tokens; rules: no tokens)."""

    model_config = ConfigDict(extra="forbid")
    advisor: str
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class ActionRecord(BaseModel):
    """One line of the action log (its JSON Schema: ``servesim schema ActionRecord``)."""

    model_config = ConfigDict(extra="forbid")
    time: str = Field(description="UTC start time, ISO 8601.")
    action: str = Field(description="ingest, generate, simulate, saturate, tune, recover, reschedule, ...")
    interface: str = Field(description="cli or web.")
    parameters: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict, description="Input name -> sha256 digest.")
    outputs: list[str] = Field(default_factory=list, description="Paths written.")
    advisor: AdvisorUsage | None = None
    duration_s: float
    outcome: Outcome
    error: str | None = None


def log_path(folder: str | Path | None = None) -> Path:
    return data_dir(folder) / LOG_NAME


def _plain(v: Any) -> Any:
    """A JSON-line-safe scalar: integers beyond 64 bits (orjson's range) are written as text."""
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
        return str(v)
    return v


def is_secret_name(name: str) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return bool(words) and (words[-1] in SECRET_WORDS or "".join(words[-2:]) == "apikey")


def _secret_values() -> list[str]:
    """Values of secret-named environment variables (ANTHROPIC_API_KEY, ...): never echoed either."""
    return [v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 8]


def _clean(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, REDACTED)
    return text if len(text) <= 500 else text[:499] + "…"


def scrub(params: Mapping[str, Any], _secrets: list[str] | None = None) -> dict[str, Any]:
    """Parameters safe to log: secret-named ones and secret values redacted, values made JSON-able,
    long ones cut."""
    secrets = _secret_values() if _secrets is None else _secrets
    out: dict[str, Any] = {}
    for k, v in params.items():
        name = str(k)
        if is_secret_name(name):
            out[name] = REDACTED
        elif v is None or isinstance(v, bool | int | float):
            out[name] = _plain(v)
        elif isinstance(v, Mapping):
            out[name] = scrub(v, secrets)
        elif isinstance(v, list | tuple):
            out[name] = [
                _plain(x) if isinstance(x, bool | int | float) else _clean(str(x), secrets) for x in v
            ][:100]
        else:
            out[name] = _clean(str(v.value if isinstance(v, Enum) else v), secrets)
    return out


def file_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def append(record: ActionRecord, folder: str | Path | None = None) -> Path:
    """Append one record as one line (atomic with respect to other writers: one locked write)."""
    path = log_path(folder)
    line = orjson.dumps(record.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, line)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return path


class ActionHandle:
    """What a running action fills in: inputs, outputs, advisor usage (see ``record_action``)."""

    def __init__(self) -> None:
        self.inputs: dict[str, str] = {}
        self.outputs: list[str] = []
        self.advisor: AdvisorUsage | None = None

    def input_file(self, name: str, path: str | Path) -> None:
        if Path(path).is_file():
            self.inputs[name] = file_digest(path)

    def input_bytes(self, name: str, data: bytes) -> None:
        self.inputs[name] = "sha256:" + hashlib.sha256(data).hexdigest()

    def output(self, path: str | Path) -> None:
        self.outputs.append(str(path))


@contextmanager
def record_action(
    action: str,
    parameters: Mapping[str, Any],
    *,
    interface: str = "cli",
    folder: str | Path | None = None,
) -> Iterator[ActionHandle]:
    """Log one action when it ends, with its outcome; an error is logged and re-raised."""
    handle = ActionHandle()
    started = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    t0 = time.perf_counter()

    def write(outcome: Outcome, error: str | None) -> None:
        append(
            ActionRecord(
                time=started,
                action=action,
                interface=interface,
                parameters=scrub(parameters),
                inputs=handle.inputs,
                outputs=handle.outputs,
                advisor=handle.advisor,
                duration_s=round(time.perf_counter() - t0, 6),
                outcome=outcome,
                error=None if error is None else _clean(error, _secret_values()),
            ),
            folder,
        )

    try:
        yield handle
    except BaseException as exc:
        from servesim.errors import describe

        write("error", describe(exc)[:1000] if not isinstance(exc, SystemExit) else f"exit {exc.code}")
        raise
    write("ok", None)


def read_log(folder: str | Path | None = None) -> list[ActionRecord]:
    """Every complete line of the log, oldest first (a torn last line, if any, is skipped)."""
    path = log_path(folder)
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            out.append(ActionRecord.model_validate(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValueError):
            continue
    return out


__all__ = [
    "ActionHandle",
    "ActionRecord",
    "AdvisorUsage",
    "append",
    "file_digest",
    "log_path",
    "read_log",
    "record_action",
    "scrub",
]
