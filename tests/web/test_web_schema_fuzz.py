"""Schemathesis over the OpenAPI document: every operation answers what the document says.

``case.call_and_validate()`` runs schemathesis' default checks on every operation (no 5xx, status
codes, content types, response schemas and headers, schema-valid requests accepted, invalid ones
rejected, 405 with the right ``Allow``, ...) over its examples, coverage and fuzzing phases.

The server is the one a user starts on loopback (no ``--allowed-host``, no token): requests carry
``Host: 127.0.0.1:8000`` and, on changes, the ``Origin`` a page of the workbench itself sends.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, settings
from pydantic import BaseModel, TypeAdapter, ValidationError
from schemathesis.checks import CheckContext, positive_data_acceptance

from servesim.web.app import create_app
from servesim.web.problems import _routes
from servesim.web.settings import WebSettings

# Small bounds, so that a generated body cannot make the run long (a 2-million-request trace).
APP = create_app(
    WebSettings(
        data_dir=Path(tempfile.mkdtemp(prefix="servesim-fuzz-")), max_requests_per_trace=500, max_trials=5
    )
)
ORIGIN = "http://127.0.0.1:8000"
schema = schemathesis.openapi.from_asgi("/api/openapi.json", APP, headers={"Host": "127.0.0.1:8000"})
#: Each operation's JSON body model (what FastAPI validates the body with).
BODY_MODELS: dict[tuple[str, str], Any] = {
    (method, route.path): route.body_field.field_info.annotation
    for route in _routes(APP.router.routes)
    if isinstance(route, APIRoute) and route.body_field is not None
    for method in route.methods
}
#: Pydantic error types of a rule across fields (a model validator): JSON Schema cannot state them.
CROSS_FIELD_ERRORS = frozenset({"value_error", "assertion_error"})
#: Uploads of a file's bytes: whether the bytes are a trace (a vllm bench result) is the reader's
#: to say, row by row (a 422 listing them); the document can only say "bytes".
FILE_UPLOADS = frozenset({("POST", "/api/traces"), ("POST", "/api/bench")})


def _breaks_only_cross_field_rules(case: schemathesis.Case) -> bool:
    """Whether the body passes every rule the document can state, field by field: either the
    body model takes it (the server refused it on a rule of the catalog or of its own state: a
    max_model_len over this model's KV pool on this GPU, the Claude advisor without a key, ...),
    or the model refuses it only in a validator across fields."""
    model = BODY_MODELS.get((case.method.upper(), case.path))
    if model is None or not isinstance(case.body, dict) or not issubclass(model, BaseModel):
        return False
    try:
        TypeAdapter(model).validate_python(case.body)
    except ValidationError as exc:
        return all(e["type"] in CROSS_FIELD_ERRORS for e in exc.errors())
    return True


def positive_data_acceptance_but_cross_field_rules(
    ctx: CheckContext, response: Any, case: schemathesis.Case
) -> bool | None:
    """Schemathesis' positive_data_acceptance, except a 422 for a rule the document cannot state
    (JSON Schema has no "max_model_len fits the KV blocks this model gets on this GPU"): a
    request-shape the document calls valid must still be accepted whenever every stated rule
    holds, which ``_breaks_only_cross_field_rules`` checks with the server's own body model."""
    if response.status_code == 422 and _breaks_only_cross_field_rules(case):
        return None
    if response.status_code == 422 and (case.method.upper(), case.path) in FILE_UPLOADS:
        return None  # the file's content is not a trace: the reader's row errors, not the schema's
    return positive_data_acceptance(ctx, response, case)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_operation_answers_what_the_document_says(case: schemathesis.Case) -> None:
    headers = {"Origin": ORIGIN} if case.method.upper() in ("POST", "PUT", "PATCH", "DELETE") else {}
    case.call_and_validate(
        base_url=ORIGIN,
        headers=headers,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[positive_data_acceptance_but_cross_field_rules],
    )
