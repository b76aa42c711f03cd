"""What a run costs at a GPU price the user gives (never a hard-coded price): $/1M tokens, goodput per $.

The rates are the run's own (first arrival to last completion), so the figures assume the GPUs
serve this traffic at this rate for as long as they are paid for.
"""

from __future__ import annotations

from servesim.engine import SimulationSummary
from servesim.errors import InputError
from servesim.perf.offload import HOST_MEMORY_USD_PER_GIB_HOUR
from servesim.views.model import Kpi, Section


def cost_view(
    summary: SimulationSummary, *, gpus: int, usd_per_gpu_hour: float, host_memory_gib: float = 0.0
) -> Section:
    """Cost KPIs: the deployment's $/h, $ per 1M output and total tokens, (good) requests per $.
    ``host_memory_gib``: the CPU KV tiers' host memory (``--kv-offloading-size``, all replicas),
    priced at servesim's assumption ``HOST_MEMORY_USD_PER_GIB_HOUR`` beside the GPUs, as the
    tuner's plan prices it."""
    if gpus < 1 or not usd_per_gpu_hour > 0:
        raise InputError("cost needs gpus >= 1 and a GPU price > 0 $/h")
    host_usd_h = host_memory_gib * HOST_MEMORY_USD_PER_GIB_HOUR
    usd_per_s = (gpus * usd_per_gpu_hour + host_usd_h) / 3600.0
    deployment = f"{gpus} GPU(s) x {usd_per_gpu_hour:g} $/GPU-hour (the price you entered)"
    if host_memory_gib:
        deployment += (
            f" + {host_memory_gib:g} GiB of host memory for the CPU KV tier(s) x "
            f"{HOST_MEMORY_USD_PER_GIB_HOUR:g} $/GiB-hour (servesim's host memory assumption)"
        )

    def per_million(tok_per_s: float) -> float | None:
        return usd_per_s / tok_per_s * 1e6 if tok_per_s > 0 else None

    kpis = [
        Kpi(
            key="usd_per_hour",
            label="deployment",
            value=usd_per_s * 3600,
            unit="$/h",
            decimals=2,
            help=f"{deployment}.",
        ),
        Kpi(
            key="usd_per_m_output_tokens",
            label="$ per 1M output tokens",
            value=per_million(summary.output_token_throughput),
            unit="$",
            decimals=3,
            help="Deployment $/s divided by output tokens/s of the run, times one million.",
        ),
        Kpi(
            key="usd_per_m_total_tokens",
            label="$ per 1M tokens (prompt + output)",
            value=per_million(summary.total_token_throughput),
            unit="$",
            decimals=3,
            help="Deployment $/s divided by total tokens/s (prompt and output of finished requests).",
        ),
        Kpi(
            key="requests_per_usd",
            label="requests per $",
            value=summary.request_throughput / usd_per_s,
            unit="req/$",
            decimals=0,
            help="Finished requests per second divided by deployment $/s.",
        ),
        Kpi(
            key="goodput_per_usd",
            label="good requests per $",
            value=summary.goodput / usd_per_s if summary.slo is not None else None,
            unit="req/$",
            decimals=0,
            help="Goodput (requests meeting every SLO per second) divided by deployment $/s; needs an SLO.",
        ),
    ]
    host = (
        f" and {host_memory_gib:g} GiB of host memory (CPU KV tier) at {HOST_MEMORY_USD_PER_GIB_HOUR:g} "
        "$/GiB-hour"
        if host_memory_gib
        else ""
    )
    text = [
        f"at {usd_per_gpu_hour:g} $/GPU-hour for {gpus} GPU(s){host}, serving this traffic at the run's "
        f"rates ({summary.request_throughput:,.2f} req/s, "
        f"{summary.output_token_throughput:,.0f} output tok/s)"
    ]
    return Section(key="cost", title="cost", kpis=kpis, text=text)
