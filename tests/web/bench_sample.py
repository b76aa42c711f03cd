"""A generated ``vllm bench serve --save-result [--save-detailed]`` file (no measured data is shipped).

The per-request values come from a seeded generator with the shape of a real run on one H100
(TTFT ~ 30-80 ms, ~7 ms per output token); the summary statistics are computed from those lists
exactly as vllm/benchmarks/serve.py computes them (numpy mean / median / std / percentile), under
the field names it writes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def bench_result(n: int = 60, *, rate: float = 4.0, detailed: bool = True, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    ins = rng.integers(200, 900, size=n)
    outs = rng.integers(20, 120, size=n)
    ttft = 0.025 + ins * 4e-5 + rng.exponential(0.01, size=n)
    itls = [list(0.007 + rng.exponential(0.0008, size=int(o) - 1)) for o in outs]
    lat = ttft + np.array([sum(x) for x in itls])
    tpot = (lat - ttft) / (outs - 1)
    duration = n / rate + float(lat[-1])
    res: dict[str, Any] = {
        "date": "20260101-000000",
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": duration,
        "completed": n,
        "failed": 0,
        "total_input_tokens": int(ins.sum()),
        "total_output_tokens": int(outs.sum()),
        "request_throughput": n / duration,
        "request_goodput": None,
        "output_throughput": float(outs.sum()) / duration,
        "total_token_throughput": float(ins.sum() + outs.sum()) / duration,
    }
    flat_itl = np.concatenate([np.asarray(x) for x in itls])
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", flat_itl), ("e2el", lat)):
        res[f"mean_{name}_ms"] = float(np.mean(values)) * 1000
        res[f"median_{name}_ms"] = float(np.median(values)) * 1000
        res[f"std_{name}_ms"] = float(np.std(values)) * 1000
        res[f"p99_{name}_ms"] = float(np.percentile(values, 99)) * 1000
    if detailed:
        res.update(
            {
                "input_lens": [int(x) for x in ins],
                "output_lens": [int(x) for x in outs],
                "ttfts": [float(x) for x in ttft],
                "itls": [[float(g) for g in row] for row in itls],
                "latencies": [float(x) for x in lat],
                "generated_texts": ["" for _ in range(n)],
                "errors": ["" for _ in range(n)],
            }
        )
    return res
