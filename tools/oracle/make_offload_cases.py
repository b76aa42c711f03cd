#!/usr/bin/env python3
"""Generate CPU-offload regression cases from vLLM's real scheduler + OffloadingConnector. Not run in CI.

Like ``make_cases.py``, but through ``tools/oracle/vllm_oracle.py`` (the shared oracle extended
with vLLM 0.33's OffloadingConnector, scheduler side, and a fake worker that reports every load
or store finished a chosen number of steps after it was issued). Cases are stored gzipped in the
``--out`` folder; the committed ones (``tests/engine/oracle_offload_cases/``, replayed by
``tests/engine/test_oracle_offload.py``) are only replaced with ``--force``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_offload_cases.py --out DIR
        [--seed 0] [--per-family 6]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_cases import (  # noqa: E402
    add_maker_args,
    cdiv,
    draw_cases,
    oracle_runs,
    out_folder,
    step_row,
    store_case,
)


def trace(rng: random.Random, fam: str) -> list[dict]:
    """Multi-turn-like traffic: a few long shared prefixes, requests coming back to them."""
    n = rng.randint(10, 60)
    groups = [f"g{i}" for i in range(rng.randint(2, 6))]
    glen = {g: rng.choice([64, 128, 200, 256, 400, 512]) for g in groups}
    rows = []
    for i in range(n):
        g = rng.choice(groups)
        plen = glen[g] + rng.randint(1, 200)
        row = {
            "req_id": f"r{i:03d}",
            "arrival_step": rng.randint(0, 400 if fam != "offload_preempt" else 120),
            "prompt_len": plen,
            "output_len": rng.randint(1, 60 if fam != "offload_preempt" else 150),
            "prefix_group": g,
            "prefix_len": glen[g],
        }
        if rng.random() < 0.15:  # an unrelated prompt
            del row["prefix_group"], row["prefix_len"]
        if fam == "offload_priority":
            row["priority"] = rng.randint(0, 3)
        rows.append(row)
    rows.sort(key=lambda r: r["arrival_step"])
    return rows


def config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 32])
    need = cdiv(mml, bs) + 1
    prefix_blocks = sum({r.get("prefix_group"): r.get("prefix_len", 0) for r in rows}.values()) // bs
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([256, 512, 1024, 2048]),
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "long_prefill_token_threshold": rng.choice([0, 0, 64]),
        "policy": "fcfs",
        "max_model_len": mml,
        "num_gpu_blocks": need + rng.randint(0, need),  # KV pressure: prefixes fall out of the GPU
        "kv_offload_chunks": prefix_blocks * 4 + 50,
        "kv_offload_blocks_per_chunk": rng.choice([1, 1, 2]),
        "load_delay_steps": rng.randint(0, 3),
        "store_delay_steps": rng.randint(0, 3),
    }
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    if fam == "offload_small":  # the CPU tier holds less than the prefixes in play
        cfg["kv_offload_chunks"] = max(1, prefix_blocks // (3 * cfg["kv_offload_blocks_per_chunk"]))
    if fam == "offload_preempt":  # decodes outgrow the pool: preemptions, resumed from the CPU tier
        cfg["num_gpu_blocks"] = need + rng.randint(0, need // 3 + 1)
        cfg["max_num_seqs"] = rng.choice([8, 16, 64])
    if fam == "offload_priority":  # the priority policy: its victims and queue order
        cfg["policy"] = "priority"
        cfg["num_gpu_blocks"] = need + rng.randint(0, need // 2 + 1)
    if fam == "offload_mixed":  # bigger offload chunks, chunked prefill off, a watermark
        cfg["kv_offload_blocks_per_chunk"] = rng.choice([2, 4])
        cfg["kv_offload_chunks"] = max(2, cfg["kv_offload_chunks"] // rng.choice([1, 4, 8]))
        if rng.random() < 0.5:
            cfg["enable_chunked_prefill"] = False
            cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
            cfg["long_prefill_token_threshold"] = 0
        if rng.random() < 0.5:
            cfg["watermark"] = rng.choice([0.01, 0.05])
    return cfg


def offload_steps(records: list[dict]) -> list[list]:
    """An offload case's ``steps``: the plain columns, then blocks loaded, blocks stored and the
    requests waiting for their KV."""
    return [
        [
            *step_row(d),
            sum(x[2] for x in d["offload"]["loads"]),
            sum(x[2] for x in d["offload"]["stores"]),
            d["waiting_for_kv"],
        ]
        for d in records
    ]


FAMILIES = ["offload_reuse", "offload_small", "offload_preempt", "offload_priority", "offload_mixed"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_maker_args(ap, 6)
    ap.add_argument(
        "--families", nargs="*", default=FAMILIES, help="only these families (the others are skipped)"
    )
    args = ap.parse_args()
    out = out_folder(args.out, args.force)
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"  # vLLM warns on every store the full tier refuses
    # every family drawn, so that a family's cases do not depend on --families
    drawn = draw_cases(random.Random(args.seed), FAMILIES, args.per_family, trace, config)
    cases = [c for c in drawn if c[0].rsplit("_", 1)[0] in args.families]
    for name, rows, cfg, summary, records in oracle_runs(cases, skip_refused=True):
        store_case(
            out,
            name,
            summary,
            cfg,
            rows,
            offload_steps(records),
            totals=("prefix_cache_totals", "offload_totals"),
            note=f", offload {summary['offload_totals']}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
