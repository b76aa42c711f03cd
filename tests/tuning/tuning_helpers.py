"""Small, fast workloads for the capacity-planning tests (no catalog needed)."""

from __future__ import annotations

from servesim.traces import ConstantArrivals, FixedLength, GeneratorSpec, LogNormalLength, PoissonArrivals
from servesim.tuning import Workload


def poisson_workload(n: int = 200, rate: float = 5.0, seed: int = 0) -> Workload:
    """Poisson arrivals, log-normal prompts (mean 300) and outputs (mean 60)."""
    return Workload.from_spec(
        GeneratorSpec(
            num_requests=n,
            seed=seed,
            arrival=PoissonArrivals(rate=rate),
            prompt=LogNormalLength(mean=300, sigma=0.5, max=1500),
            output=LogNormalLength(mean=60, sigma=0.5, max=300),
        )
    )


def constant_workload(n: int = 200, rate: float = 5.0, prompt: int = 200, output: int = 50) -> Workload:
    """Evenly spaced arrivals and fixed lengths: a deterministic system."""
    return Workload.from_spec(
        GeneratorSpec(
            num_requests=n,
            arrival=ConstantArrivals(rate=rate),
            prompt=FixedLength(value=prompt),
            output=FixedLength(value=output),
        )
    )


#: A search space small enough for fast tests (one or two replicas, short lists).
SMALL_SPACE = {
    "max_num_seqs": [8, 16, 64],
    "max_num_batched_tokens": [256, 1024, 4096],
    "long_prefill_token_threshold": [0, 256],
    "block_size": [16, 32],
    "replicas": [1, 2],
    "queue_timeout_s": [None, 30.0],
}
