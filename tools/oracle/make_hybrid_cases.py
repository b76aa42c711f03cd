#!/usr/bin/env python3
"""Generate hybrid-KV-cache cases (sliding-window, chunked-local and Mamba layers) from vLLM's scheduler.

Each case is a random trace + scheduler config + a model's layer pattern, scaled down so windows
and chunks matter at a few hundred tokens: gpt-oss's alternating sliding-window / full layers,
Gemma 3's five sliding-window layers per full one, Llama 4's three chunked-local layers per
full one, and Qwen3-Next's three GatedDeltaNet (Mamba-spec state) layers per full one, run
without prefix caching (``mamba_cache_mode`` "none", the mode servesim models: vLLM's
``MambaManager`` refuses prefix caching in any other mode than "align"). ``vllm_oracle.py`` plans the KV cache config from those layer specs with vLLM 0.33's own
``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` and runs vLLM's ``Scheduler`` (its
``HybridKVCacheCoordinator``) on CPU; the groups vLLM made are stored in the case's config as
``kv_cache_groups`` (what servesim replays with), the layers as ``kv_layers``; each step's blocks
in use per group as ``group_steps``. Committed cases: ``tests/engine/oracle_hybrid_cases/``,
replayed by ``tests/engine/test_oracle_hybrid_cases.py``, and (with ``group_steps``)
``tests/engine/oracle_hybrid_usage_cases/``, by ``tests/engine/test_oracle_hybrid_usage.py``;
like every maker this one refuses to write into a committed folder unless given ``--force``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_hybrid_cases.py --out DIR [--seed 0] \
        [--per-family 4]
    # the Mamba cases (tests/engine/oracle_mamba_cases, replayed by test_oracle_mamba_cases.py):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_hybrid_cases.py --out DIR --seed 50 \
        --families mamba_basic,mamba_pressure,mamba_mixed
    # the Mamba cases with prefix caching, mamba_cache_mode "align"
    # (tests/engine/oracle_mamba_align_cases, replayed by test_oracle_mamba_align_cases.py):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_hybrid_cases.py --out DIR --seed 51 \
        --families mamba_align_prefix,mamba_align_pressure,mamba_align_mixed,mamba_align_block,\
mamba_align_ckpt_prefix,mamba_align_ckpt_pressure,mamba_align_ckpt_mixed
"""

from __future__ import annotations

import argparse
import random
import sys

from make_cases import (
    COMMITTED,
    add_maker_args,
    cdiv,
    chosen_families,
    draw_cases,
    oracle_runs,
    out_folder,
    plain_steps,
    random_trace,
    store_case,
)

COMMITTED["hybrid"] = COMMITTED["plain"].parent / "oracle_hybrid_cases"
COMMITTED["hybrid_usage"] = COMMITTED["plain"].parent / "oracle_hybrid_usage_cases"
COMMITTED["mamba"] = COMMITTED["plain"].parent / "oracle_mamba_cases"


def layers_of(pattern: str, window: int) -> list[dict]:
    """One model's layer kinds in order: gpt-oss (sliding, full, ...), Gemma 3 (five sliding then
    a full one), Llama 4 (three chunked-local then a full, NoPE one)."""
    sw = {"kind": "sliding_window", "window": window}
    cl = {"kind": "chunked_local", "window": window}
    full = {"kind": "full"}
    if pattern == "gpt_oss":
        return [sw, full] * 3
    if pattern == "gemma3":
        return [sw] * 5 + [full]
    if pattern == "llama4":
        return [cl, cl, cl, full] * 2
    if pattern == "qwen3_next":
        return [{"kind": "mamba"}] * 3 + [full]
    raise SystemExit(f"unknown pattern {pattern}")


def num_groups(layers: list[dict]) -> list[dict]:
    """The groups vLLM plans for equal page sizes (only to size the pool before vLLM runs)."""
    buckets: dict[str, list[dict]] = {}
    for x in layers:
        buckets.setdefault(repr(sorted(x.items())), []).append(x)
    if len(buckets) == 1:
        return [layers[0]]
    small = min(len(b) for b in buckets.values())
    large = max(len(b) for b in buckets.values())
    size = large if large < small * 1.5 else small
    return [b[0] for b in buckets.values() for _ in range(cdiv(len(b), size))]


def one_sequence_blocks(
    groups: list[dict], mml: int, bs: int, mbt: int, align: bool = False, checkpoints: int = 0
) -> int:
    """Blocks one sequence of ``mml`` tokens can hold at once (windowed groups capped)."""
    full = cdiv(mml, bs)
    total = 0
    for g in groups:
        w = g.get("window")
        if g["kind"] == "mamba":  # one state block per request ("align": the previous one too)
            total += 2 + checkpoints if align else 1
        elif g["kind"] == "sliding_window":
            total += cdiv(min(w - 1 + mbt, mml), bs) + 1
        elif g["kind"] == "chunked_local":
            total += cdiv(min(w + mbt, mml), bs)
        else:
            total += full
    return total


#: family -> (layer pattern, trace family of make_cases, under KV pressure)
FAMILIES = {
    "swa_basic": ("gpt_oss", "basic", False),
    "swa_prefix": ("gpt_oss", "prefix", False),
    "swa_pressure": ("gpt_oss", "prefix_pressure", True),
    "swa_gemma": ("gemma3", "prefix", True),
    "chunked_basic": ("llama4", "basic", False),
    "chunked_prefix": ("llama4", "prefix", False),
    "chunked_pressure": ("llama4", "prefix_pressure", True),
    "hybrid_mixed": ("mixed", "mixed", True),
    "mamba_basic": ("qwen3_next", "basic", False),
    "mamba_pressure": ("qwen3_next", "prefix_pressure", True),
    "mamba_mixed": ("qwen3_next", "mixed", True),
    # prefix caching on: vLLM's mamba_cache_mode "align" (tests/engine/oracle_mamba_align_cases)
    "mamba_align_prefix": ("qwen3_next", "prefix", False),
    "mamba_align_pressure": ("qwen3_next", "prefix_pressure", True),
    "mamba_align_mixed": ("qwen3_next", "mixed", True),
    "mamba_align_block": ("qwen3_next", "prefix_pressure", True),
    # ... with a prefill checkpoint block (GatedDeltaNet on FlashInfer: Hopper)
    "mamba_align_ckpt_prefix": ("qwen3_next", "prefix", False),
    "mamba_align_ckpt_pressure": ("qwen3_next", "prefix_pressure", True),
    "mamba_align_ckpt_mixed": ("qwen3_next", "mixed", True),
}
#: The families made without --families: the windowed ones (the committed hybrid cases' command
#: stays as it was); the mamba families are asked for by name (tests/engine/oracle_mamba_cases).
DEFAULT_FAMILIES = [f for f in FAMILIES if not f.startswith("mamba_")]


def trace(rng: random.Random, fam: str) -> list[dict]:
    """A trace of the ``make_cases`` family that ``fam`` draws its traffic from."""
    return random_trace(rng, FAMILIES[fam][1])


def random_config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    pattern, trace_fam, pressure = FAMILIES[fam]
    align = fam.startswith("mamba_align_")
    if pattern == "mixed":
        pattern = rng.choice(["gpt_oss", "gemma3", "llama4"])
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 8, 32])
    window = rng.choice([32, 64, 128, 200]) if pattern != "llama4" else rng.choice([64, 128, 256])
    layers = layers_of(pattern, window)
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64]),
        "max_num_batched_tokens": rng.choice([128, 256, 512, 1024]),
        "enable_chunked_prefill": True,
        # a Mamba layout runs without prefix caching (mode "none") but in the mamba_align_
        # families, which run with it (mode "align")
        "enable_prefix_caching": align
        or (pattern != "qwen3_next" and (trace_fam != "basic" or rng.random() < 0.3)),
        "long_prefill_token_threshold": 0,
        "policy": "fcfs",
        "max_model_len": mml,
        "kv_layers": layers,
    }
    if fam == "mamba_align_block":  # blocks wider than a chunk: sub-block progress, re-aligned
        cfg["block_size"] = bs = rng.choice([32, 64, 128])
        cfg["max_num_seqs"] = rng.choice([2, 4, 8])
        cfg["max_num_batched_tokens"] = rng.choice([16, 32, 64, 128])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 0, 16, 48])
    ckpt = 1 if fam.startswith("mamba_align_ckpt_") else 0
    if ckpt:
        cfg["mamba_prefill_checkpoint_blocks"] = 1
    need = one_sequence_blocks(num_groups(layers), mml, bs, cfg["max_num_batched_tokens"], align, ckpt) + 1
    cfg["num_gpu_blocks"] = need + (rng.randint(0, need) if pressure else rng.randint(0, 6 * need))
    if fam in ("hybrid_mixed", "mamba_mixed", "mamba_align_mixed", "mamba_align_ckpt_mixed"):
        cfg["policy"] = rng.choice(["fcfs", "priority"])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 32, 128])
        if rng.random() < 0.3:
            cfg["watermark"] = rng.choice([0.01, 0.05])
        if rng.random() < 0.3:
            cfg["scheduler_reserve_full_isl"] = False
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    return cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_maker_args(ap, 4, f"comma-separated, of: {', '.join(FAMILIES)} (default: all but the mamba_ ones)")
    args = ap.parse_args()
    chosen = chosen_families(ap, args.families, DEFAULT_FAMILIES, list(FAMILIES))
    out = out_folder(args.out, args.force)
    cases = draw_cases(random.Random(args.seed), chosen, args.per_family, trace, random_config)
    for name, rows, cfg, summary, records in oracle_runs(cases):
        groups = summary["kv_cache_groups"]
        store_case(
            out,
            name,
            summary,
            {**cfg, "kv_cache_groups": groups},
            rows,
            plain_steps(records),
            # each step's blocks in use per KV cache group (vLLM's managers' tables)
            group_steps=[[r["step"], r["kv_group_blocks"]] for r in records],
            note=f", groups {[g['kind'][0] for g in groups]}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
