#!/usr/bin/env python3
"""Generate pipeline-parallel cases from vLLM's real scheduler (the oracle): the AsyncScheduler of
a ``ParallelConfig(pipeline_parallel_size=P)`` driven through ``EngineCore.step_with_batch_queue``.
Not run in CI.

vLLM 0.33 with ``--pipeline-parallel-size P`` schedules asynchronously (the V2 model runner) with a
batch queue of ``max_concurrent_batches = P + 1`` steps: a step is scheduled while the queue has
room, the oldest step's output applied when it is full; a request that samples in step k is not
scheduled for decode again before step k + P (``next_decode_eligible_step``). Each case is a
random trace, every request arriving before the first step (the cases check the schedule, not
when arrivals meet it: servesim's clock is the stages' times, the harness's the step count), and
a scheduler config, run through ``vllm_oracle.py``. The committed cases
(``tests/engine/oracle_pp_cases/``) are replayed through servesim, step for step on both cores,
by ``tests/engine/test_oracle_pp_cases.py``; this maker refuses to write there unless given
``--force``. See ``tools/oracle/README.md``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_pp_cases.py --out DIR [--seed 0] [--per-family 4]
"""

from __future__ import annotations

import random
import sys

from make_cases import (
    cdiv,
    make_plain_cases,
)

#: basic: P = 2 with a roomy pool; pressure: a tight KV pool (preemptions of requests with steps
#: in flight); small_seqs: fewer seats than stages; chunked: long prompts over a small token budget
#: (prefill chunks of one request in consecutive steps); prefix: prefix caching with shared
#: prefixes; priority: the priority policy; pp3, pp4: three and four stages.
FAMILIES = ["basic", "pressure", "small_seqs", "chunked", "prefix", "priority", "pp3", "pp4"]


def pp_trace(rng: random.Random, fam: str) -> list[dict]:
    n = rng.randint(3, 30) if rng.random() < 0.7 else rng.randint(40, 80)
    groups = [f"g{i}" for i in range(rng.randint(1, 2))]
    rows = []
    for i in range(n):
        plen = round(10 ** rng.uniform(0, 3.0 if fam == "chunked" else 2.6))
        row = {"req_id": f"r{i:03d}", "arrival_step": 0, "prompt_len": plen, "output_len": rng.randint(1, 60)}
        if fam == "prefix" and rng.random() < 0.8 and plen > 2:
            row["prefix_group"] = rng.choice(groups)
            row["prefix_len"] = rng.randint(max(1, plen // 2), plen - 1)
        if fam == "priority":
            row["priority"] = rng.randint(0, 3)
        rows.append(row)
    return rows


def pp_config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 8, 32])
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([128, 256, 512, 2048]),
        "enable_chunked_prefill": rng.random() < 0.85,
        "enable_prefix_caching": fam == "prefix" or rng.random() < 0.3,
        "long_prefill_token_threshold": rng.choice([0, 0, 32]),
        "policy": "priority" if fam == "priority" else "fcfs",
        "max_model_len": mml,
        "async_scheduling": True,
        "pipeline_parallel_size": {"pp3": 3, "pp4": 4}.get(fam, 2),
    }
    need = cdiv(mml, bs) + 1
    cfg["num_gpu_blocks"] = need + rng.randint(0, 3000)
    if fam in ("pressure", "priority"):
        cfg["num_gpu_blocks"] = need + rng.randint(0, need)
    if fam == "small_seqs":
        cfg["max_num_seqs"] = rng.choice([1, 2, 3])
    if fam == "chunked":
        cfg["enable_chunked_prefill"] = True
        cfg["max_num_batched_tokens"] = rng.choice([64, 128])
    if not cfg["enable_chunked_prefill"]:
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    return cfg


def main() -> int:
    return make_plain_cases(__doc__, 4, FAMILIES, pp_trace, pp_config, "pp_")


if __name__ == "__main__":
    sys.exit(main())
