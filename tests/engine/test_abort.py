"""Aborting a request is a scheduler operation (``Scheduler.finish_requests``, vLLM's
``finish_requests(request_ids, FINISHED_ABORTED)``): from the waiting queue, the running list
(also a decode-group member), after a preemption, and while its KV loads (the CPU tier's
WAITING_FOR_REMOTE_KVS, a P/D decode leg's pull); a P/D prefill leg aborted mid-prefill sends
nothing. Its blocks go back to the pool, the rest of the run finishes, every block is returned
at the end (the engine's final invariants), and both cores leave the same trace behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from abort_scenarios import SCENARIOS

from servesim.engine import _native
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS
from servesim.engine.request import (
    OUTCOME_ABORTED,
    OUTCOME_FINISHED,
    PREEMPTED,
    RUNNING,
    WAITING,
)

HERE = Path(__file__).parent

#: The state each scenario aborts its victim in, and the blocks that gives back at once.
EXPECTED = {
    "waiting": (WAITING, 0),
    "waiting_fast": (WAITING, 0),
    "running": (RUNNING, 8),  # 12 steps in: 110 prompt + 12 outputs = 122 tokens on 8 blocks
    "running_fast": (RUNNING, 8),
    "preempted": (PREEMPTED, 0),  # preemption freed its blocks already
    "preempted_fast": (PREEMPTED, 0),
    "loading_from_cpu": (WAITING_FOR_REMOTE_KVS, 8),  # the 128 loading tokens' blocks
    "waiting_for_remote_kv": (WAITING_FOR_REMOTE_KVS, 13),  # 200 prompt tokens' blocks
    "running_prefill_leg": (RUNNING, 4),  # one 64-token chunk computed
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_an_aborted_request_leaves_its_queue_frees_its_blocks_and_the_rest_finish(name: str) -> None:
    out = SCENARIOS[name]()
    assert (out["state"], out["freed"]) == EXPECTED[name]
    outcomes = out["outcomes"]
    assert outcomes.count(OUTCOME_ABORTED) == 1
    assert all(o == OUTCOME_FINISHED for o in outcomes if o != OUTCOME_ABORTED)
    victim = outcomes.index(OUTCOME_ABORTED)
    assert out["finish"][victim] is not None and out["finish"][victim] >= 0


def test_a_request_aborted_while_its_kv_loads_is_never_admitted() -> None:
    cpu = SCENARIOS["loading_from_cpu"]()
    assert cpu["holding_after"] == 0 and cpu["loaded_blocks"] == 8  # the load ran, admitted nobody
    assert cpu["outputs"][1] == 0
    pd = SCENARIOS["waiting_for_remote_kv"]()
    assert pd["holding_after"] == 0 and not pd["admitted_after_load"] and pd["outputs"][0] == 0


def test_an_aborted_prefill_leg_sends_nothing() -> None:
    out = SCENARIOS["running_prefill_leg"]()
    assert out["kept_after"] == 0 and out["sends"] == 0


def test_the_same_waiting_and_running_aborts_on_the_fast_path_and_the_plain_one() -> None:
    for name in ("waiting", "running", "preempted"):
        assert SCENARIOS[name]() == SCENARIOS[f"{name}_fast"](), name


def _runs(pure: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != _native.ENV_PURE}
    if pure:
        env[_native.ENV_PURE] = "1"
    out = subprocess.run(
        [sys.executable, str(HERE / "abort_scenarios.py")],
        env={**env, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(
    os.environ.get(_native.ENV_PURE, "").strip() not in ("", "0"),
    reason="the main pass compares both cores (each subprocess picks its own)",
)
def test_the_compiled_and_the_pure_python_core_abort_alike() -> None:
    pure = _runs(pure=True)
    compiled = _runs(pure=False)
    assert pure["core"] == "pure-python"
    if os.environ.get(_native.ENV_PURE, "").strip() in ("", "0") and _native.core() == "compiled":
        assert compiled["core"] == "compiled"
    assert compiled["runs"] == pure["runs"]
