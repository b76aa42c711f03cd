"""What the emulator's tests share: the model name, the default deployment's replicas, a free
port, the handle of a test server (``Server``), and the processes a ``servesim emulate`` left.

Why a module of its own (not conftest.py): ``from conftest import ...`` gets whichever conftest
pytest loaded last, so it broke depending on the order the files were collected in.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim import EngineConfig, Replica, replica_setup
from servesim.emulate.emulator import Emulator

MODEL = "llama-3.1-8b"


def replicas(
    n: int = 2, *, max_num_seqs: int = 256, max_model_len: int = 4096, **engine: Any
) -> list[Replica]:
    """The default deployment (calibrated Llama-3.1-8B on one H100), ``n`` replicas (``engine``:
    more vLLM settings)."""
    setup = replica_setup(EngineConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len, **engine))
    return [Replica(f"replica-{k}", setup.config, setup.step_time) for k in range(n)]


@dataclass
class Server:
    url: str
    emulator: Emulator
    loop: asyncio.AbstractEventLoop | None = None

    def call(self, fn: object) -> object:
        """Run ``fn()`` on the server's event loop (the emulator is not thread-safe)."""
        assert self.loop is not None
        fut = asyncio.run_coroutine_threadsafe(_call(fn), self.loop)
        return fut.result(timeout=10)


async def _call(fn: object) -> object:
    return fn()  # type: ignore[operator]


def session_processes(sid: int) -> list[str]:
    """The command lines of the live processes in session ``sid`` (zombies excluded)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, session
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(cmd.strip())
    return out


def none_left(sid: int, timeout_s: float = 30) -> list[str]:
    """Wait (bounded) for every process of session ``sid`` to be gone; those still there."""
    deadline = time.monotonic() + timeout_s
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left
