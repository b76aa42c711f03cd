"""Speculative decoding: servesim's schedule equals vLLM 0.33's real scheduler, step by step.

The cases come from ``tools/oracle/make_spec_cases.py``: vLLM's own ``Scheduler`` with a real
``SpeculativeConfig(method="ngram")``, a fake drafter proposing k drafts after every step and a
fake target accepting a seeded number of them; the ``lookahead`` family also reserves vLLM's k
lookahead KV slots (what EAGLE/MTP/draft-model drafters do). servesim replays each case with the
same accepted counts and must schedule the same tokens (drafts included), verify the same drafts,
preempt, finish and hold the same KV blocks at every step, with its invariants checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import SPEC_CASES_DIR, load_case, replay_spec

CASES = sorted(SPEC_CASES_DIR.glob("*.json.gz"))


def test_the_spec_cases_cover_drafts_lookahead_and_preemption() -> None:
    assert len(CASES) >= 20
    cases = [load_case(p) for p in CASES]
    assert {c["name"].rsplit("_", 1)[0] for c in cases} >= {"spec_basic", "spec_pressure", "spec_lookahead"}
    assert sum(c["total_preemptions"] for c in cases) > 10
    verified = sum(sum(row[8].values()) for c in cases for row in c["steps"])
    accepted = sum(sum(row[9].values()) for c in cases for row in c["steps"])
    assert 0 < accepted < verified  # drafts are both accepted and rejected


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_spec_schedule_matches_vllm(path: Path) -> None:
    assert replay_spec(load_case(path)) == []
