"""The emulator's HTTP app on loopback (uvicorn in a thread, no Ray): the official openai client
streams from it, bad requests get 4xx with the reason, disconnects abort, /metrics parses."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from emulate_helpers import MODEL, replicas
from prometheus_client.parser import text_string_to_metric_families

from servesim.emulate.app import build_app, is_loopback
from servesim.emulate.edge import HEADER
from servesim.emulate.emulator import Emulator


def metrics(url: str) -> dict[str, list[Any]]:
    text = httpx.get(url + "/metrics", timeout=5).text
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = fam.samples
    return out


def test_the_openai_client_streams_a_completion_with_the_usage_chunk(make_server: Any) -> None:
    srv = make_server(time_scale=1.0)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    assert [m.id for m in client.models.list().data] == [MODEL]
    stream = client.completions.create(
        model=MODEL, prompt="Hello " * 200, max_tokens=12, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.split() == ["tok"] * 12  # one filler word per output token
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    # As vLLM: the finish reason is on the chunk with the last token, no empty chunk after it.
    last = [c for c in chunks if c.choices][-1]
    assert last.choices[0].text.endswith("tok") and last.choices[0].finish_reason == "length"
    assert all(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == 300  # 1,200 characters at 4 a token


def test_the_openai_client_streams_a_chat_and_gets_plain_answers(make_server: Any) -> None:
    srv = make_server(time_scale=1.0)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(content.split()) == 7
    last = [c for c in chunks if c.choices][-1]
    assert (last.choices[0].delta.content or "").endswith("tok") and last.choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    done = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert done.choices[0].finish_reason == "length" and done.usage is not None
    assert done.usage.completion_tokens == 5 and len((done.choices[0].message.content or "").split()) == 5
    plain = client.completions.create(model=MODEL, prompt=[1, 2, 3, 4, 5], max_tokens=3)
    assert plain.usage is not None and plain.usage.prompt_tokens == 5  # token ids count exactly


@pytest.mark.parametrize("edge", [False, True])
def test_streams_behind_the_edge_are_whole_and_a_forged_receipt_is_ignored(
    make_server: Any, edge: bool
) -> None:
    srv = make_server(n_replicas=1, time_scale=2.0, edge=edge)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    sent = time.monotonic()
    # "Received a moment before it was sent", within the engine's lag: believed if not dropped.
    forged = {HEADER.decode(): repr(sent - 0.5 * srv.emulator.lag_s * srv.emulator.time_scale)}
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="Hello " * 40,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=forged,
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices).split() == ["tok"] * 8
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    # The engine was idle: the request was scheduled on arrival, which was not before the send.
    scheduled = srv.call(lambda: srv.emulator.fleet.sim.engines[0].rec.first_scheduled[0])
    assert scheduled >= srv.emulator.sim_time(sent)


def test_bad_requests_get_400_with_the_reason(make_server: Any) -> None:
    srv = make_server(max_model_len=2048)
    url = srv.url + "/v1/completions"
    cases = [
        ({"model": MODEL}, "prompt"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "prompt": "x" * 9000, "max_tokens": 10}, "maximum context length is 2048"),
        ({"model": MODEL, "prompt": "hi", "priority": 2**64}, "priority"),
        ({"model": MODEL, "prompt": "hi", "n": 2}, "n"),
        ({"model": MODEL, "prompt": ["a", "b"]}, "one prompt per request"),
        ({"model": MODEL, "prompt": []}, "empty"),
    ]
    for body, reason in cases:
        r = httpx.post(url, json=body, timeout=10)
        assert r.status_code == 400, body
        assert reason in r.json()["error"]["message"], (body, r.json())
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": MODEL, "messages": []}, timeout=10)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]


def test_an_unknown_model_is_404_as_in_vllm(make_server: Any) -> None:
    srv = make_server(max_model_len=2048)
    for path, extra in (
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        r = httpx.post(srv.url + path, json={"model": "gpt-9", **extra}, timeout=10)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["type"] == "NotFoundError" and err["code"] == 404 and "gpt-9" in err["message"]


def test_requests_beyond_the_stream_cap_get_429(make_server: Any) -> None:
    srv = make_server(time_scale=20.0, max_streams=2)
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 200, "stream": True}
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", srv.url + "/v1/completions", json=body) as a,
        c.stream("POST", srv.url + "/v1/completions", json=body) as b,
    ):
        assert a.status_code == b.status_code == 200
        third = c.post(srv.url + "/v1/completions", json=body)
        assert third.status_code == 429 and "limit (--max-streams) is 2" in third.json()["error"]["message"]


def test_a_full_api_server_answers_503_with_vllms_body(make_server: Any) -> None:
    # --max-num-queued-reqs 1: while one request is in flight, vLLM's API server answers 503
    # (QueueOverflowError) before streaming anything, and counts it by reason.
    srv = make_server(1, time_scale=20.0, max_num_queued_reqs=1)
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 200, "stream": True}
    with httpx.Client(timeout=30) as c, c.stream("POST", srv.url + "/v1/completions", json=body) as a:
        assert a.status_code == 200
        second = c.post(srv.url + "/v1/completions", json={**body, "stream": False})
        assert second.status_code == 503
        assert second.json() == {
            "error": {
                "message": "The engine is currently busy and cannot accept new requests. "
                "Please try again later or on a different instance.",
                "type": "Service Unavailable",
                "param": None,
                "code": 503,
            }
        }
    got = metrics(srv.url)["vllm:admission_rejections"]
    assert [(s.labels["reason"], s.value) for s in got if s.name.endswith("_total")] == [
        ("max_num_queued_reqs", 1.0)
    ]


def test_a_token_guards_the_api_and_is_never_echoed(make_server: Any) -> None:
    srv = make_server(api_key="s3cret-token")
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 401 and "s3cret" not in r.text
    wrong = httpx.post(
        srv.url + "/v1/completions", json=body, headers={"Authorization": "Bearer nope"}, timeout=10
    )
    assert wrong.status_code == 401 and "s3cret" not in wrong.text
    ok = httpx.post(
        srv.url + "/v1/completions", json=body, headers={"Authorization": "Bearer s3cret-token"}, timeout=10
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    assert httpx.get(srv.url + "/health", timeout=5).status_code == 200  # as vllm serve --api-key


def test_a_client_disconnect_aborts_the_request_and_frees_its_kv(make_server: Any) -> None:
    srv = make_server(n_replicas=1, time_scale=5.0)
    body = {"model": MODEL, "prompt": "word " * 400, "max_tokens": 3000, "stream": True}
    with httpx.Client(timeout=30) as c, c.stream("POST", srv.url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got: list[str] = []
        for line in lines:
            if line.startswith("data: "):
                got.append(line)
            if len(got) == 3:
                break
        kv_during = metrics(srv.url)["vllm:kv_cache_usage_perc"][0].value  # streaming: KV held
    assert len(got) == 3
    _wait_for_the_abort(srv.url)
    assert kv_during > 0.0
    assert srv.emulator.num_open == 0
    srv.call(srv.emulator.fleet.check_invariants)


def _wait_for_the_abort(url: str) -> dict[str, list[Any]]:
    """/metrics once one request was aborted and the KV cache is empty again (the abort is
    applied at the end of the simulated step in flight); fails the test after 60 s."""
    deadline = time.monotonic() + 60
    while True:
        m = metrics(url)
        aborted = [s.value for s in m["vllm:request_success"] if s.labels.get("finished_reason") == "abort"]
        if aborted == [1.0] and m["vllm:kv_cache_usage_perc"][0].value == 0.0:
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"the abort was not applied within 60 s: {m}")
        time.sleep(0.1)


def test_a_client_leaving_a_non_streaming_request_aborts_it_and_frees_its_kv(make_server: Any) -> None:
    srv = make_server(n_replicas=1, time_scale=5.0)
    body = {"model": MODEL, "prompt": "word " * 400, "max_tokens": 3000}  # ~100 s of wall time
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(srv.url + "/v1/completions", json=body, timeout=httpx.Timeout(10, read=1.5))
    m = _wait_for_the_abort(srv.url)
    assert [s.value for s in m["vllm:num_requests_running"]] == [0.0]
    assert srv.emulator.num_open == 0
    srv.call(srv.emulator.fleet.check_invariants)
    # The server is none the worse: the next request is answered in full.
    ok = httpx.post(srv.url + "/v1/completions", json={**body, "max_tokens": 3}, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def test_metrics_parse_with_vllms_names(make_server: Any) -> None:
    srv = make_server(n_replicas=1, time_scale=1.0)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    for _ in range(2):  # the same prompt twice: the second hits the prefix cache
        client.completions.create(model=MODEL, prompt="The same long prefix. " * 40, max_tokens=4)
    m = metrics(srv.url)
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:num_preemptions",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        assert name in m, name
    count = {s.name: s.value for s in m["vllm:time_to_first_token_seconds"]}
    assert count["vllm:time_to_first_token_seconds_count"] == 2
    itl = {s.name: s.value for s in m["vllm:inter_token_latency_seconds"]}
    assert itl["vllm:inter_token_latency_seconds_count"] == 6  # 3 gaps a request
    hits = sum(s.value for s in m["vllm:prefix_cache_hits"] if s.name.endswith("_total"))
    queries = sum(s.value for s in m["vllm:prefix_cache_queries"] if s.name.endswith("_total"))
    assert queries == 2 * 220 and hits == 208  # the second finds 13 of its 13.75 blocks cached


def test_the_admin_endpoints_refuse_non_loopback_clients() -> None:
    emulator = Emulator(replicas(2), model=MODEL)
    app = build_app(emulator, bind_host="0.0.0.0")

    async def ask(client_host: str) -> tuple[int, int]:
        transport = httpx.ASGITransport(app=app, client=(client_host, 5555))
        async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as c:
            fail = await c.post("/admin/fail", json={"replica": "replica-0"})
            moves = await c.get("/admin/moves")
            return fail.status_code, moves.status_code

    assert asyncio.run(ask("10.1.2.3")) == (403, 403)
    assert asyncio.run(ask("127.0.0.1")) == (200, 200)
    assert is_loopback("::1") and is_loopback("127.0.0.5") and not is_loopback("192.168.0.1")
    assert not is_loopback(None)


def test_an_injected_failure_mid_stream_follows_the_planner(make_server: Any) -> None:
    srv = make_server(n_replicas=2, time_scale=4.0)
    results: dict[str, list[str]] = {}
    tokens = 200  # ~6 s of streaming at this time scale: the failure lands mid-stream however loaded
    started: list[asyncio.Event] = []

    async def stream(c: httpx.AsyncClient, i: int, first: asyncio.Event) -> None:
        body = {"model": MODEL, "prompt": f"request {i} " * 300, "max_tokens": tokens, "stream": True}
        async with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
            rid, words = None, []
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    rid = chunk["id"]
                    words.extend(chunk["choices"][0]["text"].split())
                    first.set()
            assert rid is not None
            results[rid] = words

    async def main() -> None:
        async with httpx.AsyncClient(timeout=60) as c:
            started.extend(asyncio.Event() for _ in range(8))
            tasks = [asyncio.create_task(stream(c, i, started[i])) for i in range(8)]
            for first in started:  # every stream decoding (its first token out), not a guessed delay
                await asyncio.wait_for(first.wait(), 60)
            r = await c.post(srv.url + "/admin/fail", json={"replica": "replica-0"})
            assert r.status_code == 200
            await asyncio.gather(*tasks)

    asyncio.run(main())
    moves = httpx.get(srv.url + "/admin/moves", timeout=5).json()["moves"]
    assert moves and {m["from"] for m in moves} == {"replica-0"} and {m["to"] for m in moves} == {"replica-1"}
    assert {m["strategy"] for m in moves} <= {"MIGRATE_STATE", "COLD_RESTART"}
    assert {m["request"] for m in moves} <= set(results)
    assert all(
        len(w) == tokens for w in results.values()
    )  # every stream resumed and completed, no token twice


def test_a_body_longer_than_any_prompt_is_413_before_it_is_read(make_server: Any) -> None:
    """A 10 MB prompt used to be parsed and tokenised on the event loop (2.9 s with every other
    stream stalled) before the length check; now the body's bytes are bounded at the door, with
    a Content-Length or without one (chunked), in the OpenAI error shape."""
    from servesim.emulate.app import body_limit

    srv = make_server(max_model_len=2048)
    url = srv.url + "/v1/completions"
    body = json.dumps({"model": MODEL, "prompt": "x" * (body_limit(2048) + 10)}).encode()
    r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == 413 and "bytes" in r.json()["error"]["message"]

    def pieces() -> Any:
        for i in range(0, len(body), 1 << 16):
            yield body[i : i + (1 << 16)]

    r = httpx.post(url, content=pieces(), headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 413, r.text
    ok = httpx.post(url, json={"model": MODEL, "prompt": "hi", "max_tokens": 2}, timeout=10)
    assert ok.status_code == 200  # the bound leaves ordinary requests alone


def test_a_prompt_is_length_checked_before_and_tokenised_off_the_event_loop(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import servesim.emulate.app as app_module

    seen: list[int] = []
    real = app_module.text_tokens

    def recording(text: str) -> list[int]:
        seen.append(threading.get_ident())
        return real(text)

    monkeypatch.setattr(app_module, "text_tokens", recording)
    srv = make_server(max_model_len=2048)
    loop_thread = srv.call(threading.get_ident)
    url = srv.url + "/v1/completions"
    r = httpx.post(url, json={"model": MODEL, "prompt": "x" * (2048 * 4 + 1), "max_tokens": 1}, timeout=10)
    assert r.status_code == 400 and "maximum context length is 2048" in r.json()["error"]["message"]
    assert seen == []  # refused by its length before any tokenising
    for path, extra in (
        ("/v1/completions", {"prompt": "hello " * 50}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]}),
    ):
        r = httpx.post(srv.url + path, json={"model": MODEL, "max_tokens": 2, **extra}, timeout=10)
        assert r.status_code == 200, r.text
    assert len(seen) == 2 and loop_thread not in seen  # tokenised in a worker thread


def test_histograms_have_vllms_current_buckets(make_server: Any) -> None:
    srv = make_server(n_replicas=1, time_scale=5.0)
    httpx.post(
        srv.url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3}, timeout=30
    )
    m = metrics(srv.url)

    def bounds(name: str) -> list[float]:
        return [
            float(s.labels["le"]) for s in m[name] if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
        ]

    # vllm/v1/metrics/loggers.py (V1 engine), written out here independently of the emulator's.
    ttft = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
    itl = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
    e2e = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0]
    assert bounds("vllm:time_to_first_token_seconds") == [*ttft, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
    assert bounds("vllm:inter_token_latency_seconds") == [*itl, 20.0, 40.0, 80.0]
    for name in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"):
        assert bounds(name) == [*e2e, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def test_waiting_requests_stay_visible_while_no_replica_is_up(make_server: Any) -> None:
    """Every replica down: a request waits for one to come back; it used to vanish from
    ``vllm:num_requests_waiting`` (each dead replica reports 0)."""
    srv = make_server(n_replicas=1, time_scale=1.0)
    r = httpx.post(srv.url + "/admin/fail", json={"replica": "replica-0"}, timeout=10)
    assert r.status_code == 200
    srv.call(lambda: srv.emulator.submit("parked-1", [1, 2, 3, 4], 4, 0))
    deadline = time.monotonic() + 10
    waiting: dict[str, float] = {}
    while time.monotonic() < deadline:
        waiting = {s.labels["engine"]: s.value for s in metrics(srv.url)["vllm:num_requests_waiting"]}
        if sum(waiting.values()) >= 1:
            break
        time.sleep(0.1)
    assert waiting == {"replica-0": 0.0, "unrouted": 1.0}
    # ... and in /admin/moves, which lists every request waiting for a replica (it had none).
    moves = httpx.get(srv.url + "/admin/moves", timeout=5).json()
    assert moves["moves"] == []
    assert moves["waiting"] == [
        {"request": "parked-1", "arrival_s": moves["waiting"][0]["arrival_s"], "tokens_generated": 0}
    ]


def test_every_metric_carries_the_engine_label_as_vllm_v1(make_server: Any) -> None:
    """vLLM V1 labels every metric ``model_name`` and ``engine``; the histograms and counters
    used to carry ``model_name`` only. Two requests routed round-robin land on both replicas,
    and each replica's histograms count its own."""
    srv = make_server(n_replicas=2, time_scale=1.0, router="round_robin")
    for _ in range(2):
        r = httpx.post(
            srv.url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3}, timeout=30
        )
        assert r.status_code == 200, r.text
    m = metrics(srv.url)
    vllm = {name: samples for name, samples in m.items() if name.startswith("vllm:")}
    assert {"vllm:time_to_first_token_seconds", "vllm:request_success", "vllm:prompt_tokens"} <= set(vllm)
    for name, samples in vllm.items():
        assert samples and all(set(s.labels) >= {"model_name", "engine"} for s in samples), name
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        counts = {s.labels["engine"]: s.value for s in vllm[name] if s.name.endswith("_count")}
        assert counts == {"replica-0": 1.0, "replica-1": 1.0}, (name, counts)
    prompt = {s.labels["engine"]: s.value for s in vllm["vllm:prompt_tokens"] if s.name.endswith("_total")}
    assert prompt == {"replica-0": 1.0, "replica-1": 1.0}  # "hi": one token each
