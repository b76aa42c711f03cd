"""What an advisor may answer, and the checks that keep an answer actionable.

Each task has one output type. Validators reject what an operator could not apply: unknown or
missing ids (every valid job exactly once), values outside what vLLM accepts, and answers that
contradict hard constraints (migrating a job that has no KV checkpoint). Constraints that depend
on the question (which ids are valid, ``max_model_len``) come in as pydantic's validation context,
so the same check runs on Claude's structured output and on the rules advisor's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from servesim.errors import InputError

Task = Literal["batching", "reschedule", "fallback"]
AdvisorName = Literal["claude", "dspy", "rules"]

_TEXT = 400  # characters per rationale string: explanations, not essays


def _ctx(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


class BatchingAdvice(BaseModel):
    """Scheduler settings to run (vLLM flag names) and why."""

    model_config = ConfigDict(extra="forbid")
    max_num_seqs: int = Field(ge=1, le=4096)
    max_num_batched_tokens: int = Field(ge=1, le=1_048_576)
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int = Field(0, ge=0)
    queue_timeout_s: float | None = Field(None, gt=0, le=3600)
    replicas: int = Field(1, ge=1, le=256)
    rationale: list[str] = Field(min_length=1, max_length=8)
    expected_effect: str = Field(min_length=1, max_length=_TEXT)

    @model_validator(mode="after")
    def _actionable(self, info: ValidationInfo) -> BatchingAdvice:
        problems = batching_problems(self, _ctx(info).get("max_model_len"))
        if problems:
            raise InputError("; ".join(problems))
        if any(len(r) > _TEXT for r in self.rationale):
            raise InputError(f"each rationale string must be at most {_TEXT} characters")
        return self


def batching_problems(a: BatchingAdvice, max_model_len: int | None) -> list[str]:
    """vLLM's own start-up rules for these flags (it refuses to start otherwise)."""
    out = []
    if a.max_num_batched_tokens < a.max_num_seqs:
        out.append(
            f"max_num_batched_tokens ({a.max_num_batched_tokens}) must be >= max_num_seqs ({a.max_num_seqs})"
        )
    if max_model_len is not None and a.long_prefill_token_threshold > max_model_len:
        out.append(
            f"long_prefill_token_threshold ({a.long_prefill_token_threshold}) cannot be greater than "
            f"max_model_len ({max_model_len})"
        )
    if (
        max_model_len is not None
        and not a.enable_chunked_prefill
        and a.max_num_batched_tokens < max_model_len
    ):
        out.append(
            f"with chunked prefill off, max_num_batched_tokens ({a.max_num_batched_tokens}) must be >= "
            f"max_model_len ({max_model_len})"
        )
    return out


class OrderReason(BaseModel):
    model_config = ConfigDict(extra="forbid")
    req_id: str
    reason: str = Field(min_length=1, max_length=_TEXT)


class RescheduleAdvice(BaseModel):
    """The re-insertion order of interrupted requests, with a reason for each."""

    model_config = ConfigDict(extra="forbid")
    order: list[str] = Field(description="Every valid req_id exactly once, first admitted first.")
    reasons: list[OrderReason] = Field(default_factory=list)

    @model_validator(mode="after")
    def _actionable(self, info: ValidationInfo) -> RescheduleAdvice:
        valid = _ctx(info).get("valid_ids")
        if valid is not None:
            check_exactly_once(self.order, list(valid), "req_id")
        if len(set(self.order)) != len(self.order):
            raise InputError("order lists a req_id twice")
        unknown = {r.req_id for r in self.reasons} - set(self.order)
        if unknown:
            raise InputError(f"reasons name requests not in the order: {sorted(unknown)}")
        return self


class JobStrategy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: str
    strategy: Literal["MIGRATE_STATE", "COLD_RESTART"]
    reason: str = Field(min_length=1, max_length=_TEXT)


class FallbackAdvice(BaseModel):
    """For every valid pending job: migrate its KV or restart it cold, and why."""

    model_config = ConfigDict(extra="forbid")
    decisions: list[JobStrategy]

    @model_validator(mode="after")
    def _actionable(self, info: ValidationInfo) -> FallbackAdvice:
        ctx = _ctx(info)
        ids = [d.job_id for d in self.decisions]
        valid = ctx.get("valid_ids")
        if valid is not None:
            check_exactly_once(ids, list(valid), "job_id")
        elif len(set(ids)) != len(ids):
            raise InputError("a job_id is decided twice")
        checkpointed = ctx.get("checkpointed_ids")
        if checkpointed is not None:
            bad = [
                d.job_id
                for d in self.decisions
                if d.strategy == "MIGRATE_STATE" and d.job_id not in checkpointed
            ]
            if bad:
                raise InputError(f"MIGRATE_STATE needs a KV checkpoint, which these jobs do not have: {bad}")
        return self


def check_exactly_once(given: list[str], valid: list[str], what: str) -> None:
    unknown = sorted(set(given) - set(valid))
    missing = sorted(set(valid) - set(given))
    dup = sorted({x for x in given if given.count(x) > 1})
    problems = []
    if unknown:
        problems.append(f"unknown {what}s {unknown}")
    if missing:
        problems.append(f"missing {what}s {missing}")
    if dup:
        problems.append(f"{what}s listed more than once {dup}")
    if problems:
        raise InputError("every valid " + what + " must appear exactly once: " + "; ".join(problems))


Advice = BatchingAdvice | RescheduleAdvice | FallbackAdvice
OUTPUT_TYPES: dict[Task, type[BaseModel]] = {
    "batching": BatchingAdvice,
    "reschedule": RescheduleAdvice,
    "fallback": FallbackAdvice,
}


class ActionLogEntry(BaseModel):
    """One advisor call (never the API key, never the prompt's data: sizes only)."""

    task: Task
    advisor: AdvisorName
    round: int
    model: str | None = None
    latency_ms: float | None = Field(
        description="Wall time of a Claude call; None for the rules advisor (untimed, so reproducible)."
    )
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    prompt_chars: int = 0
    outcome: Literal["ok", "invalid_output", "api_error", "timeout"]
    detail: str | None = None


class Comparison(BaseModel):
    """One candidate re-checked by the simulator (lower is better unless named otherwise)."""

    label: Literal["current", "proposed", "optimizer_best"]
    metrics: dict[str, float | int | None]


#: The simulator's word on a proposal, most severe first (views word them; ``accepted`` only for a
#: real change that meets the SLO and improves the objective).
VerdictWord = Literal["rejected_slo", "rejected", "no_change", "no_gain", "accepted"]


class Verification(BaseModel):
    """The proposal re-simulated next to the current setting and the optimizer's best."""

    accepted: bool = Field(description="Not rejected: the answer may be used (the advisor loop stops).")
    verdict: VerdictWord = Field(
        description="rejected_slo: misses the SLO; rejected: worse; no_change: the current setting; "
        "no_gain: a change within re-simulation noise; accepted: a change that meets the SLO and improves."
    )
    reason: str
    candidates: list[Comparison]

    @model_validator(mode="before")
    @classmethod
    def _verdict_of_old_results(cls, data: Any) -> Any:
        """Results written before ``verdict`` existed: the word their ``accepted`` meant."""
        if isinstance(data, dict) and "verdict" not in data and "accepted" in data:
            return {**data, "verdict": "accepted" if data["accepted"] else "rejected"}
        return data

    @classmethod
    def judged(cls, verdict: VerdictWord, reason: str, candidates: list[Comparison]) -> Verification:
        return cls(
            accepted=verdict not in ("rejected", "rejected_slo"),
            verdict=verdict,
            reason=reason,
            candidates=candidates,
        )


class RejectedProposal(BaseModel):
    """A proposal the simulator rejected, with the numbers that rejected it."""

    advice: BatchingAdvice | RescheduleAdvice | FallbackAdvice
    verification: Verification


class AdviceResult(BaseModel):
    """An advisor's answer, checked: who answered, what, and what the simulator says of it."""

    task: Task
    advisor: AdvisorName = Field(description="Which advisor produced the accepted answer.")
    program: str = Field(
        "rules",
        description="Which program answered: 'dspy compiled (..., validation score X)', 'dspy uncompiled', "
        "'claude (pydantic-ai)' or 'rules'.",
    )
    score: float | None = Field(
        None,
        description="The simulator's metric of this answer (0..1: 0.5 = the baseline, 1 = at least as good "
        "as the better of the baseline and the rules advisor; metric.py).",
    )
    notice: str | None = Field(
        None, description="E.g. why Claude's answer was replaced by the rules advisor."
    )
    advice: BatchingAdvice | RescheduleAdvice | FallbackAdvice
    verification: Verification
    rounds: int
    action_log: list[ActionLogEntry]
    rejected: list[RejectedProposal] = Field(default_factory=list, description="Proposals labelled rejected.")
    requires_human_review: Literal[True] = True
