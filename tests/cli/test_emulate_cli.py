"""``servesim emulate``'s flags: refused before anything starts (no Ray, exit 2, one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "servesim"), "emulate", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0 is not loopback: give --token or --token-file"),
        (["--router", "fastest"], "policy: Input should be 'round_robin'"),
        (
            ["--replicas", "2", "--fail", "replica-5@3"],
            "no replica 'replica-5'; replicas: replica-0, replica-1",
        ),
        (["--fail", "replica-0"], "use NODE@TIME"),
        (["--token", "a", "--token-file", "t.txt"], "give --token or --token-file, not both"),
        (["--model", "no-such-model"], "no-such-model"),
    ],
)
def test_bad_flags_are_refused_with_one_line(args: list[str], message: str) -> None:
    res = _run(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_an_empty_token_file_is_refused_and_the_token_never_printed(tmp_path: Path) -> None:
    empty = tmp_path / "token.txt"
    empty.write_text("\n", encoding="utf-8")
    res = _run("--host", "0.0.0.0", "--token-file", str(empty))
    assert res.returncode == 2 and "token file is empty" in res.stderr
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-token\n", encoding="utf-8")
    res = _run("--host", "0.0.0.0", "--token-file", str(secret), "--router", "nope")
    assert res.returncode == 2 and "hunter2" not in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("args", "flag"), [(["--time-scale", "0"], "--time-scale"), (["--port", "0"], "--port")]
)
def test_a_bad_value_is_one_error_line_naming_the_flag(args: list[str], flag: str) -> None:
    res = _run(*args)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and f"'{flag}'" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
