"""The vLLM engine flags, declared once for every command that runs an engine.

``@engine_flags`` adds them to a Typer command as keyword options (``--max-num-seqs``,
``--enable-chunked-prefill/--no-enable-chunked-prefill``, ...) and hands the command one
``flags`` dict of the values given (None: not given), ready for ``engine_config(file, flags)``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DeploymentFlags:
    """``--model/--gpu/--tp/--gpu-memory-utilization/--profile`` or ``--step-time-ms``: what times
    the steps and sizes the KV cache (``simulate_cmd.deployment`` turns them into both)."""

    model: str | None
    gpu: str | None
    tp: int | None
    gpu_memory_utilization: float
    profile: str | None
    step_time_ms: float | None
    linear_step_time: bool = False


def _deployment_flags() -> dict[str, tuple[Any, Any]]:
    return {
        "step_time_ms": (
            float | None,
            typer.Option(
                None, help="Every step takes this long (for step-by-step comparison) instead of the model's."
            ),
        ),
        "linear_step_time": (
            bool,
            typer.Option(False, help="servesim's linear step model (uncalibrated) instead of the model's."),
        ),
        "model": (
            str | None,
            typer.Option(None, help="Served model (catalog name or config.json); default llama-3.1-8b."),
        ),
        "gpu": (str | None, typer.Option(None, help="GPU of a replica; default h100.")),
        "tp": (
            int | None,
            typer.Option(
                None,
                "--tp",
                "--tensor-parallel-size",
                min=1,
                max=64,
                help="Tensor-parallel degree; default 1.",
            ),
        ),
        "gpu_memory_utilization": (
            float,
            typer.Option(0.9, min=0.01, max=1.0, help="vLLM's memory share (sizes the KV cache)."),
        ),
        "profile": (str | None, typer.Option(None, help="Calibrated hardware profile (JSON path or name).")),
    }


F = TypeVar("F", bound=Callable[..., Any])


def _with_options(
    func: F,
    options: dict[str, tuple[Any, Any]],
    name: str,
    collect: Callable[[dict[str, Any]], Any],
    after: str,
) -> F:
    """Add ``options`` to a Typer command (after its ``after`` parameter) and pass them collected
    into the one keyword argument ``name``."""
    sig = inspect.signature(func, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != name]
    extra = [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
        for key, (annotation, option) in options.items()
    ]
    # Typer passes every parameter by name: all keyword-only, so the options can sit after the
    # command's argument (``--help`` lists them there).
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    keys = tuple(options)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        kwargs[name] = collect({key: kwargs.pop(key) for key in keys})
        return func(**kwargs)

    # inspect.signature (Typer) reads __signature__; get_type_hints follows __wrapped__ to the
    # command's module for its own (string) annotations.
    names = [p.name for p in params]
    at = names.index(after) + 1 if after in names else 1
    wrapper.__signature__ = sig.replace(parameters=params[:at] + extra + params[at:])  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def engine_flags(func: F) -> F:
    """Give ``func`` (which takes ``flags: dict[str, Any]``) every engine flag as an option."""
    return _with_options(func, _flags(), "flags", dict, "config")  # after --config FILE, which they override


def deployment_flags(func: F) -> F:
    """Give ``func`` (which takes ``deployment: DeploymentFlags``) the deployment options."""
    return _with_options(func, _deployment_flags(), "deployment", lambda d: DeploymentFlags(**d), "config")


__all__ = ["FLAG_NAMES", "DeploymentFlags", "Mitigation", "Policy", "deployment_flags", "engine_flags"]
