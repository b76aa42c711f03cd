"""A fake Anthropic Messages API on httpx2's MockTransport: streamed tool calls, errors, stalls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx2

FAKE_KEY = "sk-ant-test-NEVER-PRINT-ME-0123456789"


def tool_call_stream(args: dict[str, Any], model: str, tool: str = "final_result") -> bytes:
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 321, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_test", "name": tool, "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 45},
        },
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def tool_call_message(args: dict[str, Any], model: str, tool: str | None = "final_result") -> dict[str, Any]:
    """A complete Messages API reply: a tool call, or (``tool=None``: native structured output) text."""
    if tool is None:
        content = [{"type": "text", "text": json.dumps(args)}]
    else:
        content = [{"type": "tool_use", "id": "toolu_test", "name": tool, "input": args}]
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 321, "output_tokens": 45},
    }


class FakeAnthropic:
    """Plays a script: each item answers one HTTP request (an int status, a dict of tool args,
    or "stall" to hang). Records every request (headers and body) for inspection."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append((dict(request.headers), body))
        step = self.script.pop(0) if self.script else 500
        if step == "stall":
            await asyncio.sleep(30)
        if isinstance(step, int):
            return httpx2.Response(
                step,
                headers={"retry-after-ms": "1", "content-type": "application/json"},
                json={
                    "type": "error",
                    "error": {
                        "type": "overloaded_error" if step >= 500 else "rate_limit_error",
                        "message": "try later",
                    },
                },
            )
        args = step(body) if callable(step) else step
        if body.get("stream"):
            return httpx2.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=tool_call_stream(args, body["model"]),
            )
        tool = body["tools"][0]["name"] if body.get("tools") else None
        return httpx2.Response(200, json=tool_call_message(args, body["model"], tool))

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))


Responder = Callable[[dict[str, Any]], dict[str, Any]]
