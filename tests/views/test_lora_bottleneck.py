"""The bottleneck verdicts name ``max_loras`` when adapter slots held requests back (issue 51):
vLLM leaves a waiting request behind while its adapter would exceed ``max_loras``, so the batch is
neither full nor out of KV blocks; without the engine's per-step skip count the verdicts read such
a run as plain queueing and advised replicas that do not help."""

from __future__ import annotations

from servesim.cluster import Replica, RouterSpec, simulate_cluster
from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.traces import GeneratorSpec, PoissonArrivals, Trace, generate_trace
from servesim.traces.adapters import LoRASpec
from servesim.views.fleet import fleet_views
from servesim.views.simulation import bottleneck, bottleneck_limit, queue_by_reason


def _trace(adapters: int, rate: float) -> Trace:
    lora = LoRASpec(num_adapters=adapters, zipf_s=1.2, fraction=0.9)
    return generate_trace(
        GeneratorSpec(num_requests=800, seed=3, arrival=PoissonArrivals(rate=rate), lora=lora)
    )


def _config(max_loras: int) -> EngineConfig:
    return EngineConfig(enable_lora=True, max_loras=max_loras, num_gpu_blocks=20000, max_num_seqs=64)


def test_one_replica_names_max_loras_and_the_flag_that_relaxes_it() -> None:
    trace = _trace(adapters=3, rate=20.0)
    bound = simulate(trace, _config(1), LinearStepTime())
    lim = bottleneck_limit(bound)
    assert lim.name == "max_loras" and lim.share > 0.5
    text = bottleneck(bound).text
    assert text.startswith("max_loras: requests waited in") and "--max-loras" in text
    assert "lora_aware" in text
    # the queue chart attributes the held-back requests to the adapter slots
    parts = {s.key.split(".")[1]: sum(s.y) for s in queue_by_reason(bound)}
    assert parts["max_loras"] > parts["other"]
    # a slot for every adapter: nothing skipped, and the verdict no longer mentions it
    roomy = simulate(trace, _config(3), LinearStepTime())
    assert "lora_skipped" not in roomy.steps
    assert "max_loras" not in bottleneck(roomy).text


def test_the_fleet_verdict_names_max_loras_under_a_queue_only_router() -> None:
    trace = _trace(adapters=3, rate=20.0)
    fleet = [Replica(f"n{i}", _config(1), LinearStepTime()) for i in range(3)]

    def verdict(policy: str) -> str:
        res = simulate_cluster(trace, fleet, RouterSpec(policy=policy, seed=1))  # type: ignore[arg-type]
        found = [v for v in fleet_views(res)[0].verdicts if v.key == "fleet_bottleneck"]
        return found[0].text

    blind = verdict("least_outstanding")
    assert blind.startswith("max_loras-bound: max_loras was the binding limit on")
    assert "--router lora_aware" in blind
    assert "max_loras" not in verdict("lora_aware")
