"""``servesim emulate`` as a user runs it: a script starts it in the background (``&``, which
starts it with SIGINT ignored); it starts Ray and Serve, answers the official openai client on
loopback, and a stop signal shuts it down cleanly: SIGTERM mid-stream drains the open stream to
its ``[DONE]`` first (issue 47), SIGINT stops it too. Each test is one Ray start (~10-20 s here,
minutes beside two busy loops: the suite's costliest kind of step, 11 CPU-s each), so the client,
the drain and SIGTERM share one and SIGINT has the other; the process group is killed at the end
whatever happens. The app's drain without Ray: tests/emulate/test_drain.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from emulate_helpers import none_left

from free_ports import free_port

pytestmark = pytest.mark.ray

SERVESIM = str(Path(sys.executable).parent / "servesim")


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    url: str
    out: Path
    err: Path


@dataclass
class Background:
    """``servesim emulate`` started by a script with ``&``: the shell (its session holds Ray's
    processes too), the command's pid and the file the script writes its exit status to."""

    run: Running
    pid: int
    rc_file: Path

    def status(self) -> int:
        """The command's exit status, once the script has waited for it."""
        assert self.run.proc.wait(timeout=180) == 0
        return int(self.rc_file.read_text())


@contextlib.contextmanager
def in_the_background(tmp_path: Path, *flags: str) -> Iterator[Background]:
    pytest.importorskip("ray")
    port = free_port()
    out, err, pid_file, rc_file = (tmp_path / n for n in ("stdout.txt", "stderr.txt", "pid", "rc"))
    argv = " ".join([SERVESIM, "emulate", "--port", str(port), "--max-model-len", "4096", *flags])
    # a non-interactive shell: its & jobs ignore SIGINT
    script = f"{argv} >{out} 2>{err} & echo $! >{pid_file}; wait $!; echo $? >{rc_file}"
    shell = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a liveness bound, not a speed target
        while not pid_file.exists() or not pid_file.read_text().strip():
            if time.monotonic() > deadline:
                pytest.fail("the script did not start servesim within 120 s")
            time.sleep(0.05)
        out.touch()  # the background script's redirection may not have made it yet
        yield Background(
            Running(shell, f"http://127.0.0.1:{port}", out, err), int(pid_file.read_text()), rc_file
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # anything left in the group, whatever happened
        shell.wait(timeout=10)


def _wait_serving(run: Running, timeout_s: float = 600) -> None:
    """A hang guard, not a verdict: Ray took 270 s to start beside two busy loops (issue 47)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if run.proc.poll() is not None:
            pytest.fail(f"servesim emulate exited ({run.proc.returncode}): {run.err.read_text()}")
        if f"on {run.url}/v1" in run.out.read_text():  # the line saying it serves (then /health)
            assert httpx.get(run.url + "/health", timeout=10).status_code == 200
            return
        if time.monotonic() > deadline:
            pytest.fail(f"servesim emulate did not say it serves within {timeout_s:g} s")
        time.sleep(0.25)


def test_servesim_emulate_serves_the_openai_client_and_drains_on_sigterm(tmp_path: Path) -> None:
    """The client's requests, then SIGTERM (systemd, Docker, Kubernetes) mid-stream: the open
    stream runs to its end, then status 0 and no Ray process left. It used to abort on SIGTERM
    (exit 134, two Ray agents left behind); the stop's handler is the same in the foreground."""
    with in_the_background(tmp_path, "--time-scale", "4") as bg:
        emulate = bg.run
        _wait_serving(emulate)
        client = openai.OpenAI(base_url=emulate.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        (served,) = [m.id for m in client.models.list().data]
        chunks = list(
            client.completions.create(
                model=served,
                prompt="Hello " * 40,
                max_tokens=6,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert "".join(c.choices[0].text for c in chunks if c.choices).split() == ["tok"] * 6
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6

        # SIGTERM mid-stream: the open stream runs to its end first
        lines: list[str] = []
        first = threading.Event()
        body = {"model": served, "prompt": "Hello " * 50, "max_tokens": 200, "stream": True}

        def read() -> None:
            with httpx.stream("POST", emulate.url + "/v1/completions", json=body, timeout=120) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    lines.append(line)
                    first.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert first.wait(timeout=120), "no token came"
        os.kill(bg.pid, signal.SIGTERM)  # mid-stream: 200 tokens at 4x take seconds
        reader.join(timeout=180)
        assert not reader.is_alive(), "the stream did not end"
        data = [x for x in lines if x]
        assert data and data[-1] == "data: [DONE]", data[-3:]
        streamed = [json.loads(x[6:]) for x in data if x.startswith("data: {")]
        assert "".join(c["choices"][0]["text"] for c in streamed).split() == ["tok"] * 200  # all of it
        assert bg.status() == 0, emulate.err.read_text()[-2000:]
        out, err = emulate.out.read_text(), emulate.err.read_text()
        assert "draining the open requests" in err
        assert none_left(emulate.proc.pid) == []  # no Ray process left
        assert "Traceback" not in err and "Traceback" not in out
        assert "SIGTERM: stopping Serve and Ray" in err
        assert f"on {emulate.url}/v1" in out  # the line saying where it served


def test_sigint_exits_0_and_leaves_no_ray_process_also_in_the_background(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) stops ``servesim emulate`` with status 0 and no Ray process left, also
    when a script started it with ``&`` (which starts it with SIGINT ignored: it used to go on
    serving). SIGTERM, with the same assertions, mid-stream: the test above."""
    with in_the_background(tmp_path) as bg:
        _wait_serving(bg.run)
        os.kill(bg.pid, signal.SIGINT)
        rc = bg.status()
        assert rc == 0, bg.run.err.read_text()[-2000:]
        assert none_left(bg.run.proc.pid) == []
        text = bg.run.err.read_text()
        assert "Traceback" not in text and "SIGINT: stopping Serve and Ray" in text
