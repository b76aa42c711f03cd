"""servesim's schedule equals vLLM 0.33's real scheduler, step by step, on 100+ stored cases.

The cases were produced by ``tools/oracle/make_cases.py`` with the shared vLLM oracle (vLLM's own
``Scheduler``, KV-cache manager and prefix cache on a CPU with a fake model): chunked prefill on
and off, ``long_prefill_token_threshold``, memory pressure and preemption cascades, prefix groups
under eviction, the priority policy, small ``max_num_seqs``, block sizes 8-64, a watermark, and
``scheduler_reserve_full_isl`` off, and vLLM 0.33's ``max_num_active_seqs``,
``prefill_schedule_interval`` (the prefill cadence and its capacity-bound escape),
``max_num_scheduled_tokens`` and ``long_prefill_token_threshold_adaptive``. Every step's
scheduled tokens per request, preemptions, finishes, KV blocks in use, prefix-cache hits and
queue sizes must match, on both engine paths.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import CASES_DIR, load_case, replay

CASES = sorted(CASES_DIR.glob("*.json.gz"))


def test_the_stored_cases_cover_every_family() -> None:
    families = {p.name.rsplit("_", 1)[0] for p in CASES}
    assert len(CASES) >= 100
    for fam in ("chunk_off", "threshold", "pressure", "prefix_pressure", "priority", "small_seqs", "cascade"):
        assert fam in families
    # vLLM 0.33's scheduler knobs, each set away from its default in its family's cases
    knobs = {  # family: (knob, vLLM's default)
        "active_seqs": ("max_num_active_seqs", None),
        "cadence": ("prefill_schedule_interval", 1),
        "scheduled_tokens": ("max_num_scheduled_tokens", None),
        "adaptive": ("long_prefill_token_threshold_adaptive", False),
    }
    for fam, (knob, default) in knobs.items():
        cases = [load_case(p)["config"] for p in CASES if p.name.startswith(fam + "_")]
        assert len(cases) >= 6 and all(c.get(knob, default) != default for c in cases), fam
    preemptions = sum(load_case(p)["total_preemptions"] for p in CASES)
    assert preemptions > 300  # the cases exercise preemption, not only happy paths


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_naive_engine_matches_vllm(path: Path) -> None:
    assert replay(load_case(path), fast=False, invariants_every_step=True) == []


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_fast_engine_matches_vllm(path: Path) -> None:
    assert replay(load_case(path), fast=True) == []
