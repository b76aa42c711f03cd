"""A rescheduling: ``RescheduleRequest`` -> ``RescheduleAnswer``.

``servesim reschedule``, the web's ``POST /api/reschedule`` and the demo's rescheduling step all
build a ``RescheduleRequest`` (the interrupted requests as JSON data, plus what the user overrides)
and call ``reschedule``: the same validation, the same step-time model, the same order and
projection. Its document is ``servesim.report.documents.reschedule_document(answer)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.resched import InterruptedRequest, ProjectedRequest, RescheduleInput, ReschedulePlan
from servesim.resched.models import Policy
from servesim.services.inputs import timing_words

#: The input's fields a request may override (None: the file's, else the input's default).
OVERRIDES = (
    "policy",
    "batch_capacity",
    "block_size",
    "max_num_batched_tokens",
    "cache_survives",
    "step_time_ms",
    "model",
    "gpu",
    "tp",
)


class RescheduleRequest(BaseModel):
    """Interrupted requests to re-admit: the seeds' object (``batch_capacity`` +
    ``interrupted_requests``) or a bare list of requests with ``batch_capacity`` given; every other
    field overrides the input's (None: not given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: Any = Field(description="The rescheduling input as read from JSON (an object or a list).")
    policy: str | None = Field(None, description="Re-admission order (default: the input's, sla-aware).")
    batch_capacity: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    cache_survives: bool | None = None
    step_time_ms: float | None = None
    model: str | None = None
    gpu: str | None = None
    tp: int | None = None

    def overrides(self) -> dict[str, Any]:
        """The fields given, as ``servesim.resched.parse_input`` takes them."""
        return {k: getattr(self, k) for k in OVERRIDES if getattr(self, k) is not None}


@dataclass(frozen=True)
class RescheduleAnswer:
    """The plan, with the validated input that produced it."""

    request: RescheduleRequest
    problem: RescheduleInput
    plan: ReschedulePlan

    @property
    def timed_as(self) -> str:
        """What times the projected steps (``timed as:``)."""
        return timing_words(self.plan.step_time_model)


def parse(request: RescheduleRequest) -> RescheduleInput:
    """The request's input validated with its overrides (one line naming each bad request)."""
    from servesim.resched import parse_input

    return parse_input(request.data, **request.overrides())


def reschedule(request: RescheduleRequest) -> RescheduleAnswer:
    """The answer to "in which order do the interrupted requests come back, and which miss their SLA?"."""
    from servesim.resched import reschedule as plan_reschedule

    problem = parse(request)
    return RescheduleAnswer(request=request, problem=problem, plan=plan_reschedule(problem))


__all__ = [
    "InterruptedRequest",
    "Policy",
    "ProjectedRequest",
    "RescheduleAnswer",
    "RescheduleInput",
    "ReschedulePlan",
    "RescheduleRequest",
    "parse",
    "reschedule",
]
