"""Token check and security headers, as one pure ASGI middleware (safe for streamed responses).

With a token, every request needs ``Authorization: Bearer <token>`` or the ``servesim_token``
cookie; a browser opens ``/?token=<token>`` once and is redirected to the same page without it,
holding an HttpOnly, SameSite=Strict cookie (the token never stays in the address bar, a page
script or a log). Every response carries a CSP without inline script, no framing, and nosniff.
The access log is written here, without query strings (uvicorn's own is off: it logs them),
control characters escaped (a ``%0a`` in a URL cannot forge a line).

Two browser attacks are refused before any route runs:
- DNS rebinding: a page on another name that resolves to 127.0.0.1. The ``Host`` header must be
  a loopback name (or one given with ``--allowed-host``) unless a token guards the server (421).
- Cross-site requests (CSRF): a state-changing request (POST, PUT, PATCH, DELETE) whose
  ``Origin`` is not this server's own, or that the browser marks ``Sec-Fetch-Site: cross-site``
  or ``same-site``, is refused (403). Browsers send one of them on every cross-origin POST,
  simple ``text/plain`` and form uploads included; clients that are not browsers send neither.
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
#: Names a loopback-only server answers to (with any port).
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def log_safe(text: str) -> str:
    """``text`` with control characters (CR, LF, ESC ...) and backslashes escaped, for a log line."""
    return "".join(
        c if (" " <= c < "\x7f" and c != "\\") else c.encode("unicode_escape").decode("ascii") for c in text
    )


def host_name(host: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8000`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, token: str | None, allowed_hosts: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)

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

        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        try:
            if not self._host_allowed(host):
                await _refuse(
                    send_with_headers,
                    421,
                    f"this server answers to {', '.join(sorted(LOOPBACK_NAMES | self.allowed_hosts))} "
                    f"only, not {log_safe(host_name(host))[:100]!r} "
                    "(start it with --allowed-host to add a name)",
                )
            elif scope.get("method") in UNSAFE_METHODS and (why := _cross_site(headers, host)):
                await _refuse(send_with_headers, 403, why)
            elif self.token is None or self._authorized(scope):
                await self.app(scope, receive, send_with_headers)
            elif (query := self._token_in_query(scope)) is not None:
                await self._set_cookie_and_redirect(scope, query, send_with_headers)
            else:
                await _unauthorized(send_with_headers, b"text/html" in headers.get(b"accept", b""))
        finally:
            access_log.info(
                "%s %s %s %.1f ms",
                log_safe(str(scope.get("method"))),
                log_safe(str(scope.get("path"))),
                status["code"],
                (time.perf_counter() - t0) * 1000,
            )

    def _host_allowed(self, host: str) -> bool:
        name = host_name(host)
        if name in self.allowed_hosts:
            return True
        if self.token is not None and not self.allowed_hosts:
            return True  # a token guards it (it may listen anywhere); --allowed-host narrows it
        return name in LOOPBACK_NAMES

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


def _cross_site(headers: dict[bytes, bytes], host: str) -> str | None:
    """Why a state-changing request is a cross-site one (None when it is not)."""
    site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
    if site in ("cross-site", "same-site"):
        return f"a {site} request may not change anything here (it came from another site's page)"
    origin = headers.get(b"origin")
    if origin is not None:
        given = origin.decode("latin-1").strip().lower()
        own = {f"http://{host.lower()}", f"https://{host.lower()}"}
        if given not in own:
            return (
                f"the request's Origin {log_safe(given)[:100]!r} is not this server's: a page on another "
                "site may not change anything here"
            )
    return None


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = {"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status, "detail": detail}
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/problem+json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


UNAUTHORIZED_HTML = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>servesim: token needed</title></head>
<body><h1>This workbench needs its token</h1>
<p>Open this page once as <code>/?token=&lt;your token&gt;</code> (the server's <code>--token</code> or
<code>--token-file</code>); the browser then keeps it in a cookie and the address bar drops it.</p>
</body></html>
"""


async def _unauthorized(send: Send, html: bool = False) -> None:
    if html:  # a person at a browser: a page, not a JSON document
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"www-authenticate", b"Bearer")],
            }
        )
        await send({"type": "http.response.body", "body": UNAUTHORIZED_HTML})
        return
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
