"""The HTTP face of the emulator: vLLM's OpenAI-compatible endpoints as a FastAPI app.

``/v1/models``, ``/v1/completions``, ``/v1/chat/completions`` (JSON or SSE streams in vLLM's chunk
shapes, a final usage chunk with ``stream_options.include_usage``), ``/health``, ``/metrics``
(Prometheus text, vLLM's metric names). With a token, ``/v1/*`` needs ``Authorization: Bearer``
(as ``vllm serve --api-key``). ``/admin/fail`` and ``/admin/moves`` (failure injection, the
recovery decisions) answer loopback clients only. Bad bodies get 400 with the reason, requests
beyond the open-stream cap 429; the token is never logged or echoed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from servesim.emulate import protocol as p
from servesim.emulate.edge import DUE, HEADER, received_at
from servesim.emulate.emulator import BadRequest, Emulator, Overloaded, UnknownModel
from servesim.emulate.tokens import CHARS_PER_TOKEN, chat_text, output_text, text_tokens

#: Bytes of a request body per token of context (a token id in a JSON list is at most ~21 bytes;
#: text is 4 bytes a token, up to 6 per byte when JSON-escaped), plus 1 MiB for the rest: a body
#: longer than any prompt the context can hold is refused before it is read or parsed.
BODY_BYTES_PER_TOKEN = 24
BODY_SLACK_BYTES = 1 << 20


def body_limit(max_model_len: int) -> int:
    return max_model_len * BODY_BYTES_PER_TOKEN + BODY_SLACK_BYTES


class FailRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replica: str
    recover_after_s: float | None = Field(None, gt=0)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _error(message: str, code: int, kind: str = "BadRequestError") -> JSONResponse:
    return JSONResponse(p.error_body(message, code, kind), status_code=code)


T = TypeVar("T")
RECEIVED = "servesim.received"  # the ASGI scope key: when the request reached the server (monotonic s)
EDGE = "servesim.edge"  # the ASGI scope key: True where ``servesim.emulate.edge.Edge`` is in front


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class Drain:
    """The app's open HTTP requests (a stream is open until its ``[DONE]`` is sent) and whether
    new ones are refused: on SIGTERM ``servesim emulate`` closes the door (503, as vLLM's server
    does while it shuts down) and waits a bounded grace period for the open ones to finish."""

    def __init__(self) -> None:
        self.open = 0
        self.closing = False

    async def close(self, grace_s: float) -> int:
        """Refuse new requests, then wait up to ``grace_s`` for the open ones; those still open."""
        self.closing = True
        deadline = time.monotonic() + grace_s
        while self.open and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.open


class _Gate:
    """Pure ASGI middleware (a ``BaseHTTPMiddleware`` would relay every streamed chunk through a
    memory stream and a task): stamps each request's receipt, checks the token on ``/v1``,
    counts the open requests and refuses new ones once the server drains (``Drain``)."""

    def __init__(
        self, app: Any, *, api_key: str | None, trust_edge_stamp: bool, max_body: int, drain: Drain
    ) -> None:
        self.app = app
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()
        self.trust_edge_stamp = trust_edge_stamp
        self.max_body = max_body
        self.drain = drain

    def _too_large(self) -> JSONResponse:
        return _error(
            f"the request body is over {self.max_body:,} bytes, more than any prompt this model's "
            "context can hold (refused before parsing it)",
            413,
            "RequestEntityTooLarge",
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if self.drain.closing:
                await _error("the server is shutting down", 503, "ServiceUnavailable")(scope, receive, send)
                return
            self.drain.open += 1
            try:
                await self._http(scope, receive, send)
            finally:
                self.drain.open -= 1
            return
        await self.app(scope, receive, send)

    async def _http(self, scope: Any, receive: Any, send: Any) -> None:
        here = time.monotonic()  # the event loop's clock (asyncio: time.monotonic)
        edge = self.trust_edge_stamp and any(k == HEADER for k, _ in scope["headers"])
        scope[RECEIVED] = received_at(scope["headers"], here) if edge else here
        scope[EDGE] = edge  # the proxy's Edge is in front of this request: it paces the tokens
        if self.expected is not None and scope["path"].startswith("/v1"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                await _error("Unauthorized", 401, "AuthenticationError")(scope, receive, send)
                return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            await self._too_large()(scope, receive, send)
            return
        # A body without a Content-Length is counted as it arrives: past the bound, the app
        # is told the client left (it answers nothing that is sent) and the 413 goes out.
        seen, over, started = 0, False, False

        async def bounded_receive() -> Any:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: Any) -> None:
            nonlocal started
            if over:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, bounded_receive, watched_send)
        if over and not started:
            await self._too_large()(scope, receive, send)


class _TimedStream(StreamingResponse):
    """An SSE response whose messages each come with the time the client is due to see them:
    sent as they come (the emulator paced them), or, with ``edge_paces``, tagged with that time
    (``servesim.emulate.edge.DUE``) for the proxy in front to hold them until then."""

    def __init__(self, chunks: AsyncIterator[tuple[bytes, float | None]], *, edge_paces: bool) -> None:
        super().__init__(_nothing(), media_type="text/event-stream")
        self.chunks = chunks
        self.edge_paces = edge_paces

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk, due in self.chunks:
            message: dict[str, Any] = {"type": "http.response.body", "body": chunk, "more_body": True}
            if due is not None and self.edge_paces:
                message[DUE] = due
            await send(message)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _nothing() -> AsyncIterator[bytes]:
    """No body: ``_TimedStream`` streams its own chunks."""
    return
    yield b""  # an async generator


async def _client_gone(request: Request) -> None:
    """Returns when the client has disconnected (the ASGI server's ``http.disconnect``); never if
    the server cannot tell (its receive fails): then the request runs to its end."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # whatever the ASGI server raised: no news of the client
        await asyncio.Event().wait()


async def _unless_client_leaves(request: Request, work: Coroutine[Any, Any, T]) -> T | None:
    """``work``'s result, or None if the client disconnects first; then ``work`` is cancelled
    (for a request: its token iteration ends, which aborts it in the engine). A streamed response
    needs none of this: the server cancels the stream when it cannot write to the client."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await task
    return None


def build_app(
    emulator: Emulator,
    *,
    api_key: str | None = None,
    bind_host: str = "127.0.0.1",
    trust_edge_stamp: bool = False,
) -> FastAPI:
    """The app serving ``emulator``. ``bind_host``: where the server listens (the admin
    endpoints trust a client address only where the server saw one; else the bind address).
    ``trust_edge_stamp``: a proxy in front runs ``servesim.emulate.edge.Edge``; a request it
    stamped arrives at its receipt there, and its tokens are released there when due."""
    app = FastAPI(title="servesim emulate", docs_url=None, redoc_url=None, openapi_url=None)
    model = emulator.model

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return _error(f"{where or 'body'}: {first.get('msg', 'invalid request')}", 400)

    app.state.drain = Drain()
    app.add_middleware(
        _Gate,
        api_key=api_key,
        trust_edge_stamp=trust_edge_stamp,
        max_body=body_limit(emulator.max_model_len),
        drain=app.state.drain,
    )

    async def _text_tokens(text: str) -> list[int] | Response:
        """The prompt's tokens, tokenised in a worker thread (a long prompt stalls no other
        stream); a text longer than the context in characters (bytes are at least as many) is
        refused before tokenising, with vLLM's message."""
        mml = emulator.max_model_len
        if len(text) > mml * CHARS_PER_TOKEN:
            return _error(
                f"This model's maximum context length is {mml} tokens. However, your prompt is at "
                f"least {-(-len(text) // CHARS_PER_TOKEN)} tokens ({len(text):,} characters). "
                "Please reduce the length of the messages or completion.",
                400,
            )
        return await asyncio.to_thread(text_tokens, text)

    def _check_model(name: str | None) -> None:
        if name is not None and name != model:
            raise UnknownModel(f"The model `{name}` does not exist.")

    @app.get("/health")
    async def health() -> Response:
        emulator.start()  # the simulated clock starts when the server first answers
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "created": p.now_s(),
                    "owned_by": "servesim",
                    "root": model,
                    "parent": None,
                    "max_model_len": emulator.max_model_len,
                }
            ],
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(emulator.registry), media_type=CONTENT_TYPE_LATEST)

    async def _collect(key: int) -> tuple[int, str]:
        """A non-streaming request's output: (tokens, outcome) once it is done."""
        n_out, outcome = 0, "unfinished"
        async for t in emulator.tokens(key):
            n_out, outcome = t.start + t.count, t.outcome
        return n_out, outcome

    async def _serve(
        request: Request,
        body: p.CompletionRequest | p.ChatCompletionRequest,
        tokens: list[int],
        max_tokens: int | None,
        chat: bool,
    ) -> Response:
        rid = p.new_id("chatcmpl" if chat else "cmpl")
        created = p.now_s()
        try:
            _check_model(body.model)
            received = request.scope.get(RECEIVED)
            key = emulator.submit(rid, tokens, max_tokens, body.priority, received_at=received)
        except Overloaded as e:
            return _error(str(e), 429, "TooManyRequests")
        except UnknownModel as e:
            return _error(str(e), 404, "NotFoundError")
        except BadRequest as e:
            return _error(str(e), 400)
        if emulator.admission_limits:  # vLLM's API server answers 503 before it streams
            refused = await emulator.refusal(key)
            if refused is not None:
                return _error(refused, 503, "Service Unavailable")
        n_prompt = len(tokens)
        if not body.stream:
            answer = await _unless_client_leaves(request, _collect(key))
            if answer is None:  # the client went away: the request was aborted, its KV freed
                return Response(status_code=499)
            n_out, outcome = answer
            text = "".join(output_text(i) for i in range(n_out))
            make = p.chat_response if chat else p.completion_response
            if outcome == "aborted":
                return _error("the request was aborted", 500, "InternalServerError")
            return JSONResponse(make(rid, model, created, text, "length", n_prompt, n_out))
        edge = bool(request.scope.get(EDGE))
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def events() -> AsyncIterator[tuple[bytes, float | None]]:
            """The SSE stream, one message per engine update (the tokens, and with the last the
            finish chunk, usage and [DONE]), each with the time the client is due to see it."""
            if chat:
                role = {"role": "assistant", "content": ""}
                yield _sse(p.chat_chunk(rid, model, created, role, None)), None
            async for t in emulator.tokens(key, paced=not edge):
                text = "".join(output_text(i) for i in range(t.start, t.start + t.count))
                parts = []
                # As vLLM: the finish reason rides on the last token's chunk; an empty chunk
                # carries it only when the end brings no token (an abort).
                finish = "length" if t.done and t.outcome != "aborted" else None
                if t.count or t.done:
                    if chat:
                        delta = {"content": text} if t.count else {}
                        parts.append(_sse(p.chat_chunk(rid, model, created, delta, finish)))
                    else:
                        parts.append(_sse(p.completion_chunk(rid, model, created, text, finish)))
                if t.done:
                    n_out = t.start + t.count
                    if include_usage:
                        parts.append(_sse(p.usage_chunk(rid, model, created, obj, n_prompt, n_out)))
                    parts.append(b"data: [DONE]\n\n")
                yield b"".join(parts), t.due

        return _TimedStream(events(), edge_paces=edge)

    @app.post("/v1/completions")
    async def completions(request: Request, body: p.CompletionRequest) -> Response:
        prompt: Any = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                return _error("prompt: the emulator takes one prompt per request", 400)
            prompt = prompt[0]
        if isinstance(prompt, str):
            counted = await _text_tokens(prompt)
            if isinstance(counted, Response):
                return counted
            tokens = counted
        else:
            tokens = [int(x) for x in prompt]
            if not tokens:
                return _error("prompt: the prompt is empty", 400)
            if any(t < 0 for t in tokens):
                return _error("prompt: token ids must be non-negative", 400)
        return await _serve(request, body, tokens, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, body: p.ChatCompletionRequest) -> Response:
        counted = await _text_tokens(chat_text([(m.role, m.text()) for m in body.messages]))
        if isinstance(counted, Response):
            return counted
        tokens = counted
        max_tokens = body.max_completion_tokens or body.max_tokens
        return await _serve(request, body, tokens, max_tokens, chat=True)

    def _admin_allowed(request: Request) -> bool:
        client = request.client.host if request.client is not None else None
        return is_loopback(client) if client else is_loopback(bind_host)

    @app.post("/admin/fail")
    async def admin_fail(request: Request, body: FailRequest) -> Response:
        if not _admin_allowed(request):
            return _error("the admin endpoints answer loopback clients only", 403, "PermissionDenied")
        try:
            t = emulator.fail(body.replica, body.recover_after_s)
        except BadRequest as e:
            return _error(str(e), 400)
        return JSONResponse({"replica": body.replica, "time_s": t})

    @app.get("/admin/moves")
    async def admin_moves(request: Request) -> Response:
        if not _admin_allowed(request):
            return _error("the admin endpoints answer loopback clients only", 403, "PermissionDenied")
        return JSONResponse({"moves": emulator.moves(), "waiting": emulator.waiting()})

    return app
