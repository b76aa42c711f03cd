"""Engine speed: simulated requests per wall-second, fast path vs naive loop, 1k to 1M requests.

Workload: the ``default`` generator lengths (log-normal prompts mean 1,200, outputs mean 150),
Poisson arrivals at 17.5 req/s, one replica with max_num_seqs 256, max_num_batched_tokens 8192,
30,000 KV blocks and the linear step-time model: about 97 % of that replica's capacity
(~18 req/s), i.e. a rate near saturation, where batches are large and change every step.

    uv run python benchmarks/engine_speed.py                       # 1k, 10k, 100k, 1M; naive up to 100k
    uv run python benchmarks/engine_speed.py --naive-max 1000000   # the naive loop at 1M too (slow)
    uv run python benchmarks/engine_speed.py --sizes 100000 --profile

Timings are printed, never asserted (machines are noisy); the CPU time of each run is printed too
(steadier than wall time on a shared host), and at the end the process's peak resident memory.
The issue's targets: 1M requests in at most 10 s on one core with the fast path, in at most 1 GiB.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from trace_load import _max_rss_mib as peak_rss_mib

from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace

CONFIG = EngineConfig(num_gpu_blocks=30_000, max_num_seqs=256, max_num_batched_tokens=8192)


def run(n: int, rate: float, fast: bool) -> tuple[float, float, int, object]:
    trace = generate_trace(GeneratorSpec(num_requests=n, seed=0, arrival=PoissonArrivals(rate=rate)))
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(trace, CONFIG, LinearStepTime(), fast=fast)
    return time.perf_counter() - t0, time.process_time() - c0, result.summary.num_steps, result.summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--rate", type=float, default=17.5)
    ap.add_argument("--naive-max", type=int, default=100_000, help="largest size to run the naive loop on")
    ap.add_argument("--profile", action="store_true", help="cProfile the fast path at the first size")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(sizes[0], args.rate, True)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
        return
    print(
        f"{'requests':>10} {'path':>6} {'wall s':>8} {'cpu s':>8} {'req/s':>9} {'steps':>10} {'steps/s':>9}"
        "  same result"
    )
    base: dict[bool, float] = {}
    for n in sizes:
        summaries = {}
        for fast in (True, False):
            if not fast and n > args.naive_max:
                print(f"{n:>10} {'naive':>6} {'skipped (--naive-max)':>30}")
                continue
            wall, cpu, steps, summary = run(n, args.rate, fast)
            summaries[fast] = summary
            rps = n / wall
            base.setdefault(fast, rps)
            same = "" if fast else ("yes" if summaries.get(True) == summary else "NO")
            print(
                f"{n:>10} {'fast' if fast else 'naive':>6} {wall:>8.2f} {cpu:>8.2f} "
                f"{rps:>9,.0f} {steps:>10,} "
                f"{steps / wall:>9,.0f}  {same}   (req/s vs first size: {rps / base[fast]:.2f}x)"
            )
    print(f"peak resident memory of this process: {peak_rss_mib():,.0f} MiB")


if __name__ == "__main__":
    main()
