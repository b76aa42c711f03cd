"""The OpenAI-compatible bodies vLLM's server accepts and the JSON it answers, as vLLM shapes them
(vllm/entrypoints/openai/protocol.py): completion and chat chunks, the final usage chunk, errors.

Only what the emulator honours is validated strictly (``max_tokens``, ``stream``,
``stream_options.include_usage``, ``ignore_eos``, ``priority``, ``n``); sampling parameters are
accepted and ignored (no model runs), as a gateway's requests carry them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    priority: int = Field(0, ge=-(2**63), le=2**63 - 1)  # vLLM's int64: beyond is a 400, not a 500
    n: Literal[1] = 1  # one choice per request (the emulator schedules one sequence)
    user: str | None = None


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)  # vLLM's (and OpenAI's) completions default


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def _envelope(
    rid: str, obj: str, model: str, created: int, choices: list[dict[str, Any]], usage_: dict[str, int] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}
    if usage_ is not None:
        out["usage"] = usage_
    return out


def _choice(key: str, value: Any, finish_reason: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "index": 0,
        key: value,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        **extra,
    }


def completion_chunk(
    rid: str, model: str, created: int, text: str, finish_reason: str | None
) -> dict[str, Any]:
    return _envelope(rid, "text_completion", model, created, [_choice("text", text, finish_reason)], None)


def chat_chunk(
    rid: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None
) -> dict[str, Any]:
    return _envelope(
        rid, "chat.completion.chunk", model, created, [_choice("delta", delta, finish_reason)], None
    )


def usage_chunk(
    rid: str, model: str, created: int, obj: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
    return _envelope(rid, obj, model, created, [], usage(prompt_tokens, completion_tokens))


def completion_response(
    rid: str, model: str, created: int, text: str, finish_reason: str, prompt_tokens: int, n_out: int
) -> dict[str, Any]:
    choice = _choice("text", text, finish_reason, prompt_logprobs=None)
    return _envelope(rid, "text_completion", model, created, [choice], usage(prompt_tokens, n_out))


def chat_response(
    rid: str, model: str, created: int, text: str, finish_reason: str, prompt_tokens: int, n_out: int
) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "tool_calls": []}
    choice = _choice("message", message, finish_reason)
    return _envelope(rid, "chat.completion", model, created, [choice], usage(prompt_tokens, n_out))


def error_body(
    message: str, code: int, kind: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    """vLLM's ErrorResponse (the OpenAI shape the official client parses)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def now_s() -> int:
    return int(time.time())
