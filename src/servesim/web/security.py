"""Token check and security headers, as one pure ASGI middleware (safe for streamed responses).

With a token, every request needs ``Authorization: Bearer <token>`` or the ``servesim_token``
cookie; a browser opens ``/?token=<token>`` once and is redirected to the same page without it,
holding an HttpOnly, SameSite=Strict cookie (the token never stays in the address bar, a page
script or a log). Every response carries a CSP without inline script, no framing, and nosniff.
The access log is written here, without query strings (uvicorn's own is off: it logs them).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from http import HTTPStatus
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servesim.errors import InternalError

COOKIE = "servesim_token"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
access_log = logging.getLogger("servesim.web.access")


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 0}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        try:
            if self.token is None or self._authorized(scope):
                await self.app(scope, receive, send_with_headers)
            elif (query := self._token_in_query(scope)) is not None:
                await self._set_cookie_and_redirect(scope, query, send_with_headers)
            else:
                await _unauthorized(send_with_headers)
        finally:
            access_log.info(
                "%s %s %s %.1f ms",
                scope.get("method"),
                scope.get("path"),
                status["code"],
                (time.perf_counter() - t0) * 1000,
            )

    def _matches(self, given: str) -> bool:
        if self.token is None:
            raise InternalError("invariant broken: self.token is None")
        return hmac.compare_digest(given.encode(), self.token)

    def _authorized(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if auth[:7].lower() == "bearer " and self._matches(auth[7:].strip()):
            return True
        raw = headers.get(b"cookie", b"").decode("latin-1")
        if raw:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(raw)
            except Exception:
                return False
            if COOKIE in jar and self._matches(jar[COOKIE].value):
                return True
        return False

    def _token_in_query(self, scope: Scope) -> list[tuple[str, str]] | None:
        """The query without ``token`` when it carries the right one (GET only), else None."""
        if scope.get("method") != "GET":
            return None
        pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in pairs if k == "token"]
        if len(given) == 1 and self._matches(given[0]):
            return [(k, v) for k, v in pairs if k != "token"]
        return None

    async def _set_cookie_and_redirect(self, scope: Scope, query: list[tuple[str, str]], send: Send) -> None:
        if self.token is None:
            raise InternalError("invariant broken: self.token is None")
        location = scope.get("path", "/") + (("?" + urlencode(query)) if query else "")
        cookie = f"{COOKIE}={self.token.decode()}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b""})


async def _unauthorized(send: Send) -> None:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": "this server needs its token: send 'Authorization: Bearer <token>' "
        "(or open the page once as /?token=<token>)",
    }
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


#: Bodies of every other request (JSON records, settings) are bounded too.
MAX_JSON_BYTES = 8 * 1024 * 1024
UPLOAD_PATH = "/api/traces"
#: Raw-file uploads (traces, vllm bench results): the upload limit, checked while streaming.
UPLOAD_PATHS = frozenset({UPLOAD_PATH, "/api/bench"})


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over the limit of {limit:,} bytes")
        self.limit = limit


class BodyLimitMiddleware:
    """Refuse bodies over the limit while they stream in (413), not after they are stored.

    A declared ``Content-Length`` over the limit is refused before anything is read; a body that
    grows past it is cut off at the first chunk that crosses it (``BodyTooLarge`` -> 413)."""

    def __init__(self, app: ASGIApp, upload_limit: int) -> None:
        self.app = app
        self.upload_limit = upload_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope.get("path") in UPLOAD_PATHS and scope.get("method") == "POST"
        limit = self.upload_limit if upload else MAX_JSON_BYTES
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


async def _too_large(send: Send, limit: int) -> None:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(413).phrase,
        "status": 413,
        "detail": f"the request body is over the limit of {limit:,} bytes",
    }
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/problem+json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
