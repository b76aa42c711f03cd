"""The KV connector seam's cost when off, and what a CPU offload tier buys on multi-turn traffic.

1. Engine speed with no connector: this branch vs the same runs with the connector code path
   bypassed is not measurable in one checkout, so the figure printed is the plain engine's
   steps/s on a fixed trace; compare it against the same command on the parent commit
   (target: within 2 %).
2. TTFT p50/p99 and hit rates against the offload size on a generated multi-turn trace
   (Llama-3.1-8B on one H100, 1200 GPU blocks), next to "one more GPU" (twice the KV blocks).

    .venv/bin/python benchmarks/kv_offload.py
"""

from __future__ import annotations

import time

from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.perf.catalog import load_catalog
from servesim.perf.offload import offloading_connector
from servesim.traces.schema import Trace


def multi_turn(n_conv: int = 60, turns: int = 5, seed_gap: float = 0.07) -> Trace:
    rows = []
    for c in range(n_conv):
        for t in range(turns):
            hist = 2000 + 600 * t
            rows.append(
                {
                    "req_id": f"c{c}t{t}",
                    "arrival_time_s": t * 8.0 + c * seed_gap,
                    "prompt_len": hist + 100,
                    "output_len": 120,
                    "prefix_group": f"conv{c}",
                    "prefix_len": hist,
                }
            )
    rows.sort(key=lambda r: r["arrival_time_s"])
    return Trace.from_records(rows, source="multi-turn")


def seam_cost() -> None:
    trace = multi_turn(200, 5, 0.02)
    cfg = EngineConfig(num_gpu_blocks=4000)
    best = min(_timed(lambda: simulate(trace, cfg, LinearStepTime())) for _ in range(3))
    res = simulate(trace, cfg, LinearStepTime())
    print(
        f"plain engine, no connector: {res.summary.num_steps} steps in {best:.3f} s "
        f"({res.summary.num_steps / best:,.0f} steps/s; compare with the parent commit)"
    )


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def offload_table() -> None:
    cat = load_catalog()
    model, gpu = cat.model("llama-3.1-8b"), cat.gpu("h100")
    trace = multi_turn()
    step = LinearStepTime()
    print("\n| setup | TTFT p50 ms | TTFT p99 ms | GPU hit | CPU hit | loaded tok | prefill tok |")
    print("|---|---|---|---|---|---|---|")
    for label, blocks, gib in [
        ("1 GPU, no offload", 1200, None),
        ("1 GPU + 4 GiB", 1200, 4.0),
        ("1 GPU + 16 GiB", 1200, 16.0),
        ("1 GPU + 64 GiB", 1200, 64.0),
        ("one more GPU (2x blocks)", 2400, None),
    ]:
        cfg = EngineConfig(num_gpu_blocks=blocks, kv_offloading_size=gib)
        conn = offloading_connector(cfg, model, gpu)
        r = simulate(trace, cfg, step, kv_connector=conn)
        s = r.summary
        off = r.offload
        cpu = f"{off.cpu_hit_rate:.2f}" if off and off.cpu_hit_rate is not None else "-"
        print(
            f"| {label} | {s.ttft_ms.p50:.0f} | {s.ttft_ms.p99:.0f} | "
            f"{s.prefix_cache_hit_rate or 0:.2f} | {cpu} | "
            f"{off.loaded_tokens if off else 0} | {int(r.steps['num_prefill_tokens'].sum())} |"
        )


if __name__ == "__main__":
    seam_cost()
    offload_table()
