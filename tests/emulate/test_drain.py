"""Issue 47: ``servesim emulate`` on SIGTERM drains as vLLM's server does: new requests get 503,
the open streams run to their ``[DONE]`` within a bounded grace period, then it exits 0.

The app's drain is checked here in process (no Ray); the command's, with a real subprocess and
SIGTERM mid-stream, in tests/emulate/test_cli_ray.py (after the openai client's requests: one Ray
start for both). Every wait is bounded; nothing asserts a duration, so a loaded machine changes
how long they take, not what they check."""

from __future__ import annotations

import asyncio
import json

import httpx
from emulate_helpers import MODEL, replicas

from servesim.emulate.app import build_app
from servesim.emulate.emulator import Emulator

BODY = {"model": MODEL, "prompt": "Hello " * 50, "max_tokens": 40, "stream": True}


def test_a_draining_app_refuses_new_requests_and_finishes_the_open_stream() -> None:
    app = build_app(Emulator(replicas(1), model=MODEL, time_scale=2.0))
    drain = app.state.drain

    async def scenario() -> tuple[httpx.Response, int, int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://emulator", timeout=120) as c:
            assert (await c.get("/health")).status_code == 200  # starts the simulated clock
            stream = asyncio.create_task(c.post("/v1/completions", json=BODY))
            for _ in range(2000):  # until the request is open (bounded)
                if drain.open:
                    break
                await asyncio.sleep(0.01)
            opened = drain.open
            closing = asyncio.create_task(drain.close(120.0))
            await asyncio.sleep(0)
            refused = (await c.post("/v1/completions", json=BODY)).status_code
            left = await closing
            return await stream, opened, refused, left

    response, opened, refused, left = asyncio.run(scenario())
    assert opened == 1 and refused == 503 and left == 0
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    tokens = [json.loads(x[6:]) for x in response.text.split("\n\n") if x.startswith("data: {")]
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
