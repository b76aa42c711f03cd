"""Engine speed with KV cache groups: a full-attention model vs the same workload with gpt-oss's
layout (sliding window 128 + full) and Llama 4's (3 chunked-local groups of 8192 + full).

Workload: ``engine_speed.py``'s (the ``default`` generator, Poisson 17.5 req/s, max_num_seqs 256,
max_num_batched_tokens 8192, linear step time), 30,000 blocks. Full attention takes the fast path
(the decode group); a hybrid layout runs the per-step loop with one block table per group (its
blocks are freed out of the window as it goes): compare it with full attention's per-step loop.

    uv run python benchmarks/kv_groups_speed.py [--requests 20000]

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time

from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.engine.kv_groups import KVCacheGroup
from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace

SW = KVCacheGroup(kind="sliding_window", window=128)
CL = KVCacheGroup(kind="chunked_local", window=8192)
FULL = KVCacheGroup(kind="full")
#: (layout, groups, fast path allowed)
LAYOUTS = [
    ("full attention, fast path", None, True),
    ("full attention, per-step loop", None, False),
    ("gpt-oss (sw 128 + full)", (SW, FULL), True),
    ("llama 4 (3 x chunked + full)", (CL, CL, CL, FULL), True),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    args = ap.parse_args()
    trace = generate_trace(
        GeneratorSpec(num_requests=args.requests, seed=0, arrival=PoissonArrivals(rate=17.5))
    )
    print(f"{'layout':32} {'cpu s':>8} {'req/s (cpu)':>12} {'steps':>9} {'max KV %':>9}")
    base = None
    for name, groups, fast in LAYOUTS:
        cfg = EngineConfig(
            num_gpu_blocks=30_000, max_num_seqs=256, max_num_batched_tokens=8192, kv_cache_groups=groups
        )
        c0 = time.process_time()
        res = simulate(trace, cfg, LinearStepTime(), fast=fast)
        cpu = time.process_time() - c0
        base = base or cpu
        s = res.summary
        print(
            f"{name:32} {cpu:8.2f} {args.requests / cpu:12,.0f} {s.num_steps:9,} "
            f"{s.max_kv_usage:9.1%}  ({cpu / base:.2f}x)"
        )


if __name__ == "__main__":
    main()
