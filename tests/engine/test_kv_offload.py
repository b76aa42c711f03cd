"""The CPU offload tier beyond the oracle cases: sizing (closed form), LRU order, a host-link run."""

from __future__ import annotations

import pytest

from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.engine.kv_connector import HostLinkTiming, OffloadingConnector
from servesim.engine.kv_offload import HIT, HIT_PENDING, MISS, CPUOffloadManager, RequestAccess
from servesim.errors import ConfigError
from servesim.perf.catalog import load_catalog
from servesim.perf.offload import cpu_chunks, offloading_connector
from servesim.traces.schema import Trace


def multi_turn(n_conv: int = 12, turns: int = 4, prefix: int = 1500) -> Trace:
    """Conversations coming back every few seconds with a growing shared history."""
    rows = []
    for c in range(n_conv):
        for t in range(turns):
            rows.append(
                {
                    "req_id": f"c{c}t{t}",
                    "arrival_time_s": t * 2.0 + c * 0.05,
                    "prompt_len": prefix + 300 * t + 50,
                    "output_len": 40,
                    "prefix_group": f"conv{c}",
                    "prefix_len": prefix + 300 * t,
                }
            )
    rows.sort(key=lambda r: r["arrival_time_s"])
    return Trace.from_records(rows, source="multi-turn")


def test_offload_size_without_a_connector_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"kv_offloading_size 8\.0 GiB needs"):
        simulate(multi_turn(1, 1), EngineConfig(kv_offloading_size=8))


def test_cpu_chunks_follow_vllms_sizing() -> None:
    cat = load_catalog()
    m = cat.model("llama-3.1-8b")  # 8 KV heads x 128 x 2 (K,V) x 32 layers x 2 B = 128 KiB/token
    cfg = EngineConfig(kv_offloading_size=100)
    assert cpu_chunks(cfg, m) == 100 * (1 << 30) // (128 * 1024 * 16)
    assert cpu_chunks(cfg, m, tp=2) == cpu_chunks(cfg, m)  # the GiB are summed over ranks
    assert cpu_chunks(cfg, m, blocks_per_chunk=4) == cpu_chunks(cfg, m) // 4
    assert cpu_chunks(EngineConfig(), m) == 0
    conn = offloading_connector(cfg, m, cat.gpu("h100"))
    assert conn is not None and isinstance(conn.timing, HostLinkTiming)
    # 100 blocks of 2 MiB over PCIe Gen5 x16 (64 GB/s one way) + the per-job overhead
    assert conn.timing.seconds(100) == pytest.approx(20e-6 + 100 * 2 * (1 << 20) / 64e9)


def test_lru_evicts_a_requests_tail_first_and_finished_heads_last() -> None:
    cpu = CPUOffloadManager(3)
    a = RequestAccess()
    a.positions.update({1: 16, 2: 32, 3: 48})
    assert cpu.prepare_store([1, 2, 3], a) == [1, 2, 3]
    assert [cpu.lookup(k) for k in (1, 2, 3, 4)] == [HIT_PENDING] * 3 + [MISS]
    cpu.complete_store([1, 2, 3])
    b = RequestAccess()
    b.positions.update({4: 16})
    assert cpu.prepare_store([4], b) == [4]  # evicts a's tail (rank (a, -48)) first
    assert [cpu.lookup(k) for k in (1, 2, 3)] == [HIT, HIT, MISS]
    cpu.on_request_finished(a)  # a's chunks get fresh ranks, tail first: its head is the newest
    cpu.complete_store([4])
    c = RequestAccess()
    c.positions.update({5: 16, 6: 32})
    assert cpu.prepare_store([5, 6], c) == [5, 6]  # evicts b's 4 (older rank), then a's 2
    assert [cpu.lookup(k) for k in (1, 2, 4)] == [HIT, MISS, MISS]
    d = RequestAccess()
    cpu.prepare_load([1], d)  # 1 is being read, 5 and 6 are being written: nothing is evictable
    assert cpu.prepare_store([7], RequestAccess()) is None
    assert [cpu.lookup(k) for k in (1, 5, 7)] == [HIT, HIT_PENDING, MISS]  # a refused store evicts nothing
    cpu.complete_load([1])
    assert cpu.prepare_store([7], RequestAccess()) == [7]
    assert cpu.lookup(1) == MISS


def host_link_run(size_chunks: int) -> tuple[object, OffloadingConnector]:
    cfg = EngineConfig(num_gpu_blocks=400, max_num_seqs=16)
    conn = OffloadingConnector(size_chunks, HostLinkTiming(2 << 20, 64e9, 20e-6), cfg.block_size)
    return simulate(multi_turn(), cfg, LinearStepTime(), kv_connector=conn, check_invariants=True), conn


def test_a_cpu_tier_turns_recomputed_prefixes_into_loads_deterministically() -> None:
    plain = simulate(multi_turn(), EngineConfig(num_gpu_blocks=400, max_num_seqs=16), LinearStepTime())
    res, _ = host_link_run(5000)
    again, _ = host_link_run(5000)
    off = res.offload  # type: ignore[attr-defined]
    assert off is not None and off.loaded_tokens > 0 and off.stored_tokens > 0
    assert off.cpu_hit_rate is not None and off.cpu_hit_rate > 0.3
    assert off == again.offload  # type: ignore[attr-defined]
    assert res.summary.model_dump() == again.summary.model_dump()  # type: ignore[attr-defined]
    # every later turn's history is on the GPU or in the CPU tier: less prefill, earlier first tokens
    assert res.steps["num_prefill_tokens"].sum() < plain.steps["num_prefill_tokens"].sum()  # type: ignore[attr-defined]
    assert res.summary.ttft_ms.mean < plain.summary.ttft_ms.mean  # type: ignore[attr-defined]
    assert res.summary.num_finished == plain.summary.num_finished == 48  # type: ignore[attr-defined]


def test_a_tiny_cpu_tier_refuses_stores_and_still_finishes() -> None:
    res, _ = host_link_run(4)
    assert res.offload.store_failures > 0 or res.offload.chunks_evicted > 0  # type: ignore[attr-defined]
    assert res.summary.num_finished == 48  # type: ignore[attr-defined]
