"""The defaults a web run applies: what ``vllm serve MODEL`` runs on the chosen GPU (issue 27).

The one place web/ reaches for them (``servesim.perf.serve_defaults``, the functions
``servesim.spec.resolve`` — the CLI, the dashboard, the emulator — and the tuner's baseline use).
A setting the request leaves out gets the GPU's value; one it gives is kept.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servesim.engine import EngineConfig
from servesim.perf.serve_defaults import apply_serve_defaults

#: Engine fields whose default depends on the GPU (vLLM's usage-context batch defaults).
GPU_DEPENDENT = ("max_num_seqs", "max_num_batched_tokens")


def engine_defaults(gpu: str) -> dict[str, Any]:
    """The engine flags ``vllm serve`` applies on ``gpu`` (unknown GPU: vLLM's fallback)."""
    return apply_serve_defaults({}, gpu)[1]


def with_defaults(engine: EngineConfig, gpu: str) -> EngineConfig:
    """``engine`` with every GPU-dependent field the request did not set filled in for ``gpu``."""
    given = engine.model_dump(exclude_unset=True)
    values, applied = apply_serve_defaults(given, gpu, engine.max_model_len)
    if not applied:
        return engine
    return EngineConfig.model_validate(values)


def apply_defaults(body: BaseModel, gpu: str) -> BaseModel:
    """A request body whose ``engine`` has the GPU's defaults where it gave none (stored as run)."""
    engine = getattr(body, "engine", None)
    if not isinstance(engine, EngineConfig):
        return body
    return body.model_copy(update={"engine": with_defaults(engine, gpu)})
