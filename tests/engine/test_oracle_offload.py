"""CPU KV offload equals vLLM 0.33's own Scheduler + OffloadingConnector, step by step.

The cases were produced by ``tools/oracle/make_offload_cases.py``: vLLM's real scheduler with the
OffloadingConnector's scheduler side (CPU backend, LRU) and a fake worker that reports each load
or store finished a chosen number of steps (0-3) after it was issued. Families: KV pressure with
repeated prefixes (``offload_reuse``), a CPU tier smaller than the prefixes in play
(``offload_small``), preemptions resumed from offloaded prefixes (``offload_preempt``), the
priority policy (``offload_priority``), offload chunks of 2-4 blocks with chunked prefill off or a
watermark (``offload_mixed``). Every
step's scheduled tokens, preemptions, finishes, KV blocks in use, hits at admission (GPU +
loaded), queue sizes, requests in WAITING_FOR_REMOTE_KVS and GPU blocks loaded and stored must
match, with the invariants checked after every step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import (
    OFFLOAD_CASES_DIR,
    case_config,
    case_trace,
    load_case,
    offload_connector,
    replay_offload,
)

from servesim.engine import ConstantStepTime, simulate

CASES = sorted(OFFLOAD_CASES_DIR.glob("*.json.gz"))


def test_the_offload_cases_exercise_loads_stores_and_preemption() -> None:
    families = {p.name.rsplit("_", 1)[0] for p in CASES}
    assert {"offload_reuse", "offload_small", "offload_preempt"} <= families
    cases = [load_case(p) for p in CASES]
    assert sum(c["offload_totals"]["loads"] for c in cases) > 200
    assert sum(c["offload_totals"]["stores"] for c in cases) > 500
    assert sum(c["total_preemptions"] for c in cases) > 100
    assert any(any(s[10] for s in c["steps"]) for c in cases)  # requests waited for their KV


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_offload_matches_vllm(path: Path) -> None:
    assert replay_offload(load_case(path)) == []


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_offload_matches_vllm_on_the_fast_path(path: Path) -> None:
    """The decode group, its stretches and idle spans change nothing the oracle sees."""
    assert replay_offload(load_case(path), invariants_every_step=False, fast=True) == []


def test_the_cpu_tier_changes_the_schedule() -> None:
    """Not a no-op: without the connector the same case schedules differently (fewer hits)."""
    case = load_case(OFFLOAD_CASES_DIR / "offload_reuse_00.json.gz")
    log: list[dict] = []
    simulate(
        case_trace(case), case_config(case), ConstantStepTime(step_time_s=case["step_s"]), step_log=log.append
    )
    plain_hits = sum(sum(d["prefix_hit_tokens"].values()) for d in log)
    vllm_hits = sum(sum(s[5].values()) for s in case["steps"])
    assert vllm_hits > plain_hits
    conn = offload_connector(case)
    simulate(
        case_trace(case), case_config(case), ConstantStepTime(step_time_s=case["step_s"]), kv_connector=conn
    )
    assert conn.stats.loaded_blocks == case["offload_totals"]["blocks_loaded"]
    assert conn.stats.stored_blocks == case["offload_totals"]["blocks_stored"]
