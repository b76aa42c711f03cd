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


def _spec_steps(
    async_scheduling: bool, accepted: int
) -> dict[int, tuple[dict[str, int], dict[str, int], list[str]]]:
    """One 10-token prompt, 3 output tokens, EAGLE with k = 2, the target accepting ``accepted``
    drafts at every verification: each step's scheduled tokens, drafts and finishes (a
    ``max_model_len`` of 64, so that vLLM's context cap on the drafts never binds)."""
    from servesim.engine.engine import Engine
    from servesim.engine.speculative import ScriptedAcceptance

    trace = Trace.from_records([{"req_id": "r", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 3}])
    spec = {"method": "eagle", "num_speculative_tokens": 2, "draft_step_fraction": 0.0}
    cfg = EngineConfig(async_scheduling=async_scheduling, speculative_config=spec, max_model_len=64)
    log: list[dict[str, Any]] = []
    engine = Engine(
        trace, cfg, ConstantStepTime(step_time_s=STEP), fast=False, step_log=log.append, check_invariants=True
    )
    engine.scheduler.acceptance = ScriptedAcceptance({"r": [accepted] * 4})
    engine.run()
    return {
        round(d["start_s"] / STEP): (d["scheduled_tokens"], d["spec_scheduled"], sorted(d["finished"]))
        for d in log
    }


def test_async_speculation_sizes_the_next_step_as_if_every_draft_in_flight_were_accepted() -> None:
    # Worked from AsyncScheduler._update_after_schedule and update_from_output. Step 0 prefills
    # (1 output placeholder, 2 draft placeholders); step 1 is scheduled before step 0's output:
    # 1 + 2 tokens, 2 drafts (placeholders now 1 + 3). Step 2, before step 1's output: again 3.
    # All rejected: step 1's output rolls 2 back (num_computed 16 -> 14, placeholders 6 -> 4)
    # and its token resolves one (3); step 3 then sees num_computed + 2 - placeholders = 13 >=
    # prompt + max_tokens and schedules nothing, while step 2's token (the third) is in flight.
    assert _spec_steps(True, 0) == {
        0: ({"r": 10}, {}, []),
        1: ({"r": 3}, {"r": 2}, []),
        2: ({"r": 3}, {"r": 2}, ["r"]),
        3: ({}, {}, []),
    }
    assert _spec_steps(False, 0) == {
        0: ({"r": 10}, {}, []),
        1: ({"r": 3}, {"r": 2}, []),
        2: ({"r": 3}, {"r": 2}, ["r"]),
    }
    # All accepted: step 1's output brings 3 tokens and finishes r, but step 2 (scheduled before
    # it, as if r went on) is in flight already: its drafts are scheduled for a finished request.
    got = _spec_steps(True, 2)
    assert got[1] == ({"r": 3}, {"r": 2}, ["r"]) and got[2] == ({"r": 3}, {"r": 2}, [])
    assert _spec_steps(False, 2) == {0: ({"r": 10}, {}, []), 1: ({"r": 3}, {"r": 2}, ["r"])}
