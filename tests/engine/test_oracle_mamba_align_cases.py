"""servesim's Mamba KV cache groups with prefix caching equal vLLM 0.33's "align" mode, step by step.

With prefix caching on (vLLM's default for a hybrid Mamba model) vLLM runs its state layers in
``mamba_cache_mode`` "align": the scheduler cuts prefill chunks at block boundaries
(``_mamba_block_aligned_split``), ``MambaManager`` keeps the state after each block boundary in
that block (the running one and the one it was copied from; a prefill checkpoint block where the
backend exports one), publishes only the states a later request can resume at (the prompt's last
block boundary, a shared-prefix junction), and a hit ends where a cached state does: the
coordinator's common length over the full-attention and mamba groups. The cases
(``tests/engine/oracle_mamba_align_cases/README.md`` gives the maker's command) are Qwen3-Next's
layer pattern with shared prefixes, prompts longer than a block and KV pressure; every step's
scheduled tokens, preemptions, finishes, prefix hits, KV blocks in use and queue sizes must match,
and so must each group's blocks in use. ``make unit`` runs this file again on the pure-Python core.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import groups_planned_as_vllm, load_case, mamba_groups_match_step_for_step

CASES = sorted((Path(__file__).parent / "oracle_mamba_align_cases").glob("*.json.gz"))
IDS = [p.name.removesuffix(".json.gz") for p in CASES]


def test_the_cases_hit_split_and_preempt_with_prefix_caching_beside_mamba_groups() -> None:
    cases = [load_case(p) for p in CASES]
    assert len(cases) >= 28
    for c in cases:
        assert [g["kind"] for g in c["config"]["kv_cache_groups"]] == ["mamba", "mamba", "mamba", "full"]
        assert c["config"]["enable_prefix_caching"] is True
    assert sum(c["total_preemptions"] for c in cases) > 500
    assert sum(c["prefix_cache_totals"]["hits"] for c in cases) > 5000
    assert sum(c["prefix_cache_totals"]["preempted_hits"] for c in cases) > 5000
    assert sum(c["config"].get("mamba_prefill_checkpoint_blocks", 0) for c in cases) == 12
    # blocks wider than the chunk limit: the split advances within a block
    assert any(c["config"]["block_size"] > c["config"]["max_num_batched_tokens"] for c in cases)


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_servesim_plans_the_groups_vllm_planned(path: Path) -> None:
    groups_planned_as_vllm(load_case(path))


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_engine_and_each_groups_blocks_match_vllm_step_for_step(path: Path) -> None:
    mamba_groups_match_step_for_step(load_case(path))
