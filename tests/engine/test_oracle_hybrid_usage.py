"""Each KV cache group's blocks in use equal vLLM 0.33's, step by step.

The cases (``tools/oracle/make_hybrid_cases.py --seed 1 --per-family 2``) are made as the hybrid
cases are -- gpt-oss, Gemma 3 and Llama 4 layer patterns, vLLM's own KV cache planning, its
``Scheduler`` on CPU -- and also record, every step, the distinct real blocks each group's manager
holds in its tables (``group_steps``: vLLM has no per-group usage metric; this is its state). The
schedule must match (as for the other hybrid cases) and so must every group's count, which is
what a run's ``kv_usage_by_group``, the steps' ``kv_usage:<kind>`` columns, the step log and the
dashboard's gauge are made of (docs/engine.md). ``make unit`` runs this file again on the
pure-Python core.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import group_counts_by_step, load_case, replay

CASES = sorted((Path(__file__).parent / "oracle_hybrid_usage_cases").glob("*.json.gz"))


def test_the_cases_preempt_and_share_prefixes_in_every_kind() -> None:
    cases = [load_case(p) for p in CASES]
    assert len(cases) >= 16
    kinds = {g["kind"] for c in cases for g in c["config"]["kv_cache_groups"]}
    assert kinds == {"full", "sliding_window", "chunked_local"}
    for kind in ("sliding_window", "chunked_local"):
        mine = [c for c in cases if any(g["kind"] == kind for g in c["config"]["kv_cache_groups"])]
        assert sum(c["total_preemptions"] for c in mine) > 5, kind
        assert sum(c["prefix_cache_totals"]["hits"] for c in mine if c["prefix_cache_totals"]) > 500, kind


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_each_groups_blocks_match_vllm_step_for_step(path: Path) -> None:
    case = load_case(path)
    assert replay(case) == []  # the same schedule first: the counts are compared step by step
    ours = group_counts_by_step(case)
    kv_used = {row[0]: row[4] for row in case["steps"]}
    compared = 0
    for step, want in case["group_steps"]:
        if step not in ours:  # a step vLLM ran without scheduling anything (replay checked it)
            continue
        assert sum(want) == kv_used[step]  # vLLM's groups add up to its pool's blocks in use
        assert ours[step] == want, f"step {step}: vLLM {want}, servesim {ours[step]}"
        compared += 1
    assert compared == len(ours)
