"""The recommendation as something to deploy: N replicas x this command, router, gateway timeout.

``DeployPlan`` gathers what a platform engineer needs to act: the replica count with one
``vllm serve`` line per replica (``Deployment.replica_commands``), the router that spreads the
requests, the gateway queue timeout (not a vLLM flag), where ``--max-model-len`` came from (flagged
when it is the trace's own longest request + 1: a longer request would be refused), the GPU-hours
a day and, at a $/GPU-hour the user gives (never a built-in price), the $ a day and per 1M tokens
at the predicted throughput, and the headroom to the SLO knee (the highest rate where the SLO still
holds) next to the headroom to queue instability. Numbers only: ``views.tuning`` words them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from servesim.perf.offload import HOST_MEMORY_USD_PER_GIB_HOUR
from servesim.tuning.deployment import Deployment


def usd_per_million(
    gpus: int, usd_per_gpu_hour: float, tokens_per_s: float, host_usd_per_hour: float = 0.0
) -> float | None:
    """$ per 1M tokens: the GPUs' (and the CPU KV tier's host memory) $/s over the tokens served
    per second (None: no tokens)."""
    usd_per_s = (gpus * usd_per_gpu_hour + host_usd_per_hour) / 3600.0
    return usd_per_s / tokens_per_s * 1e6 if tokens_per_s > 0 else None


class DeployPlan(BaseModel):
    """What to run: the replicas, their command, the router, the gateway, the cost and headroom."""

    replicas: int = Field(description="Identical vLLM instances.")
    tensor_parallel_size: int
    gpus: int = Field(description="replicas x tensor_parallel_size.")
    router: str = Field(description="How requests are spread over the replicas (the simulated policy).")
    gateway_queue_timeout_s: float | None = Field(
        description="Reject requests waiting longer than this, at the gateway (None: no timeout)."
    )
    commands: list[str] = Field(description="One vllm serve line per replica (GPUs, port).")
    max_model_len: int
    max_model_len_source: Literal["trace_max", "given"] = Field(
        description="trace_max: the trace's longest request + 1 (a longer request is refused); "
        "given: set by the user."
    )
    longest_request_tokens: int = Field(description="The trace's longest prompt + output.")
    gpu_hours_per_day: float = Field(description="gpus x 24.")
    usd_per_gpu_hour: float | None = Field(description="The price given (None: no price, no $ figures).")
    host_memory_gib: float = Field(
        0.0, description="Host memory of the CPU KV tiers: replicas x --kv-offloading-size (0: no tier)."
    )
    usd_per_host_gib_hour: float | None = Field(
        None,
        description="The host memory price assumed (servesim.perf.offload.HOST_MEMORY_USD_PER_GIB_HOUR), "
        "set only with a GPU price and a CPU tier; it is in usd_per_day and the per-1M figures.",
    )
    usd_per_day: float | None = None
    usd_per_1m_output_tokens: float | None = Field(None, description="At the predicted output tokens/s.")
    usd_per_1m_tokens: float | None = Field(None, description="Prompt + output tokens, same throughput.")
    target_rate_rps: float
    slo_knee_rps: float | None = Field(description="Highest rate meeting the SLO on every fresh seed.")
    headroom_to_slo_knee: float | None = Field(description="slo_knee_rps / target - 1.")
    unstable_rps: float | None = Field(description="Lowest rate at which the queue grows.")
    headroom_to_instability: float | None = Field(description="unstable_rps / target - 1.")


def deploy_plan(
    d: Deployment,
    model: str,
    router: str,
    *,
    longest_request_tokens: int,
    rate: float,
    throughput_rps: float,
    output_tokens_per_s: float,
    mean_request_tokens: float,
    knee_rps: float | None,
    knee_headroom: float | None,
    unstable_rps: float | None,
    headroom: float | None,
    usd_per_gpu_hour: float | None,
) -> DeployPlan:
    """The plan of ``d`` at ``rate``; $ figures only with a price (the CPU tier's host memory at
    the stated per-GiB assumption added to the GPUs' price)."""
    host_gib = d.replicas * (d.kv_offloading_size or 0.0)
    host_price = HOST_MEMORY_USD_PER_GIB_HOUR if host_gib and usd_per_gpu_hour is not None else None
    host_usd_h = host_gib * host_price if host_price is not None else 0.0
    usd = None if usd_per_gpu_hour is None else (d.gpus * usd_per_gpu_hour + host_usd_h) * 24
    out_m = tot_m = None
    if usd_per_gpu_hour is not None:
        out_m = usd_per_million(d.gpus, usd_per_gpu_hour, output_tokens_per_s, host_usd_h)
        tot_m = usd_per_million(d.gpus, usd_per_gpu_hour, throughput_rps * mean_request_tokens, host_usd_h)
    return DeployPlan(
        replicas=d.replicas,
        tensor_parallel_size=d.tensor_parallel_size,
        gpus=d.gpus,
        router=router,
        gateway_queue_timeout_s=d.queue_timeout_s,
        commands=d.replica_commands(model),
        max_model_len=d.max_model_len,
        max_model_len_source="trace_max" if d.max_model_len == longest_request_tokens + 1 else "given",
        longest_request_tokens=longest_request_tokens,
        gpu_hours_per_day=d.gpus * 24.0,
        usd_per_gpu_hour=usd_per_gpu_hour,
        host_memory_gib=host_gib,
        usd_per_host_gib_hour=host_price,
        usd_per_day=usd,
        usd_per_1m_output_tokens=out_m,
        usd_per_1m_tokens=tot_m,
        target_rate_rps=rate,
        slo_knee_rps=knee_rps,
        headroom_to_slo_knee=knee_headroom,
        unstable_rps=unstable_rps,
        headroom_to_instability=headroom,
    )
