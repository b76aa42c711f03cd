"""The emulator's edge: the HTTP server where the client's connection ends, which is where the
emulated vLLM receives requests and sends tokens.

Under Ray Serve that server is the proxy actor, two Ray hops from the ingress replica that runs
the engine: proxy -> replica with the request, the replica fetching the body back from the
proxy, and each streamed chunk replica -> proxy (5-10 ms of wall time in, 3-5 ms out, on a small
machine). Those milliseconds are the emulator's own plumbing, not the emulated vLLM's, so

* ``Edge`` stamps each request's receipt in a header (``HEADER``): the request's simulated
  arrival is then, not when the ingress saw it (``build_app(trust_edge_stamp=True)``);
* the ingress hands each chunk over as soon as the engine produced it, with the time the client
  is due to see it (the message key ``DUE``), and ``Edge`` holds it until then: the chunk's
  replica -> proxy hop happens inside the front-end latency the client is owed anyway.

``Edge`` runs in the proxy through Ray Serve's proxy callback
(``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``), which ``ray_serve.start`` sets when it starts
Ray itself. Times are ``time.monotonic()``: one clock for every process on the host (the proxy
and the ingress share the node when servesim starts Ray). A client's own ``HEADER`` is dropped
by the proxy, and the ingress only believes a stamp within ``MAX_STAMP_AGE_S`` of its receipt.

Small and import-light: the proxy process imports it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

HEADER = b"x-servesim-received"
DUE = "servesim.due"  # key of an http.response.body message: when to send it (monotonic s)
MAX_STAMP_AGE_S = 1.0  # an older stamp (or one from the future) is not believed

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def sleep_until(wall: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``wall``."""
    wait = wall - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)


class Edge:
    """Pure ASGI middleware for the proxy: stamps each HTTP request's receipt in ``HEADER`` and
    sends each response chunk that carries a ``DUE`` time no earlier than that."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        stamp = repr(time.monotonic()).encode()
        headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != HEADER]
        scope = {**scope, "headers": [*headers, (HEADER, stamp)]}

        async def paced(message: Any) -> None:
            due = message.get(DUE) if isinstance(message, dict) else None
            if due is not None:
                message = {k: v for k, v in message.items() if k != DUE}
                await sleep_until(float(due))
            await send(message)

        await self.app(scope, receive, paced)


def proxy_middlewares() -> list[Any]:
    """Ray Serve's proxy callback: the middlewares its HTTP proxy wraps itself in."""
    from starlette.middleware import Middleware

    return [Middleware(Edge)]


def received_at(headers: Any, here: float) -> float:
    """The receipt time the proxy stamped (monotonic seconds) if believable, else ``here``
    (the ingress's own receipt). ``headers``: the ASGI scope's header list."""
    for k, v in headers:
        if k == HEADER:
            try:
                t = float(v)
            except ValueError:
                return here
            return t if here - MAX_STAMP_AGE_S <= t <= here else here
    return here
