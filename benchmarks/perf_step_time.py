"""How cheap the roofline step-time model is (it runs once per engine step).

    uv run python benchmarks/perf_step_time.py

Prints microseconds per ``step_time`` call for a dense and an MoE model, decode-only and mixed
batches, and the share of a simulation's wall time the model takes.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from servesim.engine import EngineConfig, simulate
from servesim.engine.step_time import BatchComposition
from servesim.perf import ExtrapolationWarning, build_step_time_model
from servesim.traces.schema import Trace


def per_call(st: object, batch: BatchComposition, n: int = 200_000) -> float:
    f = st.step_time  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        f(batch)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    warnings.simplefilter("ignore", ExtrapolationWarning)
    for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mixtral-8x7b", 2)):
        st = build_step_time_model(name, "h100", tp)
        dec = BatchComposition(128, 128 * 2000, [])
        mix = BatchComposition(100, 100 * 2000, [(1500, 400), (400, 0)])
        print(
            f"{name:16s} tp{tp}: decode {per_call(st, dec):.2f} us/call, "
            f"mixed {per_call(st, mix):.2f} us/call"
        )
    rng = np.random.default_rng(0)
    n = 20_000
    arr = np.cumsum(rng.exponential(1 / 20, n))
    recs = [
        {
            "req_id": str(i),
            "arrival_time_s": float(arr[i]),
            "prompt_len": int(rng.integers(100, 2000)),
            "output_len": 200,
        }
        for i in range(n)
    ]
    trace = Trace.from_records(recs)
    st = build_step_time_model("llama-3.1-8b", "h100", 1)
    calls = 0
    inner = st.step_time

    class Counting:
        def step_time(self, b: BatchComposition) -> float:
            nonlocal calls
            calls += 1
            return inner(b)

        def model_dump(self) -> dict[str, object]:
            return st.model_dump()

    t0 = time.perf_counter()
    res = simulate(trace, EngineConfig(num_gpu_blocks=28000), Counting())
    wall = time.perf_counter() - t0
    cost = calls * per_call(st, BatchComposition(64, 64 * 1000, []), 50_000) * 1e-6
    print(
        f"simulate {n} requests: {wall:.2f} s wall, {res.summary.num_steps} steps, {calls} step_time calls "
        f"(~{100 * cost / wall:.0f} % of the wall time)"
    )


if __name__ == "__main__":
    main()
