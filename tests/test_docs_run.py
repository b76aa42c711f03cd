"""Every ``servesim`` command line in docs/*.md *runs* as typed and exits 0.

Why: a reader copies these lines; parsing them (tests/test_docs_commands.py) misses a command
that errors on its input, a file the doc names that is not shipped, or a server that never
answers. Each doc's lines run in a temporary folder of the doc's holding a copy of ``examples/``
(the files the docs name live there), with ``servesim`` on PATH and the data folder redirected;
side by side, except that a line waits for the earlier lines that write a file it names (a doc
is read in order). Servers (``servesim serve``, ``servesim emulate``) are started on a free
port (the line's ``--port`` replaced, or one added: 8000 may be held by another test), must
answer HTTP there, and are stopped; none is skipped; a full-screen ``servesim dashboard`` is
started in a pseudo-terminal, must paint its first screen, and is stopped. The README's lines
run in tests/test_readme.py. The few lines that take minutes as typed run with fewer trials,
seeds or probes (tests/doc_sizes.py). Benchmarks (minutes, from a checkout) are shown indented,
not fenced, and are not run here. Blocks are paired as a reader sees them (tests/docs_fences.py).
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from doc_sizes import as_run
from docs_fences import shell_or_plain_blocks
from free_ports import free_port

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
        for lang, block in shell_or_plain_blocks(text):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                cmd = line.strip().removeprefix("$ ").split(" # ")[0].strip()
                # a shell block's every line (one may make a file a later line reads); elsewhere
                # (a plain block of screen or formulas) only a servesim command line
                if cmd.startswith("servesim ") or (lang and cmd and not cmd.startswith("#")):
                    out.append((doc.name, cmd))
    return out


COMMANDS = doc_lines()
#: The docs whose lines take longest (tune and saturate sweeps, Ray, sim2real) start first, so
#: that xdist's workers do not wait on one of them at the end.
HEAVY = ("tuning.md", "cluster.md", "emulate.md", "perf.md")
DOCS = sorted(
    {d for d, _ in COMMANDS}, key=lambda d: (d not in HEAVY, HEAVY.index(d) if d in HEAVY else 0, d)
)

#: Lines of one doc run side by side (each waits for the earlier lines that write a file it
#: names); at most ``SERVERS`` servers at once (each starts Ray or a workbench), each on a port
#: and with a data folder of its own.
WORKERS = 5
SERVERS = 2
#: Docs whose servers start a local Ray instance each (``servesim emulate``): marked ``ray``.
RAY_DOCS = ("emulate.md",)
#: Options whose value is a file or folder a line writes (``> FILE`` too).
WRITES = ("--out", "-o", "--out-dir", "--outbox", "--matrix")  # -o: --out's short form


@dataclass
class Line:
    """One doc line: how it runs, what it writes, which earlier lines it waits for."""

    cmd: str
    kind: str  # "run", "serve" (answers HTTP), "paint" (a full-screen dashboard)
    writes: set[str] = field(default_factory=set)
    after: list[int] = field(default_factory=list)


def _words(cmd: str) -> list[str]:
    return shlex.split(cmd.replace(" > ", " ").replace(" | ", " "))


def plan(cmds: list[str]) -> list[Line]:
    """The doc's lines in order, each waiting for the earlier ones that write a file it names."""
    lines: list[Line] = []
    for cmd in cmds:
        words = shlex.split(cmd.split(" > ")[0].split(" | ")[0])
        if words[0] == "servesim" and words[1] in ("serve", "emulate"):
            kind = "serve"
        elif words[:2] == ["servesim", "dashboard"] and not {"--headless", "--ui", "--json"} & set(words):
            kind = "paint"
        else:
            kind = "run"
        line = Line(cmd, kind)
        if " > " in cmd:
            line.writes.add(cmd.split(" > ")[1].split()[0])
        every = _words(cmd)
        for k, w in enumerate(every[:-1]):
            if w in WRITES:
                line.writes.add(every[k + 1].rstrip("/"))
        named = {w.rstrip("/") for w in every}
        line.after = [j for j, earlier in enumerate(lines) if earlier.writes & named]
        lines.append(line)
    return lines


def _work(root: Path) -> Path:
    """A doc's folder: a copy of examples/ (the files the docs name; later lines of the doc read
    what earlier ones wrote) and the real vLLM runs docs/perf.md's sim2real line reads."""
    shutil.copytree(ROOT / "examples", root / "examples")
    shutil.copytree(ROOT / "tests" / "fixtures" / "sim2real", root / "tests" / "fixtures" / "sim2real")
    return root


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "VIRTUAL_ENV")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SERVESIM_DATA_DIR"] = str(work / ".data")
    env["COLUMNS"] = "100"
    return env


#: Where a server line's port is drawn: below the kernel's ephemeral range (32768-60999 here) and
#: above Ray's worker ports (10002-19999). A kernel-picked port was once taken, between the pick and
#: the emulator's bind, by one of the many gRPC ports a concurrently starting Ray binds (the line
#: then "answered" in HTTP/2 frames).


def on_port(cmd: str, port: int) -> str:
    """``cmd`` as typed, listening on ``port``: its ``--port`` replaced, or one added (servers
    listen on 8000 by default, which another test or program may hold)."""
    if re.search(r"--port[ =]\d+", cmd):
        return re.sub(r"--port[ =]\d+", f"--port {port}", cmd)
    return f"{cmd} --port {port}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _serves(typed: str, work: Path) -> None:
    """Start a server line on a free port, wait until it answers HTTP there, stop it. Its data
    folder is its own (servers run side by side; one may set another with ``--data-dir``)."""
    port = free_port()
    cmd = on_port(typed, port)
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {cmd}"],
        cwd=work,
        env=_env(work) | {"SERVESIM_DATA_DIR": str(work / f".data-{port}")},
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
        raise AssertionError(f"`{cmd}` did not answer on port {port} within {START_S} s")
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


def _runs(cmd: str, work: Path) -> None:
    res = subprocess.run(
        ["bash", "-c", as_run(cmd)],
        cwd=work,
        env=_env(work),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    said = f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert res.returncode == 0, f"`{cmd}` exited {res.returncode}\n{said}"
    assert "Traceback" not in res.stderr, f"`{cmd}`\n{said}"
    assert res.stdout.strip() or " > " in cmd, f"`{cmd}` printed nothing"


RUNNERS: dict[str, Callable[[str, Path], None]] = {"run": _runs, "serve": _serves, "paint": _paints}


def test_a_line_waits_for_the_lines_that_write_what_it_reads() -> None:
    lines = plan(
        [
            "python3 -c 'print(1)' > token.txt",
            "servesim generate-failures -n 5 --out failures.json",
            "servesim recover failures.json --json",
            "servesim emulate --token-file token.txt",
            "servesim serve --port 8080",
            "servesim tune t.jsonl --out-dir outbox/",
            "servesim dashboard bursty -n 5",
            "servesim generate -n 64 -o b64.jsonl",
            "servesim simulate b64.jsonl",
        ]
    )
    assert [x.after for x in lines] == [[], [], [1], [0], [], [], [], [], [7]]
    assert [x.kind for x in lines] == ["run", "run", "run", "serve", "serve", "run", "paint", "run", "run"]
    assert lines[5].writes == {"outbox"}
    assert (
        on_port("servesim serve --data-dir ./wb --port 8080", 5) == "servesim serve --data-dir ./wb --port 5"
    )
    assert on_port("servesim emulate --replicas 2", 7) == "servesim emulate --replicas 2 --port 7"


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc", [pytest.param(d, marks=pytest.mark.ray) if d in RAY_DOCS else d for d in DOCS]
)
def test_a_docs_lines_run_as_typed(doc: str, tmp_path: Path) -> None:
    """Every line of ``doc``, in a folder of its own: side by side where no line reads what
    another writes, servers one at a time, each on a free port; every line runs, none skips."""
    work = _work(tmp_path)
    lines = plan([c for d, c in COMMANDS if d == doc])
    failures: list[str] = []
    servers = threading.Semaphore(SERVERS)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        done: list[Future[None]] = []

        def run(i: int) -> None:
            for j in lines[i].after:
                done[j].result()  # an earlier line this one reads from (its failure is reported there)
            line = lines[i]
            if line.kind == "serve":
                with servers:
                    _serves(line.cmd, work)
            else:
                RUNNERS[line.kind](line.cmd, work)

        for i in range(len(lines)):
            done.append(pool.submit(run, i))
        for line, fut in zip(lines, done, strict=True):
            try:
                fut.result()
            except Exception as e:  # every failing line is reported, not the first only
                failures.append(f"{doc}: `{line.cmd}`: {e}")
    assert not failures, "\n\n".join(failures)
