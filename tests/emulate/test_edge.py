"""The proxy-side edge (``servesim.emulate.edge``): it stamps receipts a client cannot forge, and
holds each chunk that carries a due time until then, without passing the tag on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from servesim.emulate.edge import DUE, HEADER, MAX_STAMP_AGE_S, Edge, received_at


def _run(app: Any, headers: list[tuple[bytes, bytes]]) -> list[tuple[float, dict[str, Any]]]:
    sent: list[tuple[float, dict[str, Any]]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append((time.monotonic(), message))

    scope = {"type": "http", "path": "/v1/completions", "headers": headers}
    asyncio.run(Edge(app)(scope, receive, send))
    return sent


def test_the_edge_stamps_the_receipt_and_drops_a_clients_own_stamp() -> None:
    seen: list[list[tuple[bytes, bytes]]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(list(scope["headers"]))

    before = time.monotonic()
    _run(app, [(HEADER, b"1.0"), (b"host", b"x")])
    after = time.monotonic()
    (headers,) = seen
    stamps = [float(v) for k, v in headers if k == HEADER]
    assert len(stamps) == 1 and before <= stamps[0] <= after
    assert (b"host", b"x") in headers


def test_the_edge_sends_a_chunk_no_earlier_than_due_and_strips_the_tag() -> None:
    due: list[float] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        due.append(time.monotonic() + 0.05)
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True, DUE: due[0]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    sent = _run(app, [])
    assert [m["type"] for _, m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
    assert all(DUE not in m for _, m in sent)
    t_chunk = sent[1][0]
    assert t_chunk >= due[0]  # held until due (a lower bound: sleeping never ends early)
    assert sent[2][0] >= t_chunk  # order kept


def test_the_ingress_believes_only_a_recent_stamp() -> None:
    here = 1000.0
    assert received_at([(HEADER, b"999.99")], here) == 999.99
    assert received_at([], here) == here
    assert received_at([(HEADER, b"soon")], here) == here
    assert received_at([(HEADER, b"1000.5")], here) == here  # from the future
    assert received_at([(HEADER, repr(here - MAX_STAMP_AGE_S - 1).encode())], here) == here
