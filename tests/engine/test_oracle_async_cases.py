"""servesim's async scheduling equals vLLM 0.33's ``AsyncScheduler``, step by step.

The cases were made by ``tools/oracle/make_cases.py --async-scheduling``: vLLM's own
``AsyncScheduler`` driven as ``EngineCore.step_with_batch_queue`` drives it (step k scheduled
while step k-1 runs, before k-1's output is applied; arrivals seen as step k-1 starts), on the
plain families' random traces and configs at a few seeds. Every step's scheduled tokens,
preemptions, finishes, KV blocks in use, prefix hits and queue sizes must match, on both cores
(async scheduling runs the naive path: ``fast=True`` falls back to it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import load_case, replay

CASES = sorted((Path(__file__).parent / "oracle_async_cases").glob("*.json.gz"))


def test_the_async_cases_are_async_and_exercise_what_async_changes() -> None:
    assert len(CASES) >= 20
    cases = [load_case(p) for p in CASES]
    assert all(c["config"]["async_scheduling"] is True for c in cases)
    assert sum(c["total_preemptions"] for c in cases) > 50
    # steps that schedule nothing while requests run: they only finish in the step in flight
    idle = sum(1 for c in cases for s in c["steps"] if not s[1] and s[6])
    assert idle > 20
    # a request preempted while its last token is in flight, finished by that (stale) token
    stale = 0
    for c in cases:
        by_step = {s[0]: s for s in c["steps"]}
        stale += sum(1 for s in c["steps"] if set(s[3]) & set(by_step.get(s[0] + 1, [0, 0, []])[2]))
    assert stale >= 1


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_async_engine_matches_vllm(path: Path) -> None:
    assert replay(load_case(path), fast=False, invariants_every_step=True) == []


@pytest.mark.parametrize("path", CASES[::4], ids=[p.name.removesuffix(".json.gz") for p in CASES[::4]])
def test_async_falls_back_from_the_fast_path_and_still_matches(path: Path) -> None:
    assert replay(load_case(path), fast=True) == []
