"""vLLM 0.33's admission and cadence knobs on one overloaded replica: what each buys and costs.

A seeded Poisson trace (20,000 requests, prompts 50-2,000, outputs 20-400 tokens, ``--rate`` req/s)
on a constant 10 ms step: per setting, the simulation's wall time (best of two), the finished
requests, the HTTP 503s of ``max_num_queued_reqs`` / ``max_num_queued_tokens``, TTFT p99 over the
finished ones and the ITL p50 a client measures (``stream_interval``). Above capacity (the default
100 req/s) the 503 limits trade rejected requests for a bounded TTFT.
Run: ``.venv/bin/python benchmarks/admission.py [--rate 100]``.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.traces.schema import Trace

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("max_num_queued_reqs=200", {"max_num_queued_reqs": 200}),
    ("max_num_queued_tokens=20000", {"max_num_queued_tokens": 20000}),
    ("prefill_schedule_interval=4", {"prefill_schedule_interval": 4}),
    ("max_num_active_seqs=64", {"max_num_active_seqs": 64}),
    ("stream_interval=8", {"stream_interval": 8}),
]


def trace(rate: float, n: int = 20000, seed: int = 0) -> Trace:
    rng = random.Random(seed)
    t = 0.0
    rows = []
    for i in range(n):
        t += rng.expovariate(rate)
        rows.append(
            {
                "req_id": f"r{i}",
                "arrival_time_s": t,
                "prompt_len": rng.randint(50, 2000),
                "output_len": rng.randint(20, 400),
            }
        )
    return Trace.from_records(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100.0)
    args = ap.parse_args()
    tr = trace(args.rate)
    model = ConstantStepTime(step_time_s=0.01)
    for name, kw in SETTINGS:
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            res = simulate(tr, EngineConfig(max_num_seqs=128, **kw), model)
            best = min(best, time.perf_counter() - t0)
        s = res.summary
        refused = s.admission.num_rejected if s.admission is not None else 0
        print(
            f"{name:30s} {best:6.2f} s  finished {s.num_finished:6d}  503s {refused:6d}  "
            f"TTFT p99 {s.ttft_ms.p99:9.0f} ms  ITL p50 {s.itl_ms.p50:6.1f} ms"
        )


if __name__ == "__main__":
    main()
