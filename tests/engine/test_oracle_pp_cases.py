"""servesim's pipeline-parallel scheduling equals vLLM 0.33's, step by step, on both cores.

The cases were made by ``tools/oracle/make_pp_cases.py --seed 0``: vLLM's own ``AsyncScheduler``
built from a real ``ParallelConfig(pipeline_parallel_size=P)`` (P = 2, 3, 4; vLLM itself picks
the V2 model runner, async scheduling and ``max_concurrent_batches = P + 1``), driven as
``EngineCore.step_with_batch_queue`` drives it: steps are scheduled while the queue has room and
requests remain, and the oldest step's output is applied when it is full. A request that samples
in a step decodes again P steps later (``next_decode_eligible_step``), and a preempted request
whose output is still in flight is skipped by the waiting loop until it drains
(``num_stale_output_tokens``). Every step's scheduled tokens per request, preemptions, finishes,
KV blocks, prefix hits and queue sizes must match, in order, on the compiled and the pure-Python
core. (Every request arrives before the first step: servesim's steps run on the stages' clock,
the harness's on the step count, so only the order of steps is shared.)
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from oracle_replay import PURE_PASS, PURE_PASS_REASON, load_case, replay_on_pure_python, replay_pp

HERE = Path(__file__).parent
CASES = sorted((HERE / "oracle_pp_cases").glob("*.json.gz"))
IDS = [p.name.removesuffix(".json.gz") for p in CASES]


def test_the_pp_cases_cover_every_family() -> None:
    cases = [load_case(p) for p in CASES]
    families = {c["name"].rsplit("_", 1)[0] for c in cases}
    assert families >= {
        f"pp_{f}" for f in ("basic", "pressure", "small_seqs", "chunked", "prefix", "priority", "pp3", "pp4")
    }
    assert {c["config"]["pipeline_parallel_size"] for c in cases} == {2, 3, 4}
    assert all(c["config"]["async_scheduling"] for c in cases)
    assert sum(c["total_preemptions"] for c in cases) > 50
    assert sum(len(c["steps"]) for c in cases) > 10_000


def test_the_batch_queue_decides_the_schedule() -> None:
    """Replayed as plain async scheduling (a queue of two, no decode stagger) servesim departs
    from vLLM on every case: the cases test the pipeline's scheduling, not the async scheduler."""
    for path in CASES:
        case = copy.deepcopy(load_case(path))
        case["config"]["pipeline_parallel_size"] = 1
        assert replay_pp(case, invariants_every_step=False) != [], path.name


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_the_engine_matches_vllm(path: Path) -> None:
    assert replay_pp(load_case(path), fast=False, invariants_every_step=True) == []


@pytest.mark.skipif(PURE_PASS, reason=PURE_PASS_REASON)
def test_the_pure_python_core_matches_vllm_too() -> None:
    core, diffs = replay_on_pure_python(
        HERE / "oracle_pp_cases", "replay_pp", [{"invariants_every_step": False}]
    )
    assert core == "pure-python"
    assert diffs == {}
