"""Async scheduling with EAGLE / EAGLE-3 / MTP equals vLLM 0.33's ``AsyncScheduler``, step by step.

The cases come from ``tools/oracle/make_spec_cases.py --families async_eagle,...`` (seed 4905):
vLLM's own ``AsyncScheduler`` built from a real speculative config (eagle, eagle3 or mtp),
driven as ``EngineCore.step_with_batch_queue`` drives it (step k scheduled before step k-1's
output is applied). The drafts stay on the worker: the scheduler schedules k placeholders for
every request that sampled, sizes the next step as if every draft in flight were accepted, and
rolls the rejected ones back when the output comes. Prefix caching is on in the ``_prefix``
families (with the EAGLE hash lookahead). servesim replays each with vLLM's accepted counts and
must match every step's scheduled tokens, drafts, acceptances, preemptions, finishes, KV blocks,
prefix hits and queues, on both cores (``make unit`` runs tests/engine again on the pure one).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import load_case, replay_spec

CASES = sorted((Path(__file__).parent / "oracle_async_spec_cases").glob("*.json.gz"))


def test_the_cases_are_async_runs_of_each_drafter_that_exercise_speculation() -> None:
    cases = [load_case(p) for p in CASES]
    assert len(cases) >= 18
    assert all(c["config"]["async_scheduling"] is True for c in cases)
    assert {c["speculative"]["spec_method"] for c in cases} == {"eagle", "eagle3", "mtp"}
    assert any(c["config"]["enable_prefix_caching"] for c in cases)
    assert sum(c["total_preemptions"] for c in cases) > 20
    drafted = sum(sum(s[8].values()) for c in cases for s in c["steps"])
    accepted = sum(sum(s[9].values()) for c in cases for s in c["steps"])
    assert 0 < accepted < drafted  # drafts are accepted and rejected: both roll the placeholders


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_async_speculation_matches_vllm(path: Path) -> None:
    assert replay_spec(load_case(path)) == []


def test_the_sync_scheduler_does_not_reproduce_them() -> None:
    """Replayed with the sync scheduler (same drafts, same acceptances) every case differs: they
    check the async placeholders, not only speculation."""
    for path in CASES:
        case = load_case(path)
        case["config"] = {**case["config"], "async_scheduling": False}
        assert replay_spec(case, invariants_every_step=False) != [], path.name
