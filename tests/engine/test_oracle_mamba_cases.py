"""servesim's Mamba KV cache groups equal vLLM 0.33's ``MambaManager``, step by step.

The cases (``tools/oracle/make_hybrid_cases.py --families mamba_basic,mamba_pressure,mamba_mixed
--per-family 4 --seed 50``) give vLLM's scheduler Qwen3-Next's layer pattern -- three GatedDeltaNet
layers (vLLM's ``MambaSpec``, their state padded to the attention page) per full-attention one --
and let vLLM's own KV cache planning make the groups: three mamba groups and one full group. They
run without prefix caching (``mamba_cache_mode`` "none", the mode servesim models; vLLM's
``MambaManager`` refuses prefix caching in any other mode than "align"), so a request holds one
state block per mamba group from its first step to its finish or preemption. Every step's
scheduled tokens, preemptions, finishes, KV blocks in use and queue sizes must match, and so must
each group's blocks in use. ``make unit`` runs this file again on the pure-Python core.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import groups_planned_as_vllm, load_case, mamba_groups_match_step_for_step

CASES = sorted((Path(__file__).parent / "oracle_mamba_cases").glob("*.json.gz"))
IDS = [p.name.removesuffix(".json.gz") for p in CASES]


def test_the_cases_preempt_under_pressure_with_mamba_groups() -> None:
    cases = [load_case(p) for p in CASES]
    assert len(cases) >= 12
    for c in cases:
        assert [g["kind"] for g in c["config"]["kv_cache_groups"]] == ["mamba", "mamba", "mamba", "full"]
        assert c["config"]["enable_prefix_caching"] is False
    assert sum(c["total_preemptions"] for c in cases) > 50


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_servesim_plans_the_groups_vllm_planned(path: Path) -> None:
    groups_planned_as_vllm(load_case(path))


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_engine_and_each_groups_blocks_match_vllm_step_for_step(path: Path) -> None:
    mamba_groups_match_step_for_step(load_case(path))
