"""``servesim emulate`` for real: Ray Serve on loopback, the official openai client, more
simultaneous streams than both replicas' batches hold, a replica failed mid-stream, /metrics.
One test, on the suite's one Ray (tests/ray_session.py: the machine is small); its app is
deleted whatever happens. What it asserts is the server's behaviour (every token of every
stream, its own running-requests gauge within the cap it was given), never how fast this host
opens connections."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import openai
import pytest
from emulate_helpers import MODEL, replicas
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.ray

CAP = 16  # max_num_seqs per replica: STREAMS over two replicas fill both batches and queue the rest
#: 1.5 times what both batches hold: the queueing, the cap and every token are checked at any
#: count past 2 x CAP (was 220 at a cap of 64: the same checks, 4.5 times the client's work on a
#: 2-core host, issue 47).
STREAMS = 3 * CAP


@pytest.fixture
def ray_emulator(serve_emulator: Callable[..., str]) -> str:
    """The emulator deployed on the suite's shared Ray Serve (tests/ray_session.py)."""
    ray_serve = pytest.importorskip("servesim.emulate.ray_serve")
    settings = ray_serve.EmulatorSettings(replicas=replicas(2, max_num_seqs=CAP), model=MODEL, time_scale=8.0)
    return serve_emulator(settings)


async def _streams(
    url: str, n: int, max_tokens: int, all_started: asyncio.Event | None = None
) -> dict[str, int]:
    """Open ``n`` streams at once; the tokens each received (``all_started`` is set once every
    stream has had its first chunk)."""
    got: dict[str, int] = {}
    started = 0

    async def one(c: httpx.AsyncClient, i: int) -> None:
        nonlocal started
        body = {"model": MODEL, "prompt": f"stream {i} " * 50, "max_tokens": max_tokens, "stream": True}
        first = True
        async with c.stream("POST", url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if first:
                    first = False
                    started += 1
                    if started == n and all_started is not None:
                        all_started.set()
                got[chunk["id"]] = got.get(chunk["id"], 0) + len(chunk["choices"][0]["text"].split())

    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(timeout=300, limits=limits) as c:
        await asyncio.gather(*(one(c, i) for i in range(n)))
    return got


def _gauges(text: str, name: str) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return {s.labels["engine"]: s.value for s in fams[name].samples}


async def _streams_and_gauges(url: str, n: int, max_tokens: int) -> tuple[dict[str, int], dict[str, float]]:
    """``_streams`` while /metrics is read until they end: the most running requests each
    replica reported."""
    most: dict[str, float] = {}
    task = asyncio.create_task(_streams(url, n, max_tokens))
    # a hang guard as long as the streams' own: on a loaded 2-core host one /metrics read
    # behind 220 open streams took over 30 s (issue 47: no verdict depends on the load)
    async with httpx.AsyncClient(timeout=300) as c:
        while not task.done():
            running = _gauges((await c.get(url + "/metrics")).text, "vllm:num_requests_running")
            for k, v in running.items():
                most[k] = max(most.get(k, 0.0), v)
            await asyncio.sleep(0.05)
    return await task, most


def test_the_emulator_on_ray_serve(ray_emulator: str) -> None:
    url = ray_emulator
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)

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

    # STREAMS streams at once, every one complete (every token, none twice), and the server ran
    # them concurrently by its own count: each replica's running gauge held several at once and
    # never more than its cap (how close to the cap a reading gets follows how fast this host
    # opens connections, so the cap is a bound here, not a target).
    got, most_running = asyncio.run(_streams_and_gauges(url, STREAMS, 24))
    assert len(got) == STREAMS and set(got.values()) == {24}
    assert set(most_running) == {"replica-0", "replica-1"}
    assert all(1 < v <= CAP for v in most_running.values()), most_running

    # A replica fails mid-stream (once every stream has its first token, however long that took
    # this host): its streams resume on the survivor as the planner decided.
    async def failover() -> dict[str, int]:
        all_started = asyncio.Event()
        task = asyncio.create_task(_streams(url, 6, 80, all_started))
        started = asyncio.create_task(all_started.wait())
        # a hang guard, not a verdict (as long as the streams' own): a stream that failed ends
        # the wait with its own error, one that never starts fails the test by name
        await asyncio.wait({started, task}, timeout=300, return_when=asyncio.FIRST_COMPLETED)
        if not all_started.is_set():
            started.cancel()
            if task.done():
                task.result()  # the stream's own error
            task.cancel()
            pytest.fail("the 6 failover streams did not all get a first token within 300 s")
        async with httpx.AsyncClient(timeout=300) as c:
            r = await c.post(url + "/admin/fail", json={"replica": "replica-0", "recover_after_s": 1.0})
            assert r.status_code == 200
        return await task

    streamed = asyncio.run(failover())
    assert set(streamed.values()) == {80}  # no stream lost a token or got one twice
    moves = httpx.get(url + "/admin/moves", timeout=300).json()["moves"]
    assert moves and {m["from"] for m in moves} == {"replica-0"}
    assert {m["strategy"] for m in moves} <= {"MIGRATE_STATE", "COLD_RESTART"}
    assert {m["request"] for m in moves} <= set(streamed)

    # /metrics parses with prometheus-client and carries vLLM's names.
    text = httpx.get(url + "/metrics", timeout=300).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
    } <= set(fams)
    ttft_count = {
        s.labels.get("engine"): s.value
        for s in fams["vllm:time_to_first_token_seconds"].samples
        if s.name.endswith("_count")
    }
    # one series per replica that served (vLLM V1's ``engine`` label), every request counted once
    assert set(ttft_count) <= {"replica-0", "replica-1"} and sum(ttft_count.values()) == 2 + STREAMS + 6

    # Bad requests: 400 with the reason.
    bad = httpx.post(
        url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": -1}, timeout=10
    )
    assert bad.status_code == 400 and "max_tokens" in bad.json()["error"]["message"]
