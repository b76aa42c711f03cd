"""Boundary objects of the rescheduling analysis: what goes in, what comes out, and input errors.

The input keeps the seeds' shape::

    {"batch_capacity": 4,
     "interrupted_requests": [{"req_id": "req-101", "tokens_processed": 512,
                               "tokens_remaining": 16, "sla_budget_ms": 150}, ...]}

plus optional context (block size, whether KV blocks survived, token budget, a constant step
time, policy, aging). Errors name the request they are about (``request 'req-7'
(interrupted_requests[3]): tokens_processed: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servesim.bounds import (
    MAX_BLOCK_SIZE,
    MAX_REMAINING,
    MAX_RESCHEDULE_REQUESTS,
    MAX_SEQS,
    MAX_TOKENS,
    MAX_TOTAL_REMAINING,
)
from servesim.errors import InputError, reject_bool, shown
from servesim.perf.setup import DEFAULT_GPU, DEFAULT_MODEL  # one default deployment for every command

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM 0.33's default token budget of one step


#: The stand-alone default context: the product's default deployment (as in ``servesim demo``).


#: Bounds that keep a projection's step loop short (docs/resched.md, "Input bounds"): one
#: request's remaining output, and all of them together (the loop runs one step per token).
MAX_REQUESTS = MAX_RESCHEDULE_REQUESTS


class RescheduleInputError(InputError):
    """The input is not a valid rescheduling problem; the message names the offending request."""


class Policy(StrEnum):
    """Order in which interrupted requests are re-admitted (see docs/resched.md)."""

    fcfs = "fcfs"
    priority = "priority"
    least_slack_first = "least-slack-first"
    shortest_remaining = "shortest-remaining"
    sla_aware = "sla-aware"

    @classmethod
    def _missing_(cls, value: object) -> Policy | None:
        if isinstance(value, str):
            key = value.strip().lower().replace("_", "-")
            for member in cls:
                if member.value == key:
                    return member
        return None


class InterruptedRequest(BaseModel):
    """One request that was interrupted (preempted) and waits to be re-admitted."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
    _no_bool = field_validator(
        "tokens_processed",
        "tokens_remaining",
        "prompt_len",
        "preemptions",
        "cached_tokens",
        "priority",
        mode="before",
    )(lambda v: reject_bool(v))

    req_id: str = Field(min_length=1, max_length=1000, description="Unique id of the request.")
    tokens_processed: int = Field(
        ge=0,
        le=MAX_TOKENS,
        description="Tokens whose KV was computed when it was interrupted (num_computed_tokens).",
    )
    tokens_remaining: int = Field(
        ge=1,
        le=MAX_REMAINING,
        description="Output tokens still to generate (>= 1: a request with none left is finished).",
    )
    sla_budget_ms: float = Field(
        ge=0, le=1e12, allow_inf_nan=False, description="Time from now within which it must complete, in ms."
    )
    priority: int = Field(
        0, ge=-(2**31), le=2**31 - 1, description="vLLM priority: lower values are served first."
    )
    prompt_len: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Prompt length; when larger than tokens_processed the request was interrupted during "
        "its prefill. Without it the request is taken to be decoding.",
    )
    preemptions: int = Field(
        0, ge=0, le=1 << 20, description="Times it has been preempted so far (drives aging)."
    )
    waited_ms: float = Field(
        0.0, ge=0, le=1e12, allow_inf_nan=False, description="How long it has already waited (aging)."
    )
    cached_tokens: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="Override: of its first tokens, how many still have their KV blocks cached (full blocks "
        "count; the rest of the processed tokens is recomputed). Default: cache_survives.",
    )

    @model_validator(mode="after")
    def _check(self) -> InterruptedRequest:
        if self.cached_tokens is not None and self.cached_tokens > self.tokens_processed:
            raise InputError(
                f"cached_tokens ({self.cached_tokens}) exceeds tokens_processed ({self.tokens_processed})"
            )
        return self

    @property
    def prefilling(self) -> bool:
        """Interrupted before its prompt was fully computed."""
        return self.prompt_len is not None and self.tokens_processed < self.prompt_len

    @property
    def num_tokens(self) -> int:
        """vLLM's ``num_tokens`` (prompt + outputs so far) at interruption: the prompt while
        prefilling, else the processed tokens plus the sampled token not yet in the KV cache."""
        if self.prompt_len is not None and self.tokens_processed < self.prompt_len:
            return self.prompt_len
        return self.tokens_processed + 1


class RescheduleInput(BaseModel):
    """A rescheduling problem: the free batch slots, the interrupted requests, and the context."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bool = field_validator("batch_capacity", "block_size", "max_num_batched_tokens", "tp", mode="before")(
        lambda v: reject_bool(v)
    )

    batch_capacity: int = Field(
        ge=1, le=MAX_SEQS, description="Most requests running at once (vLLM max_num_seqs)."
    )
    interrupted_requests: list[InterruptedRequest] = Field(
        max_length=MAX_REQUESTS, description="The requests to re-admit."
    )
    block_size: int = Field(16, ge=1, le=MAX_BLOCK_SIZE, description="Tokens per KV block.")
    cache_survives: bool = Field(
        True,
        description="Assume the interrupted requests' KV blocks are all still cached (the stand-alone "
        "assumption); false: assume all evicted. A request's cached_tokens overrides it.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Token budget of one step; default max(2048, batch_capacity). Must be >= batch_capacity.",
    )
    step_time_ms: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Every step takes this long (overrides model/gpu/tp); default: the roofline model "
        "of model x gpu x tp.",
    )
    model: str = Field(
        DEFAULT_MODEL, min_length=1, description="Model (servesim perf catalog name) that times the steps."
    )
    gpu: str = Field(DEFAULT_GPU, min_length=1, description="GPU (servesim perf catalog name).")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree.")
    policy: Policy = Field(Policy.sla_aware, description="Re-admission order.")
    aging_wait_ms: float | None = Field(
        5000.0,
        ge=0,
        allow_inf_nan=False,
        description="A request that has waited this long goes first (oldest first); null: never.",
    )
    aging_preemptions: int | None = Field(
        3, ge=1, description="A request preempted this many times goes first too; null: never."
    )

    @model_validator(mode="after")
    def _check(self) -> RescheduleInput:
        total = sum(r.tokens_remaining for r in self.interrupted_requests)
        if total > MAX_TOTAL_REMAINING:
            raise InputError(
                f"the interrupted requests have {total:,} tokens_remaining in all; a projection handles at "
                f"most {MAX_TOTAL_REMAINING:,} (one engine step per token; no real batch is that long)"
            )
        seen: dict[str, int] = {}
        for i, r in enumerate(self.interrupted_requests):
            if r.req_id in seen:
                raise InputError(
                    f"duplicate req_id {shown(r.req_id)} at interrupted_requests[{seen[r.req_id]}] and [{i}]"
                )
            seen[r.req_id] = i
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.batch_capacity:
            raise InputError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= batch_capacity "
                f"({self.batch_capacity}), as vLLM requires of max_num_seqs"
            )
        return self

    @property
    def token_budget(self) -> int:
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return max(DEFAULT_MAX_NUM_BATCHED_TOKENS, self.batch_capacity)


class ProjectedRequest(BaseModel):
    """One request's projected re-admission: when it starts, when it completes, against its SLA."""

    model_config = ConfigDict(frozen=True)

    req_id: str
    position: int = Field(description="0-based place in rescheduled_queue (= admission order).")
    tokens_processed: int
    tokens_remaining: int
    reused_tokens: int = Field(description="Processed tokens recovered from the prefix cache.")
    recomputed_tokens: int = Field(
        description="Processed tokens computed again (reused + recomputed = processed)."
    )
    admitted_ms: float = Field(description="When it gets a batch slot, from now.")
    completion_ms: float = Field(description="When its last remaining token is produced, from now.")
    sla_budget_ms: float
    slack_ms: float = Field(description="sla_budget_ms - completion_ms; negative: projected to violate.")
    violates: bool = Field(description="slack_ms < 0.")
    solo_slack_ms: float = Field(
        description="Slack if it were started now alone in the batch (the least-slack key)."
    )
    aged: bool = Field(description="Moved to the front by aging (waited or preempted enough).")


class ReschedulePlan(BaseModel):
    """The answer: the re-admission order, cache savings, and per-request projections."""

    model_config = ConfigDict(frozen=True)

    rescheduled_queue: list[str] = Field(description="req_ids in re-admission order.")
    prefix_cache_savings_tokens: int = Field(description="Σ reused tokens: processed tokens not recomputed.")
    recomputed_tokens: int = Field(description="Σ processed tokens that must be computed again.")
    sla_violation_projected: bool = Field(description="Some request is projected to miss its SLA.")
    num_violations: int
    makespan_ms: float = Field(description="When the last request completes, from now.")
    requests: list[ProjectedRequest] = Field(description="Per request, in rescheduled_queue order.")
    policy: Policy
    batch_capacity: int
    block_size: int
    cache_survives: bool
    max_num_batched_tokens: int
    step_time_model: dict[str, Any]
    assumptions: list[str] = Field(description="What the projection takes for granted.")


def parse_input(data: Any, **overrides: Any) -> RescheduleInput:
    """Validate a rescheduling problem from JSON-like data; ``overrides`` (not None) win.

    ``data`` is the seeds' object, or a bare list of requests (then ``batch_capacity`` must come
    from ``overrides``). Raises ``RescheduleInputError`` with one line naming each bad request.
    """
    if isinstance(data, RescheduleInput):
        raw: dict[str, Any] = data.model_dump(exclude_unset=True)
    elif isinstance(data, Mapping):
        raw = dict(data)
    elif isinstance(data, Sequence) and not isinstance(data, str | bytes):
        raw = {"interrupted_requests": list(data)}
        if overrides.get("batch_capacity") is None:
            raise RescheduleInputError("batch_capacity: required with a bare list of requests")
    else:
        raise RescheduleInputError(
            "expected an object with batch_capacity and interrupted_requests, or a list of requests "
            f"(got {type(data).__name__})"
        )
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RescheduleInput.model_validate(raw)
    except ValidationError as exc:
        message = describe_errors(exc, raw)
        dup = _duplicate_ids(raw.get("interrupted_requests"))
        if dup and "duplicate req_id" not in message:
            message += f"; {dup}"
        raise RescheduleInputError(message) from None


def _duplicate_ids(reqs: Any) -> str:
    """The first repeated req_id of raw request data, in words ('' if none), so that a duplicate
    is reported together with field errors (the model's own check runs only on valid fields)."""
    if not isinstance(reqs, list):
        return ""
    seen: dict[str, int] = {}
    for i, r in enumerate(reqs):
        rid = r.get("req_id") if isinstance(r, Mapping) else None
        if rid is None:
            continue
        key = str(rid)
        if key in seen:
            return f"duplicate req_id {shown(key)} at interrupted_requests[{seen[key]}] and [{i}]"
        seen[key] = i
    return ""


def describe_errors(exc: ValidationError, raw: Mapping[str, Any]) -> str:
    """One line per error, naming the request by its req_id (and place) where there is one."""
    reqs = raw.get("interrupted_requests")
    parts: list[str] = []
    for err in exc.errors():
        loc = err["loc"]
        msg = str(err["msg"]).removeprefix("Value error, ")
        where = ".".join(map(str, loc))
        if len(loc) >= 2 and loc[0] == "interrupted_requests" and isinstance(loc[1], int):
            i = loc[1]
            rid = None
            if isinstance(reqs, list) and i < len(reqs) and isinstance(reqs[i], Mapping):
                rid = reqs[i].get("req_id")
            who = f"request {shown(str(rid))}" if rid not in (None, "") else "request without req_id"
            field = ".".join(map(str, loc[2:]))
            where = f"{who} (interrupted_requests[{i}])" + (f": {field}" if field else "")
        if err["type"] == "missing":
            msg = "required field missing"
        elif err["type"] != "value_error" and not isinstance(err.get("input"), dict | list):
            msg = f"{msg} (got {shown(err.get('input'))})"
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
