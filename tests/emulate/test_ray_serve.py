"""``servesim emulate`` for real: Ray Serve on loopback, the official openai client, 200+
simultaneous streams, a replica failed mid-stream, /metrics. One test (one Ray start: the
machine is small); it shuts Serve and Ray down whatever happens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import MODEL, free_port, replicas

pytestmark = pytest.mark.ray


@pytest.fixture
def ray_emulator() -> Iterator[str]:
    ray_serve = pytest.importorskip("servesim.emulate.ray_serve")
    settings = ray_serve.EmulatorSettings(
        replicas=replicas(2, max_num_seqs=256), model=MODEL, time_scale=8.0, port=free_port()
    )
    try:
        ray_serve.start(settings, num_cpus=2)
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        ray_serve.stop()


async def _streams(url: str, n: int, max_tokens: int) -> tuple[int, dict[str, int]]:
    """Open ``n`` streams at once; the most open at one time (first chunk seen, not done) and
    the tokens each received."""
    open_now = peak = 0
    got: dict[str, int] = {}

    async def one(c: httpx.AsyncClient, i: int) -> None:
        nonlocal open_now, peak
        body = {"model": MODEL, "prompt": f"stream {i} " * 50, "max_tokens": max_tokens, "stream": True}
        started = False
        async with c.stream("POST", url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if not started:
                    started = True
                    open_now += 1
                    peak = max(peak, open_now)
                got[chunk["id"]] = got.get(chunk["id"], 0) + len(chunk["choices"][0]["text"].split())
        open_now -= 1

    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(timeout=90, limits=limits) as c:
        await asyncio.gather(*(one(c, i) for i in range(n)))
    return peak, got


def test_the_emulator_on_ray_serve(ray_emulator: str) -> None:
    url = ray_emulator
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)

    # The official client streams a completion and a chat, with the usage chunk.
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="Hello " * 40,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert sum(len(c.choices[0].text.split()) for c in chunks if c.choices) == 5
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 60
    chat = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chat).split() == ["tok"] * 4
    assert chat[-1].choices[0].finish_reason == "length"

    # 220 streams at once, every one complete.
    peak, got = asyncio.run(_streams(url, 220, 24))
    assert len(got) == 220 and set(got.values()) == {24}
    assert peak >= 200

    # A replica fails mid-stream: its streams resume on the survivor as the planner decided.
    async def failover() -> dict[str, int]:
        task = asyncio.create_task(_streams(url, 6, 80))
        await asyncio.sleep(2.0)
        async with httpx.AsyncClient(timeout=10) as c:
            r = await c.post(url + "/admin/fail", json={"replica": "replica-0", "recover_after_s": 1.0})
            assert r.status_code == 200
        return (await task)[1]

    streamed = asyncio.run(failover())
    assert set(streamed.values()) == {80}  # no stream lost a token or got one twice
    moves = httpx.get(url + "/admin/moves", timeout=10).json()["moves"]
    assert moves and {m["from"] for m in moves} == {"replica-0"}
    assert {m["strategy"] for m in moves} <= {"MIGRATE_STATE", "COLD_RESTART"}
    assert {m["request"] for m in moves} <= set(streamed)

    # /metrics parses with prometheus-client and carries vLLM's names.
    text = httpx.get(url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
    } <= set(fams)
    ttft_count = [
        s.value for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")
    ]
    assert ttft_count == [2 + 220 + 6]

    # Bad requests: 400 with the reason.
    bad = httpx.post(
        url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": -1}, timeout=10
    )
    assert bad.status_code == 400 and "max_tokens" in bad.json()["error"]["message"]
