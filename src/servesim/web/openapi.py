"""The OpenAPI document, made true to what the server answers (schemathesis checks it in CI).

One source for every error response: each operation lists the problem-details responses its
route can raise (``responses(404, 409)`` on the decorator), and :func:`build` adds the ones every
operation can get from the middleware and the handlers (401 token, 403 cross-site on a change,
413 body limit, 421 Host, 422 request validation, 500 a bug in servesim), each as
``application/problem+json`` (RFC 9457) with one ``Problem`` schema. FastAPI's own 422
(``HTTPValidationError`` as ``application/json``) is not what this server sends, so it is replaced.

Bounds that are the server's settings, not the models' (most requests in a trace, most trials in a
tuning job) and the catalog's model and GPU names are written into the document too: a request the
document calls valid is one this server takes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from servesim.web.problems import MEDIA_TYPE
from servesim.web.settings import WebSettings


class ProblemItem(BaseModel):
    """One field's (or one row's) complaint."""

    model_config = ConfigDict(extra="allow")
    field: str | None = Field(None, description="Where: `body.engine.max_num_seqs`, a trace column ...")
    reason: str = Field(description="What is wrong with it.")
    row: int | None = Field(None, description="The file's row (1-based), for a trace upload.")


class Problem(BaseModel):
    """RFC 9457 problem details: every error this server answers."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(description="`about:blank`: the status says what kind of problem it is.")
    title: str = Field(description="The status's phrase.")
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="One sentence for a person: what went wrong and what to do.")
    instance: str | None = Field(None, description="The path the request was sent to.")
    errors: list[ProblemItem] | None = Field(None, description="Each field's or row's complaint.")


#: What each status means here (a route may say it more precisely).
DESCRIPTIONS: dict[int, str] = {
    400: "The body is not parseable JSON",
    401: "This server needs its token (`Authorization: Bearer <token>` or the cookie)",
    403: "A cross-site request may not change anything (its `Origin` or `Sec-Fetch-Site`)",
    404: "No such resource",
    409: "The resource is not in a state that allows this (a run without a result, a job that ended)",
    413: "The request body (or the trace it holds) is over this server's limit",
    415: "Not a file type this operation reads",
    421: "The `Host` is not a name this server answers to (DNS rebinding guard)",
    422: "Invalid request: each field's complaint is listed",
    429: "Too many jobs waiting for a worker",
    500: "Internal error: a bug in servesim, not your input (the server's log has the details)",
}
REF = {"$ref": "#/components/schemas/Problem"}
#: Every operation can get these (middleware and handlers, before or around any route).
EVERY_OPERATION = (401, 413, 421, 422, 500)
#: Requests that change something can also be refused as cross-site (the CSRF guard).
CHANGES = frozenset({"post", "put", "patch", "delete"})


def problem_response(status: int, description: str | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {MEDIA_TYPE: {"schema": REF}}
    if status == 401:  # a browser (Accept: text/html) gets a page saying how to give the token
        content["text/html"] = {"schema": {"type": "string"}}
    return {"description": description or DESCRIPTIONS[status], "content": content}


def responses(*statuses: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """The problem responses a route can raise, for its decorator: ``responses(404, 409)``;
    a more precise description as ``responses(404, s415="Not a JSON file")``."""
    out: dict[int | str, dict[str, Any]] = {s: problem_response(s) for s in statuses}
    for key, text in described.items():
        out[int(key.removeprefix("s"))] = problem_response(int(key.removeprefix("s")), text)
    return out


def _set_bounds(schemas: dict[str, Any], paths: dict[str, Any], settings: WebSettings) -> None:
    from servesim.services.perf import builtin_profile_names, load_catalog

    cat = load_catalog()
    from servesim.web.schemas import WEB_MAX_REPLICAS

    dep = schemas["DeploymentSpec"]["properties"]
    for key, names in (("model", cat.models), ("gpu", cat.gpus)):  # catalog names, never a path
        for option in dep[key].get("anyOf", [dep[key]]):
            if option.get("type") == "string":
                option["enum"] = sorted(names)
    dep["replicas"]["maximum"] = WEB_MAX_REPLICAS  # this server's bound (the CLI's is higher)
    profile = dep["profile"]
    for option in profile.get("anyOf", [profile]):
        if option.get("type") == "string":
            option["enum"] = builtin_profile_names()  # a shipped profile, never a file on the server
    schemas["GenerateBody"]["properties"]["num_requests"]["maximum"] = settings.max_requests_per_trace
    schemas["TuneBody"]["properties"]["n_trials"]["maximum"] = settings.max_trials
    for param in paths["/api/defaults"]["get"]["parameters"]:
        if param["name"] == "gpu":
            param["schema"]["enum"] = sorted(cat.gpus)


def build(app: FastAPI, settings: WebSettings) -> dict[str, Any]:
    """The document of ``app`` (cached on it, as FastAPI does)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(Problem.model_json_schema(ref_template="#/components/schemas/{model}")["$defs"])
    schemas["Problem"] = {
        k: v
        for k, v in Problem.model_json_schema(ref_template="#/components/schemas/{model}").items()
        if k != "$defs"
    }
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    _set_bounds(schemas, doc["paths"], settings)
    for ops in doc.get("paths", {}).values():
        for method, op in ops.items():
            out = op.setdefault("responses", {})
            for code, resp in list(out.items()):
                if code.isdigit() and int(code) >= 400:  # every error is a problem document
                    resp["content"] = problem_response(int(code))["content"]
            body = (400,) if "requestBody" in op else ()  # JSON that does not parse
            for code in (*EVERY_OPERATION, *body, *((403,) if method in CHANGES else ())):
                out.setdefault(str(code), problem_response(code))
    app.openapi_schema = doc
    return doc
