"""servesim's LoRA admission equals vLLM 0.33's scheduler, step by step, on both cores.

The cases were made by ``tools/oracle/make_lora_cases.py --seed 0``: vLLM's own ``Scheduler``
(and ``AsyncScheduler``) built with a real ``LoRAConfig(max_loras, max_lora_rank)``, its requests
carrying ``LoRARequest`` objects. vLLM's waiting loop skips a request whose adapter would make
one distinct adapter too many among the running requests (scheduled in the step or not), and the
skipped requests go back to the front of the queue in their order; vLLM also hashes the adapter's
name into every KV block, so a prefix group shared by two adapters is two prefixes. Every step's
scheduled tokens per request, preemptions, finishes, KV blocks, prefix hits and queue sizes must
match on the naive and fast paths of the compiled core, and on the pure-Python core.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from oracle_replay import PURE_PASS, PURE_PASS_REASON, load_case, replay, replay_on_pure_python

HERE = Path(__file__).parent
CASES = sorted((HERE / "oracle_lora_cases").glob("*.json.gz"))
IDS = [p.name.removesuffix(".json.gz") for p in CASES]


def test_the_lora_cases_cover_every_family_and_bind() -> None:
    cases = [load_case(p) for p in CASES]
    families = {c["name"].rsplit("_", 1)[0] for c in cases}
    assert families >= {
        f"lora_{f}" for f in ("basic", "pressure", "prefix", "priority", "small_seqs", "roomy", "async")
    }
    assert all(c["config"]["enable_lora"] for c in cases)
    assert sum(c["total_preemptions"] for c in cases) > 50
    # prefix groups named under two adapters at once, with prefix caching on
    split = [
        c
        for c in cases
        if c["config"]["enable_prefix_caching"]
        and any(
            len({r.get("lora") for r in c["trace"] if r.get("prefix_group") == g}) > 1
            for g in {r.get("prefix_group") for r in c["trace"]} - {None}
        )
    ]
    assert len(split) >= 3


def test_the_constraint_decides_the_schedule() -> None:
    """Without the limit (max_loras 64) servesim departs from vLLM on the cases where it binds:
    the cases test the constraint, not only the plain scheduler."""
    binding = [load_case(p) for p in CASES if "roomy" not in p.name]
    departs = 0
    for case in binding:
        loose = copy.deepcopy(case)
        loose["config"]["max_loras"] = 64
        departs += bool(replay(loose, fast=False))
    assert departs >= len(binding) * 2 // 3


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_naive_engine_matches_vllm(path: Path) -> None:
    assert replay(load_case(path), fast=False, invariants_every_step=True) == []


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_fast_engine_matches_vllm(path: Path) -> None:
    assert replay(load_case(path), fast=True) == []


@pytest.mark.skipif(PURE_PASS, reason=PURE_PASS_REASON)
def test_the_pure_python_core_matches_vllm_too() -> None:
    core, diffs = replay_on_pure_python(
        HERE / "oracle_lora_cases", "replay", [{"fast": False}, {"fast": True}]
    )
    assert core == "pure-python"
    assert diffs == {}
