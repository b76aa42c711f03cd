"""Aggregated vs prefill/decode-disaggregated serving at equal GPU counts.

Llama-3.1-8B on H100s (calibrated roofline step times, vLLM serve's defaults, KV sized by vLLM's
rule), KV over ``rdma-400g`` (400 Gbit/s per TP rank, 1 ms setup). Two Poisson traces:

* long prompt / short output (RAG, summarisation): prompts 3000-8000 tokens, outputs 16-64;
* short prompt / long output (chat, generation): prompts 100-400 tokens, outputs 300-800.

Layouts: aggregated 2 replicas vs 1P1D (2 GPUs); aggregated 3 vs 1P2D and 2P1D (3 GPUs).
Aggregated runs use the prefix-aware router with no failures (``simulate_cluster``);
disaggregated ones ``PDCluster`` (prefix-aware prefill pick, least-KV decode pick, no
short-prompt threshold). Prints TTFT/TPOT p50/p99, E2E p99, output tokens/s and the mean
transfer leg.

    .venv/bin/python benchmarks/pd.py [--requests 600]

AIConfigurator's estimate for the same model and GPUs is in docs/cluster.md (run by hand in its
own venv: it needs a local model config.json and is not a servesim dependency).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from servesim.cluster import RouterSpec, simulate_cluster
from servesim.cluster.pd import DisaggSpec, PDCluster, PoolSpec
from servesim.cluster.pd_results import pd_result
from servesim.spec import DeploymentSpec, resolve_replicas
from servesim.traces.schema import Trace


def poisson(n: int, rps: float, prompt: tuple[int, int], output: tuple[int, int], seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rps, n))
    rows = [
        {
            "req_id": f"r{i}",
            "arrival_time_s": float(t[i]),
            "prompt_len": int(rng.integers(*prompt)),
            "output_len": int(rng.integers(*output)),
        }
        for i in range(n)
    ]
    return Trace.from_records(rows, source="pd-bench")


def replicas(tag: str, n: int, tr: Trace) -> list:
    base = DeploymentSpec(model="llama-3.1-8b", gpu="h100")
    return [rep for rep, _ in resolve_replicas(base, [(f"{tag}{i}", {}) for i in range(n)], tr)]


def aggregated(tr: Trace, n: int) -> dict[str, float]:
    res = simulate_cluster(tr, replicas("n", n, tr), RouterSpec(policy="prefix_aware"))
    s = res.summary.cluster
    return {
        "ttft50": s.ttft_ms.p50,
        "ttft99": s.ttft_ms.p99,
        "tpot50": s.tpot_ms.p50,
        "tpot99": s.tpot_ms.p99,
        "e2e99": s.e2e_ms.p99,
        "tok_s": s.output_token_throughput,
        "xfer": 0.0,
    }


def disaggregated(tr: Trace, n_p: int, n_d: int) -> dict[str, float]:
    spec = DisaggSpec(prefill=PoolSpec(replicas=n_p), decode=PoolSpec(replicas=n_d), link="rdma-400g")
    ctx = spec.context()
    run = PDCluster(tr, replicas("p", n_p, tr), replicas("d", n_d, tr), ctx).run()
    s = pd_result(run, ctx.bytes_total(1)).summary
    return {
        "ttft50": s.ttft_p50_ms,
        "ttft99": s.ttft_p99_ms,
        "tpot50": s.tpot_p50_ms or 0.0,
        "tpot99": s.tpot_p99_ms or 0.0,
        "e2e99": s.e2e_p99_ms,
        "tok_s": s.output_tokens_per_s,
        "xfer": s.legs["transfer"].mean_ms,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=600)
    args = ap.parse_args()
    traces = {
        "long prompt / short output (8 req/s)": poisson(args.requests, 8.0, (3000, 8000), (16, 64), 1),
        "short prompt / long output (12 req/s)": poisson(args.requests, 12.0, (100, 400), (300, 800), 2),
    }
    print(
        f"{'trace':<38} {'layout':<10} {'GPUs':>4} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} "
        f"{'TPOT p99':>9} {'E2E p99':>9} {'out tok/s':>10} {'xfer ms':>8}"
    )
    for name, tr in traces.items():
        rows = [
            ("agg x2", 2, lambda tr=tr: aggregated(tr, 2)),
            ("1P1D", 2, lambda tr=tr: disaggregated(tr, 1, 1)),
            ("agg x3", 3, lambda tr=tr: aggregated(tr, 3)),
            ("1P2D", 3, lambda tr=tr: disaggregated(tr, 1, 2)),
            ("2P1D", 3, lambda tr=tr: disaggregated(tr, 2, 1)),
        ]
        for layout, gpus, fn in rows:
            t0 = time.perf_counter()
            m = fn()
            wall = time.perf_counter() - t0
            print(
                f"{name:<38} {layout:<10} {gpus:>4} {m['ttft50']:>9.1f} {m['ttft99']:>9.1f} "
                f"{m['tpot50']:>9.2f} {m['tpot99']:>9.2f} {m['e2e99']:>9.1f} {m['tok_s']:>10.1f} "
                f"{m['xfer']:>8.2f}  ({wall:.1f} s)"
            )


if __name__ == "__main__":
    main()
