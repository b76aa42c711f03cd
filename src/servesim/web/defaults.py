"""The defaults a web run applies: what ``vllm serve MODEL`` runs on the chosen GPU (issue 27).

The one place web/ reaches for them (``servesim.tuning.deployment.vllm_serve_defaults``, the
same function the CLI and the tuner's baseline use), so a move of that function is one import.
A setting the request leaves out gets the GPU's value; one it gives is kept.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servesim.engine import EngineConfig
from servesim.tuning.deployment import vllm_serve_defaults

#: Engine fields whose default depends on the GPU (vLLM's usage-context batch defaults).
GPU_DEPENDENT = ("max_num_seqs", "max_num_batched_tokens")


def engine_defaults(gpu: str) -> dict[str, Any]:
    """The engine flags ``vllm serve`` applies on ``gpu`` (unknown GPU: vLLM's fallback)."""
    mns, mbt = vllm_serve_defaults(gpu)
    return {"max_num_seqs": mns, "max_num_batched_tokens": max(mbt, mns)}


def with_defaults(engine: EngineConfig, gpu: str) -> EngineConfig:
    """``engine`` with every GPU-dependent field the request did not set filled in for ``gpu``."""
    missing = {k: v for k, v in engine_defaults(gpu).items() if k not in engine.model_fields_set}
    if not missing:
        return engine
    return EngineConfig.model_validate({**engine.model_dump(exclude_unset=True), **missing})


def apply_defaults(body: BaseModel, gpu: str) -> BaseModel:
    """A request body whose ``engine`` has the GPU's defaults where it gave none (stored as run)."""
    engine = getattr(body, "engine", None)
    if not isinstance(engine, EngineConfig):
        return body
    return body.model_copy(update={"engine": with_defaults(engine, gpu)})
