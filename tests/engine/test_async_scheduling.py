"""Async scheduling (vLLM's AsyncScheduler in EngineCore's batch queue), worked by hand from
vLLM 0.33's ``async_scheduler.py``, ``scheduler.py`` and ``EngineCore.step_with_batch_queue``,
and the flag's way from the CLI to the ``vllm serve`` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from oracle_replay import load_case, replay
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.traces.schema import Trace
from servesim.tuning.deployment import Deployment

STEP = 1 / 64
ASYNC_CASES = Path(__file__).parent / "oracle_async_cases"


def _steps(async_scheduling: bool, fast: bool) -> dict[int, tuple[dict[str, int], list[str], int]]:
    rows = [("a", 0, 20, 3), ("b", 0, 40, 2), ("c", 1, 10, 1), ("d", 9, 10, 2)]
    trace = Trace.from_records(
        [{"req_id": r, "arrival_time_s": s * STEP, "prompt_len": p, "output_len": o} for r, s, p, o in rows]
    )
    cfg = EngineConfig(max_num_seqs=2, max_num_batched_tokens=32, async_scheduling=async_scheduling)
    log: list[dict[str, Any]] = []
    simulate(
        trace, cfg, ConstantStepTime(step_time_s=STEP), fast=fast, step_log=log.append, check_invariants=True
    )
    return {
        round(d["start_s"] / STEP): (d["scheduled_tokens"], sorted(d["finished"]), d["num_running"])
        for d in log
    }


@pytest.mark.parametrize("fast", [False, True])
def test_a_finish_frees_its_seat_one_step_later_and_arrivals_join_a_step_later(fast: bool) -> None:
    # Sync: a and b finish in step 2, c (arrived in step 1, no free seat) is admitted in step 3.
    sync = _steps(False, fast)
    assert sync[2] == ({"a": 1, "b": 1}, ["a", "b"], 2)
    assert sync[3] == ({"c": 10}, ["c"], 1)
    # Async: step 3 is scheduled before step 2's output is applied. a and b hold a placeholder
    # for their last token, so vLLM skips them (num_computed + 2 - placeholders >= prompt +
    # max_tokens) but they keep both seats: step 3 schedules nothing, c waits until step 4.
    got = _steps(True, fast)
    assert got[2] == ({"a": 1, "b": 1}, ["a", "b"], 2)
    assert got[3] == ({}, [], 2)
    assert got[4] == ({"c": 10}, ["c"], 1)
    assert got[5] == ({}, [], 1)  # c's only token is in flight: nothing to schedule
    # d arrives at step 9 with nothing in flight: scheduled at once; its last token is sampled
    # in step 10 and step 11 schedules nothing before that output is applied.
    assert got[9][0] == {"d": 10} and got[10] == ({"d": 1}, ["d"], 1) and got[11] == ({}, [], 1)
    assert 12 not in got


def test_the_sync_engine_does_not_reproduce_the_async_cases() -> None:
    """The async cases are not the sync schedule in disguise: replayed with the sync scheduler,
    every one of a sample differs from vLLM's AsyncScheduler."""
    for path in sorted(ASYNC_CASES.glob("*.json.gz"))[:6]:
        case = load_case(path)
        case["config"] = {**case["config"], "async_scheduling": False}
        assert replay(case, fast=False) != [], path.name


def test_what_async_scheduling_cannot_run_with_is_refused_in_one_line() -> None:
    for method in ("eagle", "eagle3", "mtp"):  # vLLM's AsyncScheduler runs them (oracle_async_spec_cases)
        EngineConfig(
            async_scheduling=True, speculative_config={"method": method, "num_speculative_tokens": 2}
        )
    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    with pytest.raises(ValueError, match="V1 model runner with ngram-based speculative decoding"):
        EngineConfig(async_scheduling=True, speculative_config=ngram)
    draft = {"method": "draft_model", "num_speculative_tokens": 2, "model": "llama-3.2-1b"}
    with pytest.raises(ValueError, match="async_scheduling with draft_model speculation is not modelled"):
        EngineConfig(async_scheduling=True, speculative_config=draft)
    with pytest.raises(ValueError, match="async_scheduling with kv_offloading_size"):
        EngineConfig(async_scheduling=True, kv_offloading_size=4.0)
    with pytest.raises(ValueError, match="async_scheduling with prefill_schedule_interval"):
        EngineConfig(async_scheduling=True, prefill_schedule_interval=4)


def test_the_flag_reaches_simulate_and_the_vllm_serve_command(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"req_id": f"r{i}", "arrival_time_s": 0.0, "prompt_len": 30, "output_len": 4} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["simulate", str(path), "--json", "--step-time-ms", "10", "--max-num-seqs", "2"]
    on = json.loads(runner.invoke(app, [*args, "--async-scheduling"]).stdout)
    off = json.loads(runner.invoke(app, [*args, "--no-async-scheduling"]).stdout)
    assert on["config"]["async_scheduling"] is True and "async_scheduling" not in off["config"]
    # r2 waits for a seat: async frees it a step later
    assert on["requests"][2]["queue_ms"] > off["requests"][2]["queue_ms"]
    dep = Deployment.from_engine_config(EngineConfig(async_scheduling=True), max_model_len=4096)
    assert "--async-scheduling" in dep.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct")
    assert dep.engine_config(1000).async_scheduling is True
    plain = Deployment.from_engine_config(EngineConfig(), max_model_len=4096)
    # vLLM would turn async on by default on a GPU: the command runs the sync scheduler simulated
    assert "--no-async-scheduling" in plain.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct")
    assert "async_scheduling" not in plain.model_dump()  # documents without it stay as they were


runner = CliRunner()
