"""servesim's KV cache groups equal vLLM 0.33's ``HybridKVCacheCoordinator``, step by step.

The cases (``tools/oracle/make_hybrid_cases.py``) give vLLM's scheduler a model's layers --
gpt-oss's alternating sliding-window / full layers, Gemma 3's five sliding-window layers per full
one, Llama 4's three chunked-local layers per full one, windows and chunks scaled down to tens or
hundreds of tokens -- and let vLLM's own KV cache planning make the groups. Every step's scheduled
tokens, preemptions, finishes, KV blocks in use (blocks freed out of a window, a chunk's blocks
dropped), prefix-cache hits (each group's hit rule, sliding-window retention) and queue sizes must
match. ``make unit`` runs this file again on the pure-Python core.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import load_case, replay

from servesim.engine.kv_groups import KVCacheGroup, plan_groups

CASES_DIR = Path(__file__).parent / "oracle_hybrid_cases"
CASES = sorted(CASES_DIR.glob("*.json.gz"))


def test_the_cases_cover_each_kind_under_pressure_and_prefix_sharing() -> None:
    cases = [load_case(p) for p in CASES]
    assert len(cases) >= 30
    kinds = {g["kind"] for c in cases for g in c["config"]["kv_cache_groups"]}
    assert kinds == {"full", "sliding_window", "chunked_local"}
    for kind in ("sliding_window", "chunked_local"):
        mine = [c for c in cases if any(g["kind"] == kind for g in c["config"]["kv_cache_groups"])]
        assert sum(c["total_preemptions"] for c in mine) > 20, kind
        assert sum(c["prefix_cache_totals"]["hits"] for c in mine if c["prefix_cache_totals"]) > 1000, kind


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_servesim_plans_the_groups_vllm_planned(path: Path) -> None:
    case = load_case(path)
    layers = [KVCacheGroup(**x) for x in case["config"]["kv_layers"]]
    groups, _ = plan_groups(layers)
    assert [g.model_dump(exclude_none=True) for g in groups] == case["config"]["kv_cache_groups"]


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_engine_matches_vllm_step_for_step(path: Path) -> None:
    assert replay(load_case(path), fast=True, invariants_every_step=True) == []
