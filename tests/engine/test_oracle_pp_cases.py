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
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from oracle_replay import load_case, replay_pp

from servesim.engine import _native

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


PURE_REPLAY = """
import json, sys
from pathlib import Path
from oracle_replay import load_case, replay_pp
from servesim.engine import _native
diffs = {}
for p in sorted(Path(sys.argv[1]).glob("*.json.gz")):
    d = replay_pp(load_case(p), invariants_every_step=False)
    if d:
        diffs[p.name] = d[:3]
print(json.dumps({"core": _native.core(), "diffs": diffs}))
"""


@pytest.mark.skipif(
    os.environ.get(_native.ENV_PURE, "").strip() not in ("", "0"),
    reason="this pass runs every case on the pure-Python core: a subprocess would run them again",
)
def test_the_pure_python_core_matches_vllm_too() -> None:
    env = {**os.environ, _native.ENV_PURE: "1", "PYTHONPATH": str(HERE)}
    out = subprocess.run(
        [sys.executable, "-c", PURE_REPLAY, str(HERE / "oracle_pp_cases")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["core"] == "pure-python"
    assert got["diffs"] == {}
