"""When a request reached the server: stamped where the client's connection ends.

The emulated vLLM receives a request when its HTTP server has read it. Under Ray Serve that server
is the proxy actor, and the request then takes two more Ray calls (proxy -> ingress replica, and
the replica fetching the body back from the proxy: 5-10 ms of wall time on a small machine) before
the ingress sees it. Those milliseconds are the emulator's own plumbing, not the emulated vLLM's,
so the request's simulated arrival is the proxy's receipt: ``EdgeStamp`` runs in the proxy (Ray
Serve's proxy callback, ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, which ``ray_serve.start``
sets when it starts Ray itself) and writes the receipt time into a header the ingress reads.

The header carries ``time.monotonic()``: one clock for every process on the host (the proxy and
the ingress run on the same node when servesim starts Ray). A client's own header of that name
is dropped by the proxy, and the ingress only trusts the header when told the proxy sets it
(``build_app(trust_edge_stamp=True)``) and only within ``MAX_STAMP_AGE_S`` of its own receipt.

Small and import-light: the proxy process imports it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

HEADER = b"x-servesim-received"
MAX_STAMP_AGE_S = 1.0  # an older stamp (or one from the future) is not believed

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class EdgeStamp:
    """Pure ASGI middleware for the proxy: stamps each HTTP request's receipt in ``HEADER``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope.get("type") == "http":
            stamp = repr(time.monotonic()).encode()
            headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != HEADER]
            scope = {**scope, "headers": [*headers, (HEADER, stamp)]}
        await self.app(scope, receive, send)


def proxy_middlewares() -> list[Any]:
    """Ray Serve's proxy callback: the middlewares its HTTP proxy wraps itself in."""
    from starlette.middleware import Middleware

    return [Middleware(EdgeStamp)]


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
