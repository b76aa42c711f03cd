#!/usr/bin/env python3
"""Generate P/D-disaggregation regression cases from vLLM's real scheduler + NixlConnector. Not run in CI.

Like ``make_offload_cases.py``, through ``tools/oracle/vllm_oracle.py`` with ``pd_connector``: vLLM
0.33's NixlConnector, scheduler side (kv_both), and a fake worker that reports each receive
finished ``load_delay_steps`` after the step that issued it and each send ``store_delay_steps``
after the step that handed it over. Trace rows with ``"pd": "decode"`` arrive with their prompt's
KV remote (``do_remote_prefill``), rows with ``"pd": "prefill"`` are prefill legs (``max_tokens``
1, ``do_remote_decode``: blocks kept until the send is done), other rows are served locally (a
decode replica prefilling a short prompt itself). Cases are stored gzipped in the ``--out``
folder; the committed ones (``tests/engine/oracle_pd_cases/``, replayed by
``tests/engine/test_oracle_pd.py``) are only replaced with ``--force``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_pd_cases.py --out DIR [--seed 0] [--per-family 6]
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

FAMILIES = ["pd_decode", "pd_prefill", "pd_mixed", "pd_pressure", "pd_priority"]


def trace(rng: random.Random, fam: str) -> list[dict]:
    n = rng.randint(10, 50)
    groups = [f"g{i}" for i in range(rng.randint(1, 5))]
    glen = {g: rng.choice([32, 64, 128, 256]) for g in groups}
    rows = []
    for i in range(n):
        g = rng.choice(groups)
        plen = glen[g] + rng.randint(1, 300)
        if fam == "pd_prefill":
            kind = "prefill" if rng.random() < 0.85 else None
        elif fam in ("pd_decode", "pd_pressure"):
            kind = "decode" if rng.random() < 0.8 else None
        else:
            kind = rng.choice(["decode", "decode", "prefill", None])
        if kind is None and rng.random() < 0.7:
            plen = rng.randint(4, 60)  # short prompts are prefilled locally
        out = 1 if kind == "prefill" else rng.randint(1, 120 if fam == "pd_pressure" else 40)
        row = {
            "req_id": f"r{i:03d}",
            "arrival_step": rng.randint(0, 150 if fam == "pd_pressure" else 300),
            "prompt_len": plen,
            "output_len": out,
            "prefix_group": g,
            "prefix_len": min(glen[g], plen),
        }
        if kind is not None:
            row["pd"] = kind
        if rng.random() < 0.2:
            del row["prefix_group"], row["prefix_len"]
        if fam == "pd_priority":
            row["priority"] = rng.randint(0, 3)
        rows.append(row)
    rows.sort(key=lambda r: r["arrival_step"])
    return rows


def config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 32])
    need = cdiv(mml, bs) + 1
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([256, 512, 1024, 2048]),
        "enable_chunked_prefill": True,
        "enable_prefix_caching": rng.random() < 0.8,
        "long_prefill_token_threshold": rng.choice([0, 0, 64]),
        "policy": "priority" if fam == "pd_priority" else "fcfs",
        "max_model_len": mml,
        "num_gpu_blocks": need * rng.choice([2, 4, 8]) + rng.randint(0, need),
        "pd_connector": True,
        "load_delay_steps": rng.randint(0, 4),
        "store_delay_steps": rng.randint(0, 4),
    }
    if fam == "pd_pressure":  # decodes outgrow the pool: preemptions after the KV landed
        cfg["num_gpu_blocks"] = need + rng.randint(0, need // 2 + 1)
        cfg["max_num_seqs"] = rng.choice([16, 64])
    if fam == "pd_prefill":  # blocks held for sends fill the pool
        cfg["num_gpu_blocks"] = need + rng.randint(0, 2 * need)
        cfg["store_delay_steps"] = rng.randint(2, 8)
    if fam == "pd_mixed" and rng.random() < 0.4:
        cfg["enable_chunked_prefill"] = False
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
        cfg["long_prefill_token_threshold"] = 0
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    return cfg


def pd_steps(records: list[dict]) -> tuple[list[list], dict[str, int]]:
    """A P/D case's ``steps`` (the plain columns, then blocks received, sends done and the
    requests waiting for their KV) and its ``pd_totals``."""
    steps = []
    totals = {"recvs": 0, "recv_blocks": 0, "sends": 0}
    for d in records:
        x = d["offload"]
        totals["recvs"] += len(x["recvs"])
        totals["recv_blocks"] += sum(b for _, b in x["recvs"])
        totals["sends"] += len(x["sends"])
        steps.append([*step_row(d), sum(b for _, b in x["recvs"]), len(x["sends"]), d["waiting_for_kv"]])
    return steps, totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_maker_args(ap, 6)
    args = ap.parse_args()
    out = out_folder(args.out, args.force)
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
    cases = draw_cases(random.Random(args.seed), FAMILIES, args.per_family, trace, config)
    for name, rows, cfg, summary, records in oracle_runs(cases, skip_refused=True):
        steps, totals = pd_steps(records)
        store_case(
            out,
            name,
            summary,
            cfg,
            rows,
            steps,
            totals=(),
            note=f", {totals}",
            pd_totals=totals,
            unfinished=summary.get("unfinished", []),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
