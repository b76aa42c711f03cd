"""One deployment's step-time model and KV blocks together: what every caller of the engine needs.

``simulate``/``cluster`` on the command line and the tuner all turn (model, GPU, TP, profile,
scheduler limits, memory share) into a ``StepTimeModel`` plus ``num_gpu_blocks``; this is the one
place that does it, so they cannot drift apart. Extrapolation warnings and the KV-capacity caveats
are collected as notes (the caller decides where they go: stderr, a report), never printed here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from servesim.perf.memory import kv_capacity
from servesim.perf.profile import HardwareProfile
from servesim.perf.roofline import RooflineStepTime, build_step_time_model


@dataclass(frozen=True)
class DeploymentSetup:
    """``step_time``: the roofline model; ``num_gpu_blocks``: None when the caller fixed them."""

    step_time: RooflineStepTime
    num_gpu_blocks: int | None
    notes: tuple[str, ...]


def deployment_setup(
    model: str,
    gpu: str,
    tp: int = 1,
    profile: str | HardwareProfile | None = None,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    kv_dtype: str = "auto",
    size_kv_cache: bool = True,
) -> DeploymentSetup:
    """Step times and (with ``size_kv_cache``) KV blocks of ``model`` on ``tp`` x ``gpu`` as vLLM
    would size its cache at ``gpu_memory_utilization``. Raises ``PerfError`` subclasses (unknown
    names, weights that do not fit) with the numbers."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = build_step_time_model(
            model,
            gpu,
            tp,
            profile,
            kv_dtype=kv_dtype,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
        )
    notes = [str(w.message) for w in caught]
    blocks = None
    if size_kv_cache:
        cap = kv_capacity(
            model,
            gpu,
            tp,
            gpu_memory_utilization=gpu_memory_utilization,
            block_size=block_size,
            kv_dtype=kv_dtype,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
        )
        blocks = cap.num_gpu_blocks
        notes += cap.caveats
    return DeploymentSetup(step, blocks, tuple(dict.fromkeys(notes)))
