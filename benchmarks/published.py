"""servesim against published vLLM measurements (docs/perf.md, "Published measurements").

Each case re-creates one published run (model, GPU and count, TP, precision, lengths, and the
client: offline batch, or ``--max-concurrency`` closed loop) and prints the published figure,
servesim's prediction at the same settings and the signed error (prediction vs measured).
Nothing is fitted to these figures: every run uses the GPU's shipped profile (``h100``) or the
generic priors (every other GPU), as ``servesim simulate`` would.

    uv run python benchmarks/published.py            # every case (~20 s on a shared core)
    uv run python benchmarks/published.py --only dstack   # cases whose key contains "dstack"
    uv run python benchmarks/published.py --json     # the rows as JSON
    uv run python benchmarks/published.py --write-uncalibrated src/servesim/data/perf/uncalibrated_errors.json

The clients:

* ``offline``: every request at t = 0, no front end (``vllm bench latency`` / ``benchmark_latency.py``
  time one batch of B prompts; ``benchmark_throughput.py`` hands N prompts to ``LLM.generate``).
  Throughput = output tokens / time of the last token.
* ``concurrency``: ``vllm bench serve --max-concurrency C`` (or SGLang's ``bench_serving.py``,
  the same client loop) with ``--request-rate inf``: at most C requests in flight, solved as a
  closed loop (``servesim.perf.replay``) with the profile's front-end latency and async lag.
  Output throughput = output tokens / (last completion - first send), as vllm bench reports it.
* ``burst``: ``vllm bench serve --request-rate inf`` without a concurrency cap: every request
  sent at t = 0 through the front end.

Figures are printed, never asserted (benchmarks never assert timings).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.perf.profile import builtin_profile_names, default_profile
from servesim.perf.replay import RequestSet, replay, summarize_latencies
from servesim.spec import DeploymentSpec, resolve


@dataclass(frozen=True)
class Case:
    key: str
    source: str  # where the figure is published (URL / repository path) and its date
    model: str
    gpu: str
    tp: int
    client: str  # "offline", "concurrency" or "burst"
    n: int  # requests
    prompt: int
    output: int
    concurrency: int | None = None
    range_ratio: float = 0.0  # vllm bench --random-range-ratio: lengths uniform in (1 ± r) x
    engine: dict[str, Any] = field(default_factory=dict)  # vLLM keys
    #: published figures: metric -> value. Metrics: e2e_mean_s, output_tok_s, tpot_mean_ms,
    #: total_tok_s (input + output), ttft_mean_ms, ttft_median_ms, itl_median_ms
    published: dict[str, float] = field(default_factory=dict)
    note: str = ""


ORACLE = (
    "blogs.oracle.com/cloud-infrastructure/post/serving-llama-31-405b-model-with-amd-mi300x-gpus (2024-10-10)"
)
FP8KV = "vllm-project/vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md"
DSTACK = "dstackai/benchmarks Deepseek-R1/raw_data/online_results.csv (blog 2025-03-18)"
GPUSTACK = "gpustack/gpustack docs/performance-lab/deepseek-r1/h200.md (2025-11-12)"

#: vLLM 0.6's default max_num_seqs (the Oracle runs are vLLM of October 2024, V0 engine).
V0_SEQS = {"max_num_seqs": 256}

CASES: tuple[Case, ...] = (
    Case(
        "oracle-405b-mi300x-bs1",
        ORACLE,
        "llama-3.1-405b-fp8",
        "mi300x",
        8,
        "offline",
        1,
        128,
        128,
        engine=V0_SEQS,
        published={"e2e_mean_s": 3.530},
        note="benchmark_latency.py, batch 1, 128 in / 128 out: average latency 3.530 s (36 tok/s)",
    ),
    Case(
        "oracle-405b-mi300x-bs64",
        ORACLE,
        "llama-3.1-405b-fp8",
        "mi300x",
        8,
        "offline",
        64,
        128,
        128,
        engine=V0_SEQS,
        published={"e2e_mean_s": 6.919},
        note="benchmark_latency.py, batch 64: average latency 6.919 s (1184 tok/s)",
    ),
    Case(
        "oracle-405b-mi300x-tput-128-128",
        ORACLE,
        "llama-3.1-405b-fp8",
        "mi300x",
        8,
        "offline",
        1000,
        128,
        128,
        engine=V0_SEQS,
        published={"output_tok_s": 1993},
        note="benchmark_throughput.py, 128 / 128: 1993 output tok/s (1000 prompts assumed: its default)",
    ),
    Case(
        "oracle-405b-mi300x-tput-128-2048",
        ORACLE,
        "llama-3.1-405b-fp8",
        "mi300x",
        8,
        "offline",
        1000,
        128,
        2048,
        engine=V0_SEQS,
        published={"output_tok_s": 2794},
        note="benchmark_throughput.py, 128 / 2048: 2794 output tok/s (1000 prompts assumed)",
    ),
    Case(
        "fp8kv-llama8b-h100-bf16",
        FP8KV,
        "llama-3.1-8b",
        "h100",
        1,
        "concurrency",
        150,
        20000,
        2000,
        concurrency=8,
        range_ratio=0.15,
        published={"output_tok_s": 450.3, "ttft_median_ms": 763.6, "itl_median_ms": 15.18},
        note="Table 4, BF16 KV: 150 requests at concurrency 8, ~20k in / ~2k out (±15 %), vLLM 0.19.1",
    ),
    Case(
        "fp8kv-llama8b-h100-fp8",
        FP8KV,
        "llama-3.1-8b",
        "h100",
        1,
        "concurrency",
        150,
        20000,
        2000,
        concurrency=8,
        range_ratio=0.15,
        engine={"kv_cache_dtype": "fp8"},
        published={"output_tok_s": 517.5, "ttft_median_ms": 742.8, "itl_median_ms": 12.93},
        note="Table 4, FP8 KV cache",
    ),
    Case(
        "fp8kv-gptoss20b-h100-bf16",
        FP8KV,
        "gpt-oss-20b",
        "h100",
        1,
        "concurrency",
        150,
        20000,
        2000,
        concurrency=8,
        range_ratio=0.15,
        published={"output_tok_s": 831.6, "ttft_median_ms": 468.9, "itl_median_ms": 8.09},
        note="Table 5, BF16 KV (MXFP4 MoE weights, sliding window on half the layers)",
    ),
    Case(
        "fp8kv-gptoss20b-h100-fp8",
        FP8KV,
        "gpt-oss-20b",
        "h100",
        1,
        "concurrency",
        150,
        20000,
        2000,
        concurrency=8,
        range_ratio=0.15,
        engine={"kv_cache_dtype": "fp8"},
        published={"output_tok_s": 853.0, "ttft_median_ms": 451.7, "itl_median_ms": 7.90},
        note="Table 5, FP8 KV (all layers; the skip-SW variant is not modelled)",
    ),
    Case(
        "fp8kv-llama8b-b200-bf16-32k",
        FP8KV,
        "llama-3.1-8b",
        "b200",
        1,
        "concurrency",
        4,
        32768,
        128,
        concurrency=1,
        published={"itl_median_ms": 3.93 + 1.80e-5 * 32768},
        note="Fig. 5 fit on B200 (FlashInfer), concurrency 1, 128 out: ITL = 1.80e-05 ms/token x "
        "input + 3.93 ms, evaluated at 32,768 input tokens (4.52 ms)",
    ),
    Case(
        "fp8kv-llama8b-b200-fp8-32k",
        FP8KV,
        "llama-3.1-8b",
        "b200",
        1,
        "concurrency",
        4,
        32768,
        128,
        concurrency=1,
        engine={"kv_cache_dtype": "fp8"},
        published={"itl_median_ms": 3.96 + 9.72e-6 * 32768},
        note="Fig. 5 fit, FP8 KV: 9.72e-06 ms/token x input + 3.96 ms at 32,768 (4.28 ms)",
    ),
    Case(
        "dstack-r1-h200-c4",
        DSTACK,
        "deepseek-r1",
        "h200",
        8,
        "concurrency",
        500,
        3200,
        800,
        concurrency=4,
        published={"output_tok_s": 148.581247, "ttft_mean_ms": 975.65, "tpot_mean_ms": 25.73},
        note="vLLM 0.7.4.dev (FlashMLA), TP 8, random 3200 / 800 fixed, 500 prompts, SGLang bench_serving",
    ),
    Case(
        "dstack-r1-h200-c64",
        DSTACK,
        "deepseek-r1",
        "h200",
        8,
        "concurrency",
        500,
        3200,
        800,
        concurrency=64,
        published={"output_tok_s": 758.3782529, "ttft_mean_ms": 14164.37, "tpot_mean_ms": 65.62},
        note="as above, concurrency 64",
    ),
    Case(
        "dstack-r1-mi300x-c4",
        DSTACK,
        "deepseek-r1",
        "mi300x",
        8,
        "concurrency",
        500,
        3200,
        800,
        concurrency=4,
        published={"output_tok_s": 83.82220831, "ttft_mean_ms": 1259.24, "tpot_mean_ms": 46.20},
        note="vLLM 0.7.3.dev ROCm (rocm/vllm-dev:vllm-ds3-staging-0217), TP 8, same workload",
    ),
    Case(
        "dstack-r1-mi300x-c64",
        DSTACK,
        "deepseek-r1",
        "mi300x",
        8,
        "concurrency",
        500,
        3200,
        800,
        concurrency=64,
        published={"output_tok_s": 671.838344, "ttft_mean_ms": 12233.67, "tpot_mean_ms": 77.97},
        note="as above, concurrency 64",
    ),
    Case(
        "gpustack-r1-h200-4k",
        GPUSTACK,
        "deepseek-r1",
        "h200",
        8,
        "burst",
        500,
        4000,
        200,
        published={
            "total_tok_s": 15808.55,
            "output_tok_s": 753.67,
            "ttft_mean_ms": 63058.71,
            "tpot_mean_ms": 164.23,
        },
        note="vLLM 0.11.0 baseline (vllm serve DeepSeek-R1-0528 -tp 8), vllm bench serve random "
        "4000 / 200, 500 prompts, request rate inf (all sent at once)",
    ),
    Case(
        "gpustack-r1-h200-32k",
        GPUSTACK,
        "deepseek-r1",
        "h200",
        8,
        "burst",
        100,
        32000,
        100,
        published={"total_tok_s": 15514.57, "ttft_mean_ms": 101351.99, "tpot_mean_ms": 365.79},
        note="as above, random 32000 / 100, 100 prompts",
    ),
)


def lengths(case: Case, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Fixed lengths, or vllm bench's uniform (1 ± range_ratio) x mean."""
    if case.range_ratio <= 0:
        return np.full(case.n, case.prompt, dtype=np.int64), np.full(case.n, case.output, dtype=np.int64)
    rng = np.random.default_rng(seed)
    r = case.range_ratio
    p = rng.integers(int(case.prompt * (1 - r)), int(case.prompt * (1 + r)) + 1, size=case.n)
    o = rng.integers(int(case.output * (1 - r)), int(case.output * (1 + r)) + 1, size=case.n)
    return p.astype(np.int64), o.astype(np.int64)


def run_case(case: Case) -> dict[str, float]:
    """servesim's figures for ``case`` (the metrics its ``published`` names)."""
    prompt, output = lengths(case)
    longest = int((prompt + output).max()) + 1
    spec = DeploymentSpec(model=case.model, gpu=case.gpu, tp=case.tp, engine=dict(case.engine))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolved = resolve(spec, max_model_len=longest)
    profile = default_profile(case.gpu)
    rs = RequestSet(
        scheduled=np.zeros(case.n),
        prompt_len=prompt,
        output_len=output,
        prefix_group=[None] * case.n,
        prefix_len=np.zeros(case.n, dtype=np.int64),
        max_concurrency=case.concurrency if case.client == "concurrency" else None,
        label=case.key,
        server_side=case.client == "offline",
    )
    out = replay(rs, resolved.config, resolved.step_time, profile)
    s = summarize_latencies(out)
    done = out.finished
    span = float(np.nanmax(out.send[done] + out.e2e[done]) - np.min(out.send))
    res = {
        "e2e_mean_s": s["e2e_mean"] / 1e3,
        "output_tok_s": float(out.num_output[done].sum()) / span,
        "total_tok_s": float(out.num_output[done].sum() + prompt[done].sum()) / span,
        "tpot_mean_ms": s.get("tpot_mean", float("nan")),
        "ttft_mean_ms": s["ttft_mean"],
        "ttft_median_ms": float(np.median(out.ttft[done]) * 1e3),
        # vllm bench's median ITL is over every token gap, pooled: the engine's pooled ITL p50
        # (each gap a step's duration) of the last closed-loop round
        "itl_median_ms": out.result.summary.itl_ms.p50,
        "kv_blocks": float(resolved.config.num_gpu_blocks or 0),
        "rounds": float(out.rounds),
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run the cases whose key contains this")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument(
        "--write-uncalibrated",
        type=Path,
        metavar="FILE",
        help="write the rows on GPUs without a calibrated profile: the error bars' basis there",
    )
    args = ap.parse_args()
    rows = []
    for case in CASES:
        if args.only and args.only not in case.key:
            continue
        t0 = time.perf_counter()
        got = run_case(case)
        for metric, measured in case.published.items():
            pred = got[metric]
            rows.append(
                {
                    "case": case.key,
                    "gpu": case.gpu,
                    "model": case.model,
                    "metric": metric,
                    "published": measured,
                    "servesim": pred,
                    "error_pct": 100.0 * (pred - measured) / measured,
                    "seconds": time.perf_counter() - t0,
                }
            )
            if not args.json:
                print(
                    f"{case.key:34s} {metric:15s} published {measured:10.2f}  servesim {pred:10.2f}  "
                    f"error {100.0 * (pred - measured) / measured:+7.1f} %",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=2))
    if args.write_uncalibrated:
        args.write_uncalibrated.write_text(uncalibrated_document(rows), encoding="utf-8")


def uncalibrated_document(rows: list[dict[str, Any]]) -> str:
    """The rows on GPUs without a calibrated profile, as servesim ships them
    (``data/perf/uncalibrated_errors.json``, read by ``servesim.tuning.uncertainty``): the
    step-time model's error where it runs on generic priors."""
    calibrated = set(builtin_profile_names())
    kept = [
        {k: r[k] for k in ("case", "gpu", "model", "metric", "published")}
        | {"servesim": round(r["servesim"], 6)}
        for r in rows
        if r["gpu"] not in calibrated
    ]
    doc = {
        "source": "benchmarks/published.py: docs/perf.md, Published measurements",
        "about": "servesim's untuned predictions of published vLLM measurements on GPUs without a "
        "calibrated profile (generic priors); the error of a row is ln(servesim / published)",
        "rows": kept,
    }
    return json.dumps(doc, indent=1) + "\n"


if __name__ == "__main__":
    main()
