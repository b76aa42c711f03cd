"""A real emulator server on loopback for the tests: uvicorn in a thread (fast tests) or Ray
Serve (``ray`` marker); both stop by themselves at the end of the test. What tests import lives
in emulate_helpers.py (never import from a conftest)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from emulate_helpers import MODEL, Server, replicas

from free_ports import free_port
from servesim import RouterSpec
from servesim.emulate.app import build_app
from servesim.emulate.edge import Edge
from servesim.emulate.emulator import Emulator, PDLayout


@pytest.fixture
def make_server() -> Iterator[object]:
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(
        n_replicas: int = 2,
        *,
        time_scale: float = 1.0,
        max_streams: int = 1024,
        api_key: str | None = None,
        edge: bool = False,
        router: str | None = None,
        disaggregated: PDLayout | None = None,
        **kw: object,
    ) -> Server:
        """``edge``: the app behind ``servesim.emulate.edge.Edge``, as the Ray proxy runs it;
        ``disaggregated``: prefill and decode pools instead of ``n_replicas``."""
        emulator = Emulator(
            [] if disaggregated is not None else replicas(n_replicas, **kw),  # type: ignore[arg-type]
            model=MODEL,
            router=None if router is None else RouterSpec.model_validate({"policy": router}),
            time_scale=time_scale,
            max_streams=max_streams,
            disaggregated=disaggregated,
        )
        port = free_port()
        app: Any = build_app(emulator, api_key=api_key, trust_edge_stamp=edge)
        if edge:
            app = Edge(app)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        box = Server(f"http://127.0.0.1:{port}", emulator)

        def run() -> None:
            loop = asyncio.new_event_loop()
            box.loop = loop
            loop.run_until_complete(server.serve())

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 60  # a generous bound: a busy host starts threads slowly
        while not server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the test server did not start")
            time.sleep(0.02)
        assert httpx.get(box.url + "/health", timeout=5).status_code == 200
        return box

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)
