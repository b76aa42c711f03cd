"""EAGLE / EAGLE-3 / MTP with real speculative configs, and drafts shorter than k (issue 49).

The cases come from ``tools/oracle/make_spec_cases.py --families spec_eagle,...`` (seed 4903):
vLLM 0.33's own ``Scheduler`` built from a real ``SpeculativeConfig`` whose method is eagle,
eagle3 or mtp (so vLLM itself derives k lookahead slots, ``use_eagle`` and its draft-slot
budget; ``vllm_oracle.py`` says which attributes the scheduler reads), and, in the ``_short``
families, a fake drafter that proposes a seeded 0..k drafts after each step (an n-gram miss, or
any drafter's shorter proposal: vLLM's scheduler takes the list as it is). servesim replays each
with vLLM's accepted counts and draft lengths (``ScriptedDrafts``) and must match every step.

The ``_prefix`` cases (seed 4904) run them with prefix caching and shared prefixes, many ending
on a block boundary: there vLLM 0.33 hashes each block together with the token after it
(``num_hash_lookahead_tokens`` = 1, the EAGLE drafter's KV at a block's last position reads it),
so a request sharing a block-aligned prefix hits one block less than without a drafter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import load_case, replay_spec

from servesim.engine.speculative import SpeculativeConfig

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


PREFIX_CASES = [p for p in CASES if "_prefix" in p.name]


def first_hits(case: dict) -> dict[str, int]:
    """vLLM's prefix hit of each request on the step it was first scheduled (a fresh lookup)."""
    seen: set[str] = set()
    hits: dict[str, int] = {}
    for row in case["steps"]:
        for rid in row[1]:
            if rid not in seen:
                seen.add(rid)
                hits[rid] = row[5].get(rid, 0)
    return hits


def test_the_prefix_cases_hit_a_block_short_of_an_aligned_prefix() -> None:
    """vLLM's own data, independent of servesim: with EAGLE/EAGLE-3/MTP and prefix caching a fresh
    request's hit never reaches past token (prefix_len - 1) // B * B (its last shared block is
    hashed with the next token, which is its own), and some requests sharing a block-aligned
    prefix hit exactly one block short of it: where the legacy hash would have hit it all."""
    assert {load_case(p)["speculative"]["spec_method"] for p in PREFIX_CASES} == {"eagle", "eagle3", "mtp"}
    one_short = 0
    for p in PREFIX_CASES:
        case = load_case(p)
        assert case["config"]["enable_prefix_caching"] is True
        bs = case["config"]["block_size"]
        rows = {r["req_id"]: r for r in case["trace"]}
        for rid, hit in first_hits(case).items():
            plen = rows[rid].get("prefix_len", 0) if rows[rid].get("prefix_group") else 0
            assert hit <= max(plen - 1, 0) // bs * bs, (p.name, rid)
            one_short += plen >= bs and plen % bs == 0 and hit == plen - bs
    assert one_short >= 10


def test_the_hash_lookahead_matters(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the legacy block hashes (no lookahead) servesim's hits come out a block too long and
    the prefix cases no longer match vLLM: they check the lookahead, not only the drafter."""
    monkeypatch.setattr(SpeculativeConfig, "num_hash_lookahead_tokens", lambda self, caching: 0)
    differ = [p.name for p in PREFIX_CASES if replay_spec(load_case(p), invariants_every_step=False)]
    assert len(differ) >= len(PREFIX_CASES) // 2
