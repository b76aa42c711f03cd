"""What the emulator's tests share: the model name, the default deployment's replicas, a free
port, and the handle of a test server (``Server``).

Why a module of its own (not conftest.py): ``from conftest import ...`` gets whichever conftest
pytest loaded last, so it broke depending on the order the files were collected in.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
