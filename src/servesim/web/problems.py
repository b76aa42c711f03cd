"""RFC 9457 problem details for every error the API answers (``application/problem+json``).

One mapping: ``servesim.errors.user_errors()`` -> 422 with ``describe(exc)`` (a trace error adds
its row and field); request validation -> 422 with each field's complaint; HTTP errors keep their
status. Anything else is a bug in servesim: a 500 whose detail says "internal error" (no
traceback to the client; the server logs it, without the request's secrets).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from servesim.errors import InternalError, describe, user_errors
from servesim.services.deployment import SLOError
from servesim.services.traces import TraceError
from servesim.web.security import BodyTooLarge

MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("servesim.web")


class Problem(Exception):
    """An error answered as problem details: ``status``, a ``detail`` sentence and extra members."""

    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra


def problem_response(status: int, detail: str, instance: str | None = None, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def user_error_extra(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, TraceError):
        return {"errors": [{"row": exc.row, "field": exc.field, "reason": exc.reason}]}
    listed = getattr(exc, "errors", None)  # e.g. BenchResultError: one entry per field
    if isinstance(listed, list) and listed:
        return {"errors": listed[:200]}
    return {}


def _routes(routes: Any) -> Any:
    """The app's routes, those of included routers too (FastAPI nests them; their paths are full:
    the routers carry their prefix, and the app includes them without one)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        elif getattr(route, "methods", None) and getattr(route, "path_regex", None) is not None:
            yield route


def allowed_methods(request: Request) -> list[str]:
    """The methods of this request's path (RFC 9110: a 405's ``Allow``). A literal path
    (``/api/traces/generate``) is its own resource, not a value of ``/api/traces/{trace_id}``,
    as OpenAPI matches paths: when one matches, only its routes count."""
    path = request.url.path
    matching = [r for r in _routes(request.app.router.routes) if r.path_regex.match(path)]
    literal = [r for r in matching if "{" not in r.path]
    methods: set[str] = set().union(*(r.methods for r in (literal or matching)))
    order = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return sorted(methods, key=lambda m: (order.index(m) if m in order else len(order), m))


def method_not_allowed(request: Request) -> JSONResponse:
    resp = problem_response(405, "Method Not Allowed", request.url.path)
    resp.headers["Allow"] = ", ".join(allowed_methods(request))
    return resp


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, Problem):
            raise InternalError("invariant broken: isinstance(exc, Problem)")
        return problem_response(exc.status, exc.detail, request.url.path, **exc.extra)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, StarletteHTTPException):
            raise InternalError("invariant broken: isinstance(exc, StarletteHTTPException)")
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).description
        resp = problem_response(exc.status_code, detail, request.url.path)
        for k, v in (exc.headers or {}).items():
            resp.headers[k] = v
        if exc.status_code == 405:  # Starlette names one route's methods; the path may have several
            return method_not_allowed(request)
        return resp

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, RequestValidationError):
            raise InternalError("invariant broken: isinstance(exc, RequestValidationError)")
        if request.method not in allowed_methods(request):  # GET /api/traces/generate: not a trace id
            return method_not_allowed(request)
        errors = []
        parts = []
        for e in exc.errors():
            loc = [str(x) for x in e.get("loc", ())]
            cause = (e.get("ctx") or {}).get("error")
            if isinstance(cause, SLOError):  # the CLI's words, the input named as the API names it
                reason = cause.worded_for(loc[-1] if loc else "slo")
                parts.append(reason)
            else:
                reason = str(e.get("msg", "")).removeprefix("Value error, ")
                parts.append(f"{'.'.join(loc)}: {reason}")
            errors.append({"field": ".".join(loc), "reason": reason})
        detail = "; ".join(parts)[:1000] or "invalid request"
        return problem_response(422, detail, request.url.path, errors=errors)

    async def on_too_large(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(413, str(exc), request.url.path)

    async def on_user_error(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(422, describe(exc)[:1000], request.url.path, **user_error_extra(exc))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug in servesim: no traceback to the client; Starlette re-raises the exception after
        # this response, so the server's log has the traceback (and this line says where).
        log.error("internal error (%s) on %s %s", type(exc).__name__, request.method, request.url.path)
        return problem_response(
            500,
            "internal error: a bug in servesim, not your input; the server's log has the details",
            request.url.path,
        )

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(BodyTooLarge, on_too_large)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    for cls in user_errors():
        if issubclass(cls, Exception):
            app.add_exception_handler(cls, on_user_error)
    app.add_exception_handler(Exception, on_unexpected)
