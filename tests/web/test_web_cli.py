"""``servesim serve``: refuses what it must before anything listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from free_ports import free_port
from servesim.cli.main import app

runner = CliRunner()


def test_non_loopback_without_a_token_refuses_and_says_why(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert "refusing to listen on 0.0.0.0" in r.output and "--token" in r.output


def test_token_file_problems_are_one_line_errors(tmp_path: Path) -> None:
    empty = tmp_path / "tok"
    empty.write_text("\n")
    r = runner.invoke(app, ["serve", "--token-file", str(empty), "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "token file is empty" in r.output
    r = runner.invoke(app, ["serve", "--token", "x" * 20, "--token-file", str(empty)])
    assert r.exit_code == 2 and "not both" in r.output
    r = runner.invoke(app, ["serve", "--token-file", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "missing" in r.output
    short = tmp_path / "short"
    short.write_text("abc\n")
    r = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--token-file", str(short)])
    assert r.exit_code == 2 and "too short" in r.output and "abc" not in r.output


def test_help_lists_serve() -> None:
    r = runner.invoke(app, ["--help"])
    assert "serve" in r.output


def _marked(mark: str) -> list[int]:
    """Processes whose environment carries ``mark`` (the server and everything it started)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if mark.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_workers_do_not_outlive_a_killed_server(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    import httpx

    port = free_port()
    mark = f"SERVESIM_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    exe = str(Path(sys.executable).parent / "servesim")
    proc = subprocess.Popen(
        [exe, "serve", "--port", str(port), "--data-dir", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):  # up to ~90 s: the server, the fork server and a warm worker
            if len(_marked(mark)) >= 3 or proc.poll() is not None:
                break
            time.sleep(0.3)
        if len(_marked(mark)) < 3:
            pytest.fail("the server did not start its worker")
        assert httpx.get(f"http://127.0.0.1:{port}/api/catalog", timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 20
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _marked(mark) == []


def test_sigterm_stops_the_server_cleanly_with_status_0(tmp_path: Path) -> None:
    """Issue 47: ``servesim serve`` ended with status -15 on SIGTERM (what systemd, Docker and
    Kubernetes send): uvicorn drains, then the command exits 0 and says it stopped."""
    import signal
    import subprocess
    import sys

    import httpx

    from polling import wait_until

    port = free_port()
    exe = str(Path(sys.executable).parent / "servesim")
    proc = subprocess.Popen(
        [exe, "serve", "--port", str(port), "--data-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/catalog", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        wait_until(answers, 90, "the server did not answer")  # a hang guard
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, err
    assert "servesim workbench stopped" in err and "Traceback" not in err
