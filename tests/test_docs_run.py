"""Every ``servesim`` command line in docs/*.md *runs* as typed, in doc order, and exits 0.

Why: a reader copies these lines; parsing them (tests/test_docs_commands.py) misses a command
that errors on its input, a file the doc names that is not shipped, or a server that never
answers. Each line runs in a temporary folder holding a copy of ``examples/`` (the files the
docs name live there), with ``servesim`` on PATH and the data folder redirected. Servers
(``servesim serve``, ``servesim emulate``) are started, must answer HTTP on the port the line
names, and are stopped; a full-screen ``servesim dashboard`` is started in a pseudo-terminal,
must paint its first screen, and is stopped. The README's lines run in tests/test_readme.py.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Generous per-command bound on a loaded 2-core machine; the docs' lines take seconds.
TIMEOUT_S = 300
#: A server must answer (or a dashboard paint) within this many seconds of starting.
START_S = 90

#: What the dashboard's first screen shows: its status line and the batch panel's border.
PAINTED = (b"running", b"batch")


def doc_lines() -> list[tuple[str, str]]:
    """Every line of docs/*.md's shell blocks, continuations joined, the comment cut
    and shell redirections kept (as tests/test_docs_commands.py reads them, minus the cuts)."""
    out: list[tuple[str, str]] = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for lang, block in re.findall(r"```(bash|sh|console)?\n(.*?)```", text, flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                cmd = line.strip().removeprefix("$ ").split(" # ")[0].strip()
                # a shell block's every line (one may make a file a later line reads); elsewhere
                # (a plain block of screen or formulas) only a servesim command line
                if cmd.startswith("servesim ") or (lang and cmd and not cmd.startswith("#")):
                    out.append((doc.name, cmd))
    return out


COMMANDS = doc_lines()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole run: later lines read what earlier ones wrote (docs are read in order)."""
    root = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "examples", root / "examples")
    # the real vLLM runs docs/perf.md's sim2real line reads, where a checkout has them
    shutil.copytree(ROOT / "tests" / "fixtures" / "sim2real", root / "tests" / "fixtures" / "sim2real")
    return root


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "VIRTUAL_ENV")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SERVESIM_DATA_DIR"] = str(work / ".data")
    env["COLUMNS"] = "100"
    return env


def _port(words: list[str]) -> int:
    return int(words[words.index("--port") + 1]) if "--port" in words else 8000


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _serves(cmd: str, work: Path) -> None:
    """Start a server line, wait until it answers HTTP on its port, stop it."""
    port = _port(shlex.split(cmd))
    if not _free(port):
        pytest.skip(f"port {port} is taken on this machine; `{cmd}` binds it as typed")
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {cmd}"],
        cwd=work,
        env=_env(work),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, (
                f"`{cmd}` exited {proc.returncode}:\n{proc.stdout.read().decode()[-2000:]}"
            )  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    assert r.status < 500
                    return
            except urllib.error.HTTPError as e:  # 401 without the token, 404 on a bare API: it answers
                assert e.code < 500, f"`{cmd}`: HTTP {e.code}"
                return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"`{cmd}` did not answer on port {port} within {START_S} s")
    finally:
        _stop(proc)


def _paints(cmd: str, work: Path) -> None:
    """Start a full-screen dashboard line in a pty, wait for its first screen, stop it."""
    master, slave = pty.openpty()
    env = _env(work) | {"TERM": "xterm-256color", "LINES": "40", "COLUMNS": "120"}
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {cmd}"],
        cwd=work,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and not all(m in seen for m in PAINTED):
            assert proc.poll() is None, (
                f"`{cmd}` exited {proc.returncode}:\n{seen.decode(errors='replace')[-2000:]}"
            )
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert all(m in seen for m in PAINTED), f"`{cmd}` painted nothing in {START_S} s: {seen[-500:]!r}"
        assert b"Traceback" not in seen, seen.decode(errors="replace")[-2000:]
    finally:
        _stop(proc)
        os.close(master)


def test_the_docs_show_commands_to_run() -> None:
    docs = {d for d, _ in COMMANDS}
    assert sum(c.startswith("servesim ") for _, c in COMMANDS) >= 30 and docs >= {
        "tuning.md",
        "dashboard.md",
        "emulate.md",
        "web.md",
        "perf.md",
    }


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "cmd"), COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_a_docs_command_runs_as_typed(doc: str, cmd: str, work: Path) -> None:
    words = shlex.split(cmd.split(" > ")[0].split(" | ")[0])
    if words[0] == "servesim" and words[1] in ("serve", "emulate"):
        return _serves(cmd, work)
    if words[:2] == ["servesim", "dashboard"] and not {"--headless", "--ui", "--json"} & set(words):
        return _paints(cmd, work)
    res = subprocess.run(
        ["bash", "-c", cmd], cwd=work, env=_env(work), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    said = f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert res.returncode == 0, f"{doc}: `{cmd}` exited {res.returncode}\n{said}"
    assert "Traceback" not in res.stderr, f"{doc}: `{cmd}`\n{said}"
    assert res.stdout.strip() or " > " in cmd, f"{doc}: `{cmd}` printed nothing"
