"""EAGLE / EAGLE-3 / MTP with real speculative configs, and drafts shorter than k (issue 49).

The cases come from ``tools/oracle/make_spec_cases.py --families spec_eagle,...`` (seed 4903):
vLLM 0.33's own ``Scheduler`` built from a real ``SpeculativeConfig`` whose method is eagle,
eagle3 or mtp (so vLLM itself derives k lookahead slots, ``use_eagle`` and its draft-slot
budget; ``vllm_oracle.py`` says which attributes the scheduler reads), and, in the ``_short``
families, a fake drafter that proposes a seeded 0..k drafts after each step (an n-gram miss, or
any drafter's shorter proposal: vLLM's scheduler takes the list as it is). servesim replays each
with vLLM's accepted counts and draft lengths (``ScriptedDrafts``) and must match every step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import load_case, replay_spec

EAGLE_CASES_DIR = Path(__file__).parent / "oracle_eagle_cases"
CASES = sorted(EAGLE_CASES_DIR.glob("*.json.gz"))


def test_the_eagle_cases_cover_each_drafter_and_short_drafts() -> None:
    cases = [load_case(p) for p in CASES]
    assert {c["speculative"]["spec_method"] for c in cases} == {"eagle", "eagle3", "mtp", "ngram"}
    assert not any(c["speculative"].get("spec_lookahead_tokens") for c in cases)  # real configs only
    short = [c for c in cases if "draft_lengths" in c["speculative"]]
    k_of = {c["name"]: c["speculative"]["num_speculative_tokens"] for c in short}
    lengths = [
        (n, c["name"]) for c in short for seq in c["speculative"]["draft_lengths"].values() for n in seq
    ]
    assert any(n == 0 for n, _ in lengths) and any(0 < n < k_of[name] for n, name in lengths)
    assert sum(c["total_preemptions"] for c in cases) > 0


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_eagle_schedule_matches_vllm(path: Path) -> None:
    assert replay_spec(load_case(path)) == []


def test_the_short_drafts_matter() -> None:
    """Without the recorded lengths (k drafts every time) a short-draft case no longer matches:
    the cases check servesim's handling of drafts shorter than k, not only its k-draft path."""
    case = load_case(EAGLE_CASES_DIR / "spec_eagle_short_00.json.gz")
    del case["speculative"]["draft_lengths"]
    assert replay_spec(case, invariants_every_step=False) != []
