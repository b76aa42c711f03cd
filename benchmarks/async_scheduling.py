"""How much async scheduling moves a simulation's results, so the default can be chosen.

vLLM 0.33 turns ``async_scheduling`` on by default on GPUs; servesim's default is the sync
scheduler (the committed examples and oracle cases were made with it). This runs the same traces
both ways on the roofline (llama-3.1-8b on one H100, vLLM's H100 defaults: max_num_seqs 1024,
max_num_batched_tokens 8192) and prints TTFT / TPOT / E2E p50 and p99, throughput, steps and
preemptions, with the ratio async / sync. Workloads: the repository's example trace
(``examples/trace.jsonl`` with ``examples/vllm.yaml``) and the ``default`` generator at two
Poisson rates (moderate and near saturation), plus a KV-tight case (preemptions).

    .venv/bin/python benchmarks/async_scheduling.py [--requests 3000]

Timings of the simulator itself are not the point (CPU time is printed for reference only).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

from servesim.engine import EngineConfig, simulate
from servesim.perf.roofline import build_step_time_model
from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace
from servesim.traces.load import load_trace
from servesim.traces.schema import Trace

ROOT = Path(__file__).resolve().parents[1]


def workloads(n: int) -> list[tuple[str, Trace, dict]]:
    gen = [
        (
            f"default {rate:g} req/s",
            generate_trace(GeneratorSpec(num_requests=n, seed=0, arrival=PoissonArrivals(rate=rate))),
            {},
        )
        for rate in (20.0, 40.0)
    ]
    tight = generate_trace(GeneratorSpec(num_requests=n, seed=1, arrival=PoissonArrivals(rate=30.0)))
    example = load_trace(ROOT / "examples" / "trace.jsonl")
    yaml_keys = EngineConfig.read_file(ROOT / "examples" / "vllm.yaml")
    return [
        ("examples/trace.jsonl", example, yaml_keys),
        *gen,
        ("default 30 req/s, 6k blocks", tight, {"num_gpu_blocks": 6000}),
    ]


def row(name: str, s: object) -> str:
    return (
        f"{name:<6} {s.ttft_ms.p50:>9.1f} {s.ttft_ms.p99:>9.1f} {s.tpot_ms.p50:>8.2f} {s.tpot_ms.p99:>8.2f} "  # type: ignore[attr-defined]
        f"{s.e2e_ms.p99:>9.0f} {s.output_token_throughput:>10.0f} {s.num_steps:>8} {s.num_preemptions:>6}"  # type: ignore[attr-defined]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_step_time_model("llama-3.1-8b", "h100", max_num_seqs=1024, max_num_batched_tokens=8192)
    base = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "num_gpu_blocks": 25_000}
    head = (
        f"{'':<6} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>8} {'TPOT p99':>8} {'E2E p99':>9} "
        f"{'out tok/s':>10} {'steps':>8} {'preempt':>6}"
    )
    for title, trace, keys in workloads(args.requests):
        print(f"\n{title} ({len(trace)} requests)")
        print(head)
        out = {}
        for on in (False, True):
            cfg = EngineConfig(**{**base, **keys, "async_scheduling": on})
            c0 = time.process_time()
            out[on] = simulate(trace, cfg, model).summary
            print(row("async" if on else "sync", out[on]) + f"   (sim CPU {time.process_time() - c0:.1f} s)")
        a, s = out[True], out[False]
        print(
            f"ratio  TTFT p50 {a.ttft_ms.p50 / s.ttft_ms.p50:.3f}  "
            f"TTFT p99 {a.ttft_ms.p99 / s.ttft_ms.p99:.3f}  "
            f"TPOT p99 {a.tpot_ms.p99 / s.tpot_ms.p99:.3f}  "
            f"throughput {a.output_token_throughput / s.output_token_throughput:.3f}  "
            f"steps {a.num_steps / s.num_steps:.3f}"
        )


if __name__ == "__main__":
    main()
