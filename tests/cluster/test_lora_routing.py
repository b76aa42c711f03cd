"""LoRA-aware routing (``--router lora_aware``, issue 51): a request goes where its adapter already
runs, or to a free adapter slot, instead of waiting behind another adapter's batch on a replica
whose ``max_loras`` slots are full (vLLM's scheduler skips it there until they drain)."""

from __future__ import annotations

import pandas as pd

from servesim.cluster import Replica, RouterSpec, simulate_cluster
from servesim.engine import EngineConfig, LinearStepTime
from servesim.traces import GeneratorSpec, PoissonArrivals, Trace, generate_trace
from servesim.traces.adapters import LoRASpec


def _trace(adapters: int, zipf: float, rate: float, fraction: float = 0.9) -> Trace:
    lora = LoRASpec(num_adapters=adapters, zipf_s=zipf, fraction=fraction)
    return generate_trace(
        GeneratorSpec(num_requests=1200, seed=3, arrival=PoissonArrivals(rate=rate), lora=lora)
    )


def _run(trace: Trace, policy: str, n: int, max_loras: int):  # type: ignore[no-untyped-def]
    cfg = EngineConfig(enable_lora=True, max_loras=max_loras, num_gpu_blocks=20000, max_num_seqs=64)
    fleet = [Replica(f"n{i}", cfg, LinearStepTime()) for i in range(n)]
    return simulate_cluster(trace, fleet, RouterSpec(policy=policy, seed=1))  # type: ignore[arg-type]


def test_adapters_find_their_replica_instead_of_waiting_for_a_slot() -> None:
    trace = _trace(adapters=3, zipf=1.2, rate=20.0)
    blind = _run(trace, "least_outstanding", 3, max_loras=1).summary.cluster
    aware = _run(trace, "lora_aware", 3, max_loras=1).summary.cluster
    assert blind.num_finished == aware.num_finished == len(trace)
    # least_outstanding mixes adapters on every replica: one slot each, so a request of another
    # adapter waits until the running one drains (seconds at p99); lora_aware keeps them apart
    assert aware.ttft_ms.p99 * 10 < blind.ttft_ms.p99
    assert aware.ttft_ms.p50 < blind.ttft_ms.p50


def test_each_adapter_lives_on_its_own_replica_when_the_slots_allow() -> None:
    trace = _trace(adapters=2, zipf=0.0, rate=20.0, fraction=1.0)
    res = _run(trace, "lora_aware", 2, max_loras=1)
    lora = pd.Series(trace.df["lora"].to_numpy(), index=trace.df["req_id"].to_numpy())
    req = res.requests.assign(lora=lambda d: d["req_id"].map(lora))
    for _replica, group in req.groupby("replica"):
        top = group["lora"].value_counts(normalize=True).iloc[0]
        assert top > 0.9, group["lora"].value_counts()  # one adapter per replica, nearly always


def test_a_popular_adapter_spreads_once_its_replica_is_full() -> None:
    """Affinity alone would pin an adapter to one replica and leave the others idle: past a
    replica's batch (max_num_seqs outstanding) the adapter takes a free slot elsewhere."""
    trace = _trace(adapters=2, zipf=0.0, rate=40.0, fraction=1.0)
    aware = _run(trace, "lora_aware", 4, max_loras=1)
    assert aware.requests["replica"].nunique() == 4
    blind = _run(trace, "least_outstanding", 4, max_loras=1).summary.cluster
    assert aware.summary.cluster.ttft_ms.p99 < blind.ttft_ms.p99


def test_without_adapters_it_routes_as_least_outstanding() -> None:
    trace = _trace(adapters=2, zipf=0.0, rate=20.0, fraction=0.0)
    a = _run(trace, "lora_aware", 3, max_loras=1).requests
    b = _run(trace, "least_outstanding", 3, max_loras=1).requests
    pd.testing.assert_frame_equal(a, b)
