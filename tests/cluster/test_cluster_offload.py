"""Issue 31.4: a cluster whose replicas have vLLM's CPU offload tier reports the tiers' figures,
for the fleet and for each replica (ClusterSummary.offload, summary.cluster.offload and each
replica summary's offload), and a cluster without one reports none."""

from __future__ import annotations

from servesim.cluster import FailureEvent, Replica, RouterSpec, simulate_cluster
from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.perf.catalog import load_catalog
from servesim.perf.offload import offloading_connector
from servesim.traces import Trace

CAT = load_catalog()
CFG = EngineConfig(num_gpu_blocks=600, kv_offloading_size=16.0)
PLAIN = EngineConfig(num_gpu_blocks=600)


def _conn():  # type: ignore[no-untyped-def]
    return offloading_connector(CFG, CAT.model("llama-3.1-8b"), CAT.gpu("h100"))


def _trace(conversations: int = 20, turns: int = 3) -> Trace:
    rows = [
        {"req_id": f"c{c}t{t}", "arrival_time_s": t * 6.0 + c * 0.05, "prompt_len": 1600 + 500 * t,
         "output_len": 40, "prefix_group": f"conv{c}", "prefix_len": 1500 + 500 * t}
        for t in range(turns) for c in range(conversations)
    ]  # fmt: skip
    return Trace.from_records(sorted(rows, key=lambda r: r["arrival_time_s"]))


def test_one_replica_reports_what_the_stand_alone_engine_reports() -> None:
    trace = _trace()
    alone = simulate(trace, CFG, LinearStepTime(), kv_connector=_conn())
    res = simulate_cluster(trace, [Replica("n0", CFG, LinearStepTime(), _conn)])
    s = res.summary
    assert alone.offload is not None and alone.offload.loaded_tokens > 0
    assert s.offload is not None
    assert s.offload.fleet == alone.offload == s.cluster.offload
    assert s.offload.replicas == {"n0": alone.offload} and s.replicas["n0"].offload == alone.offload


def test_the_fleet_sums_the_replicas_tiers() -> None:
    trace = _trace(24, 4)
    reps = [Replica(f"n{i}", CFG, LinearStepTime(), _conn) for i in range(2)]
    s = simulate_cluster(trace, reps, RouterSpec(policy="prefix_aware")).summary
    off = s.offload
    assert off is not None and set(off.replicas) == {"n0", "n1"}
    per = list(off.replicas.values())
    for key in ("loaded_tokens", "stored_tokens", "load_jobs", "store_jobs", "chunks_evicted", "cpu_chunks"):
        assert getattr(off.fleet, key) == sum(getattr(p, key) for p in per), key
    assert all(p.loaded_tokens > 0 and p.stored_tokens > 0 for p in per)
    assert off.fleet.recomputed_tokens == s.cluster.recomputed_tokens
    assert off.fleet.gpu_hit_rate == s.cluster.prefix_cache_hit_rate
    for name, p in off.replicas.items():
        assert p == s.replicas[name].offload
        assert p.gpu_hit_rate == s.replicas[name].prefix_cache_hit_rate
        assert p.recomputed_tokens == s.replicas[name].recomputed_tokens
    # The fleet's CPU hit rate is the tiers' hits over their queries, not a mean of the rates:
    # each replica's rate lies on one side of it or equals it.
    lo, hi = sorted(p.cpu_hit_rate or 0.0 for p in per)
    assert off.fleet.cpu_hit_rate is not None and lo <= off.fleet.cpu_hit_rate <= hi


def test_a_replica_back_from_a_failure_counts_both_of_its_tiers() -> None:
    """The lost engine's tier is gone (its size is counted once, what it held at the end is the
    new tier's), but the tokens it loaded and stored still count."""
    trace = _trace(24, 4)
    reps = [Replica(f"n{i}", CFG, LinearStepTime(), _conn) for i in range(2)]
    fail = [FailureEvent(node="n1", time_s=8.0, recover_after_s=1.0)]
    res = simulate_cluster(trace, reps, RouterSpec(policy="prefix_aware"), fail, recovery="restart")
    off = res.summary.offload
    assert off is not None
    assert res.summary.num_failures == 1
    one = _conn().manager.num_chunks
    assert off.replicas["n1"].cpu_chunks == one and off.fleet.cpu_chunks == 2 * one
    assert off.fleet.stored_tokens == sum(p.stored_tokens for p in off.replicas.values())


def test_no_tier_no_offload_figures() -> None:
    trace = _trace()
    s = simulate_cluster(trace, [Replica(f"n{i}", PLAIN, LinearStepTime()) for i in range(2)]).summary
    assert s.offload is None and s.cluster.offload is None
    assert all(r.offload is None for r in s.replicas.values())
    assert "offload" in s.model_dump() and s.model_dump()["offload"] is None
