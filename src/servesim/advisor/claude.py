"""The Claude advisor: a pydantic-ai agent with Anthropic's model and a typed answer per task.

Claude sees a compact, normalised summary of the case (``cases.py``; bounded in size, never a
whole trace) and must answer in the task's output type; an answer that fails its validators is
sent back for correction (``output_retries`` times). HTTP 429 / 5xx and timeouts are retried by
Anthropic's client with exponential backoff (``max_retries``); a whole call is bounded by
``timeout_s``. Every call is logged with its latency and token usage — never with the key, which
is read from ``ANTHROPIC_API_KEY`` (or given), kept only inside the client, and scrubbed from any
error text that reaches a log or a notice.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from servesim.advisor.cases import Case
from servesim.advisor.models import (
    OUTPUT_TYPES,
    ActionLogEntry,
    Advice,
    BatchingAdvice,
    FallbackAdvice,
    RescheduleAdvice,
    Task,
)
from servesim.errors import InputError

if TYPE_CHECKING:  # Anthropic's client and pydantic-ai: 1.5-2 CPU-s of imports, for a call with a key only
    import httpx2
    from pydantic_ai.models import Model

DEFAULT_MODEL = "claude-sonnet-5-5"

_COMMON = (
    "You advise operators of vLLM deployments. You get a JSON summary of a simulated case. Answer only "
    "with the requested structure. Every number you give must be one an operator can apply; explain each "
    "choice in one short sentence that cites the numbers it rests on. Your answer will be re-simulated; "
    "answers that make the objective worse are rejected."
)
INSTRUCTIONS: dict[Task, str] = {
    "batching": _COMMON
    + " Task: choose vLLM scheduler flags (max_num_seqs, max_num_batched_tokens, enable_chunked_prefill, "
    "long_prefill_token_threshold, queue_timeout_s) and the replica count for this traffic so that as many "
    "requests as possible meet the SLO (goodput), with as few GPUs as that allows. vLLM requires "
    "max_num_batched_tokens >= max_num_seqs, and with chunked prefill off max_num_batched_tokens >= "
    "max_model_len. Give up to 8 rationale strings and the expected effect.",
    "reschedule": _COMMON
    + " Task: order the interrupted requests for re-admission (first admitted first) so that as few as "
    "possible miss their SLA budget; requests that cannot make it anyway should not delay those that can, "
    "and none may be postponed indefinitely. List every req_id exactly once, with a reason for each.",
    "fallback": _COMMON
    + " Task: for every job of the lost node choose MIGRATE_STATE (move its KV checkpoint; only for jobs "
    "whose migrate_ms is not null) or COLD_RESTART (recompute it), so that the jobs are back as soon as "
    "possible. Decide every job_id exactly once, with a reason citing its costs.",
}


class ClaudeAdvisor:
    """Asks Claude for one task's answer; returns it (or None) and the call's log entry."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        output_retries: int = 2,
        http_client: httpx2.AsyncClient | None = None,
        model: Model | None = None,
    ) -> None:
        self.model_name = model_name
        self.timeout_s = timeout_s
        self.output_retries = output_retries
        self._secret = api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
        if model is not None:  # tests: pydantic-ai's TestModel / FunctionModel
            self._model: Model = model
        else:
            if not self._secret:
                raise InputError("the Claude advisor needs ANTHROPIC_API_KEY (or use --advisor rules)")
            from anthropic import AsyncAnthropic
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            client = AsyncAnthropic(
                api_key=self._secret, timeout=timeout_s, max_retries=max_retries, http_client=http_client
            )
            self._model = AnthropicModel(model_name, provider=AnthropicProvider(anthropic_client=client))

    @staticmethod
    def available() -> bool:
        return bool(os.environ.get("ANTHROPIC_API_KEY"))

    def redact(self, text: str) -> str:
        """Remove the key from any text that may be shown or logged."""
        return text.replace(self._secret, "***") if self._secret else text

    def propose(
        self, case: Case, feedback: str | None, round_no: int
    ) -> tuple[Advice | None, ActionLogEntry]:
        from pydantic_ai import Agent
        from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, RunTimedOut, UnexpectedModelBehavior

        task = case.task
        prompt = case.summary()
        if feedback:
            prompt += "\n\nFeedback on your previous answer (re-simulated): " + feedback
        agent: Agent[None, Any] = Agent(
            self._model,
            output_type=OUTPUT_TYPES[task],
            instructions=INSTRUCTIONS[task],
            retries=self.output_retries,
            validation_context=case.validation_context(),
        )
        t0 = time.perf_counter()
        outcome = "ok"
        detail: str | None = None
        answer: Advice | None = None
        usage: Any = None
        try:
            result = agent.run_sync(prompt, model_settings={"max_tokens": 2048}, timeout=self.timeout_s)
            out = result.output
            answer = out if isinstance(out, BatchingAdvice | RescheduleAdvice | FallbackAdvice) else None
            usage = result.usage
        except (RunTimedOut, TimeoutError) as exc:
            outcome, detail = "timeout", f"{type(exc).__name__}: {exc}"
        except ModelHTTPError as exc:
            outcome, detail = "api_error", f"HTTP {exc.status_code} after retries"
        except ModelAPIError as exc:
            outcome, detail = "api_error", f"{type(exc).__name__}: {exc}"
        except UnexpectedModelBehavior as exc:
            outcome, detail = (
                "invalid_output",
                f"no valid answer after {self.output_retries} corrections: {exc}",
            )
        latency = (time.perf_counter() - t0) * 1e3
        entry = ActionLogEntry(
            task=task,
            advisor="claude",
            round=round_no,
            model=self.model_name,
            latency_ms=round(latency, 1),
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            requests=int(getattr(usage, "requests", 0) or 0),
            prompt_chars=len(prompt),
            outcome=outcome,
            detail=None if detail is None else self.redact(" ".join(detail.split()))[:500],
        )
        return answer, entry
