"""``vllm bench serve --save-result`` JSON as a calibration case: the benchmark's workload
re-created (its send times seeded as vllm bench draws them) with its mean latencies as targets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from servesim.engine import EngineConfig
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, resolve_gpu, resolve_model
from servesim.perf.errors import CalibrationError, PerfError
from servesim.perf.memory import kv_capacity
from servesim.perf.replay import RequestSet
from servesim.perf.workload_case import WorkloadCase

BENCH_TARGETS = {
    "mean_ttft_ms": "ttft_mean",
    "mean_tpot_ms": "tpot_mean",
    "mean_itl_ms": "itl_pooled_mean",
    "mean_e2el_ms": "e2e_mean",
}


def bench_arrivals(n: int, rate: float, burstiness: float, seed: int, rescale: bool = True) -> np.ndarray:
    """``vllm bench serve`` send times: gamma gaps (shape ``burstiness``, mean ``1/rate``) from t=0;
    with ``rescale`` the last request is sent at exactly ``n / rate`` (vLLM >= 0.3x behaviour).
    ``rate`` inf sends everything at t=0."""
    if n <= 0:
        return np.zeros(0)
    if not math.isfinite(rate):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    t = np.cumsum(gaps)
    if rescale and t[-1] > 0:
        t *= (n / rate) / t[-1]
    return t


def read_bench_result(
    path: str | Path,
    *,
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    num_gpu_blocks: int | None = None,
    gpu_memory_utilization: float = 0.9,
    seed: int = 0,
    rescale_arrivals: bool = True,
    catalog: Catalog | None = None,
) -> WorkloadCase:
    """A ``WorkloadCase`` from a ``vllm bench serve --save-result`` JSON file.

    The workload is re-created from the file: ``num_prompts`` requests (``completed`` if the
    count of prompts is missing), arrivals from ``request_rate``/``burstiness`` (seeded; the
    file does not record send times), ``max_concurrency`` as a client-side limit, per-request
    ``input_lens``/``output_lens`` when the file has them (``--save-detailed``) or else the mean
    lengths from ``total_input_tokens``/``total_output_tokens``. No prefix sharing (vllm bench's
    random dataset). Targets are the file's mean TTFT, TPOT, ITL and E2E latency.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{p}: cannot read benchmark result: {e}") from e
    if not isinstance(data, dict):
        raise CalibrationError(f"{p}: a vllm bench result is a JSON object")
    cat = catalog or load_catalog()
    ms = resolve_model(model, cat)
    gs = resolve_gpu(gpu, cat)
    completed = data.get("completed")
    n = int(data.get("num_prompts") or completed or 0)
    if n <= 0:
        raise CalibrationError(f"{p}: no num_prompts / completed count")
    rate_raw = data.get("request_rate", "inf")
    rate = math.inf if str(rate_raw).lower() in ("inf", "infinity", "none") else float(rate_raw)
    burst = float(data.get("burstiness") or 1.0)
    conc = data.get("max_concurrency")
    ins = data.get("input_lens")
    outs = data.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs) and ins:
        prompt = np.asarray(ins, dtype=np.int64)
        output = np.maximum(np.asarray(outs, dtype=np.int64), 1)
        n = len(prompt)
    else:
        done = int(completed or n)
        tin, tout = data.get("total_input_tokens"), data.get("total_output_tokens")
        if not tin or not tout or done <= 0:
            raise CalibrationError(
                f"{p}: needs input_lens/output_lens (--save-detailed) or "
                "total_input_tokens/total_output_tokens"
            )
        prompt = np.full(n, max(1, round(float(tin) / done)), dtype=np.int64)
        output = np.full(n, max(1, round(float(tout) / done)), dtype=np.int64)
    targets = {
        ours: float(data[theirs])
        for theirs, ours in BENCH_TARGETS.items()
        if isinstance(data.get(theirs), int | float) and float(data[theirs]) > 0
    }
    if not targets:
        raise CalibrationError(f"{p}: no latency means ({', '.join(BENCH_TARGETS)}) to fit")
    rs = RequestSet(
        scheduled=bench_arrivals(n, rate, burst, seed, rescale_arrivals),
        prompt_len=prompt,
        output_len=output,
        prefix_group=[None] * n,
        prefix_len=np.zeros(n, dtype=np.int64),
        max_concurrency=int(conc) if conc else None,
        label=f"vllm bench {p.name}",
    )
    longest = int(prompt.max() + output.max() + 1)
    if num_gpu_blocks is None:
        num_gpu_blocks = kv_capacity(
            ms,
            gs,
            tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=longest,
        ).num_gpu_blocks
    try:
        config = EngineConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_gpu_blocks=num_gpu_blocks,
        )
    except ValueError as e:
        raise PerfError(f"{p}: engine settings: {e}") from e
    return WorkloadCase(
        name=p.stem,
        requests=rs,
        config=config,
        model=ms,
        gpu=gs,
        tp=tp,
        targets=targets,
        info={"request_rate": rate, "burstiness": burst, "max_concurrency": conc, "num_prompts": n},
    )
