"""The vLLM engine flags, declared once for every command that runs an engine.

``@engine_flags`` adds them to a Typer command as keyword options (``--max-num-seqs``,
``--enable-chunked-prefill/--no-enable-chunked-prefill``, ...) and hands the command one
``flags`` dict of the values given (None: not given), ready for ``engine_config(file, flags)``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

import typer


class Policy(StrEnum):
    fcfs = "fcfs"
    priority = "priority"


class Mitigation(StrEnum):
    none = "none"
    protect = "protect"
    boost = "boost"


def _flags() -> dict[str, tuple[Any, Any]]:
    """name -> (annotation, typer.Option): built per command (Typer copies, but keep them apart)."""
    return {
        "max_num_seqs": (int | None, typer.Option(None, help="Most requests in the running batch.")),
        "max_num_batched_tokens": (int | None, typer.Option(None, help="Token budget of one engine step.")),
        "block_size": (int | None, typer.Option(None, help="Tokens per KV block.")),
        "num_gpu_blocks": (
            int | None,
            typer.Option(None, help="KV blocks in the pool (incl. the null block)."),
        ),
        "enable_chunked_prefill": (
            bool | None,
            typer.Option(
                None,
                "--enable-chunked-prefill/--no-enable-chunked-prefill",
                help="Split long prompts across steps.",
            ),
        ),
        "enable_prefix_caching": (
            bool | None,
            typer.Option(
                None,
                "--enable-prefix-caching/--no-enable-prefix-caching",
                help="Reuse KV of identical prefixes.",
            ),
        ),
        "long_prefill_token_threshold": (
            int | None,
            typer.Option(None, help="Per-request token cap per step."),
        ),
        "policy": (Policy | None, typer.Option(None, help="Waiting-queue order.")),
        "max_model_len": (
            int | None,
            typer.Option(None, help="Context limit (default: longest request + 1)."),
        ),
        "watermark": (float | None, typer.Option(None, help="Fraction of blocks kept free for admissions.")),
        "queue_timeout_s": (float | None, typer.Option(None, help="Reject requests unscheduled this long.")),
        "starvation_threshold": (
            int | None,
            typer.Option(None, help="Preemptions that flag a request STARVED."),
        ),
        "starvation_mitigation": (
            Mitigation | None,
            typer.Option(
                None, help="Spare STARVED requests as victims (protect) and raise their priority (boost)."
            ),
        ),
    }


FLAG_NAMES = tuple(_flags())

F = TypeVar("F", bound=Callable[..., Any])


def engine_flags(func: F) -> F:
    """Give ``func`` (which takes ``flags: dict[str, Any]``) every engine flag as an option."""
    sig = inspect.signature(func, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != "flags"]
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
        for name, (annotation, option) in _flags().items()
    ]
    # Typer passes every parameter by name: all keyword-only, so the flags can sit after the
    # command's argument (``--help`` lists them there).
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        flags = {name: kwargs.pop(name) for name in FLAG_NAMES}
        return func(flags=flags, **kwargs)

    # inspect.signature (Typer) reads __signature__; get_type_hints follows __wrapped__ to the
    # command's module for its own (string) annotations.
    names = [p.name for p in params]
    at = names.index("config") + 1 if "config" in names else 1  # after --config FILE, which they override
    wrapper.__signature__ = sig.replace(parameters=params[:at] + extra + params[at:])  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


__all__ = ["FLAG_NAMES", "Mitigation", "Policy", "engine_flags"]
