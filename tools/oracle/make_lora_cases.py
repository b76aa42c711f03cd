#!/usr/bin/env python3
"""Generate LoRA cases from vLLM's real scheduler (the oracle): requests naming adapters under
vLLM's ``max_loras`` constraint. Not run in CI.

vLLM 0.33's waiting loop skips a request whose adapter would make one distinct adapter too many
among the running requests (``scheduled_loras``); the skipped requests go back to the front of
the queue in their order. Each case is a random trace whose rows name adapters (``lora``; some
use the base model) and a scheduler config with ``enable_lora``/``max_loras``, run through
``vllm_oracle.py`` with a real ``LoRAConfig`` and ``LoRARequest`` objects. The committed cases
(``tests/engine/oracle_lora_cases/``) are replayed through servesim by
``tests/engine/test_oracle_lora_cases.py``; this maker refuses to write there unless given
``--force``. See ``tools/oracle/README.md``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_lora_cases.py --out DIR [--seed 0] [--per-family 5]
"""

from __future__ import annotations

import random
import sys

from make_cases import (
    cdiv,
    make_plain_cases,
)

#: basic: adapters beside base-model requests; pressure: a tight KV pool (preemptions free an
#: adapter's slot); prefix: prefix caching with groups shared across adapters (vLLM hashes the
#: adapter's name into every block); priority: the priority policy; small_seqs: a small batch;
#: roomy: max_loras at or above the adapters in use (the constraint never binds); async: vLLM's
#: AsyncScheduler.
FAMILIES = ["basic", "pressure", "prefix", "priority", "small_seqs", "roomy", "async"]


def lora_trace(rng: random.Random, fam: str) -> list[dict]:
    n = rng.randint(6, 40) if rng.random() < 0.7 else rng.randint(60, 120)
    burst = rng.random() < 0.5
    adapters = [f"lora{i}" for i in range(rng.randint(2, 6))]
    base_share = rng.choice([0.0, 0.2, 0.5])
    groups = [f"g{i}" for i in range(rng.randint(1, 2))]
    rows = []
    for i in range(n):
        plen = round(10 ** rng.uniform(0, 2.8))
        row = {
            "req_id": f"r{i:03d}",
            "arrival_step": 0 if burst else rng.randint(0, 120),
            "prompt_len": plen,
            "output_len": rng.randint(1, 80),
        }
        if rng.random() >= base_share:
            # a skewed popularity: the first adapters are named most
            row["lora"] = adapters[min(int(rng.expovariate(0.8)), len(adapters) - 1)]
        if fam == "prefix" and rng.random() < 0.8 and plen > 2:
            row["prefix_group"] = rng.choice(groups)
            row["prefix_len"] = rng.randint(max(1, plen // 2), plen - 1)
        if fam == "priority":
            row["priority"] = rng.randint(0, 3)
        rows.append(row)
    rows.sort(key=lambda r: r["arrival_step"])
    return rows


def lora_config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 8, 32])
    used = len({r["lora"] for r in rows if r.get("lora")})
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([256, 512, 1024, 2048]),
        "enable_chunked_prefill": rng.random() < 0.85,
        "enable_prefix_caching": fam == "prefix" or rng.random() < 0.3,
        "long_prefill_token_threshold": rng.choice([0, 0, 32]),
        "policy": "priority" if fam == "priority" else "fcfs",
        "max_model_len": mml,
        "enable_lora": True,
        # below the adapters in use, so the constraint can bind (roomy: at or above them)
        "max_loras": rng.randint(1, max(1, min(3, used - 1))),
        "max_lora_rank": rng.choice([8, 16, 64]),
    }
    need = cdiv(mml, bs) + 1
    cfg["num_gpu_blocks"] = need + rng.randint(0, 3000)
    if not cfg["enable_chunked_prefill"]:
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
    if fam in ("pressure", "priority"):
        cfg["num_gpu_blocks"] = need + rng.randint(0, need)
    if fam == "small_seqs":
        cfg["max_num_seqs"] = rng.choice([1, 2, 3])
    if fam == "roomy":
        cfg["max_loras"] = max(1, used + rng.randint(0, 2))
    if fam == "async":
        cfg["async_scheduling"] = True
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    return cfg


def main() -> int:
    return make_plain_cases(__doc__, 5, FAMILIES, lora_trace, lora_config, "lora_")


if __name__ == "__main__":
    sys.exit(main())
