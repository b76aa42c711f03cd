"""Pipeline parallelism's batch queue (``engine.pipeline_steps``), worked by hand from vLLM
0.33's ``EngineCore.step_with_batch_queue`` (a queue of P + 1 steps), ``AsyncScheduler``'s decode
stagger (a request that samples in step k decodes again in step k + P) and the stage timing:
a batch passes the P stages in turn, each stage one batch at a time, and a request's next step
enters stage 0 only once its previous token is back from the last stage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.step_time import BatchComposition
from servesim.traces.schema import Trace

T = 1 / 64  # each stage's time per step: exact in binary


def _run(
    rows: list[tuple[str, int, int]], pp: int, step_time: Any = None, **cfg: Any
) -> tuple[Any, list[dict]]:
    trace = Trace.from_records(
        [{"req_id": r, "arrival_time_s": 0.0, "prompt_len": p, "output_len": o} for r, p, o in rows]
    )
    log: list[dict[str, Any]] = []
    res = simulate(
        trace,
        EngineConfig(pipeline_parallel_size=pp, **cfg),
        step_time or ConstantStepTime(step_time_s=T),
        step_log=log.append,
        record_token_times=True,
        check_invariants=True,
    )
    return res, log


def _ticks(res: Any, rid: str) -> list[float]:
    return [t / T for t in res.token_times(rid)]


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_a_lone_request_gets_a_token_every_pass_through_the_pipeline(pp: int) -> None:
    """One request: its prefill passes P stages (TTFT = P stage times), and each decode must
    wait for the previous token to come back, so its ITL is the pipeline's latency, P x tau;
    the steps between are empty (the request is not eligible: vLLM schedules them all the same)."""
    res, log = _run([("a", 20, 4)], pp, max_num_seqs=4, max_num_batched_tokens=32)
    assert _ticks(res, "a") == [pp * 1.0, pp * 2.0, pp * 3.0, pp * 4.0]
    got = [d["scheduled_tokens"] for d in log]
    assert all(g in ({}, {"a": 20}, {"a": 1}) for g in got)
    assert [i for i, g in enumerate(got) if g] == [0, pp, 2 * pp, 3 * pp]


def test_two_requests_fill_two_stages() -> None:
    """P = 2, a and b: steps alternate a, b; each decode of a goes in two steps after the last
    (its token in flight meanwhile), and with both stages busy a token comes out every tau:
    a at 2, 4, 6 and b at 3, 5, 7 stage times."""
    res, log = _run([("a", 10, 3), ("b", 10, 3)], 2, max_num_seqs=4, max_num_batched_tokens=10)
    assert [d["scheduled_tokens"] for d in log][:6] == [
        {"a": 10},
        {"b": 10},
        {"a": 1},
        {"b": 1},
        {"a": 1},
        {"b": 1},
    ]
    assert _ticks(res, "a") == [2.0, 4.0, 6.0]
    assert _ticks(res, "b") == [3.0, 5.0, 7.0]
    # rows tile the time the last stage produces outputs: each ends when its output is back
    ends = [(d["start_s"] + d["duration_s"]) / T for d in log if d["scheduled_tokens"]]
    assert ends == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


class _Uneven:
    """Stage 0 takes tau, stage 1 two tau (per step, whatever the batch)."""

    def step_time(self, batch: BatchComposition) -> float:
        return 3 * T

    def stage_times(self, batch: BatchComposition) -> list[float]:
        return [T, 2 * T]


def test_the_slowest_stage_sets_the_pace() -> None:
    """Worked by hand: a's prefill leaves stage 1 at 3; b's enters stage 1 when a's leaves it
    (3) and is out at 5; a's first decode enters stage 0 at 3 (its token is back), waits for
    stage 1 until 5 and is out at 7; and so on: a token every 2 tau, stage 0 idle half the time."""
    res, _ = _run(
        [("a", 10, 3), ("b", 10, 3)], 2, step_time=_Uneven(), max_num_seqs=4, max_num_batched_tokens=10
    )
    assert _ticks(res, "a") == [3.0, 7.0, 11.0]
    assert _ticks(res, "b") == [5.0, 9.0, 13.0]


def test_pipeline_parallel_size_1_leaves_every_result_byte_identical() -> None:
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.01, "prompt_len": 50 + i, "output_len": 5 + i % 7}
        for i in range(40)
    ]
    trace = Trace.from_records(rows)
    docs = []
    for cfg in (EngineConfig(max_num_seqs=8), EngineConfig(max_num_seqs=8, pipeline_parallel_size=1)):
        res = simulate(trace, cfg, ConstantStepTime(step_time_s=T))
        docs.append(json.dumps(res.report(include_requests=True).model_dump(mode="json"), sort_keys=True))
    assert docs[0] == docs[1]
    assert "pipeline_parallel_size" not in docs[0]


def test_pipeline_parallelism_schedules_asynchronously_as_vllm_does() -> None:
    assert EngineConfig(pipeline_parallel_size=2).async_scheduling is True
    with pytest.raises(ValueError, match="pipeline_parallel_size 2 with async_scheduling false"):
        EngineConfig(pipeline_parallel_size=2, async_scheduling=False)
    with pytest.raises(ValueError, match="pipeline_parallel_size 2 with speculative_config"):
        EngineConfig(
            pipeline_parallel_size=2, speculative_config={"method": "eagle", "num_speculative_tokens": 2}
        )
    with pytest.raises(ValueError, match="pipeline_parallel_size 3 with kv_offloading_size"):
        EngineConfig(pipeline_parallel_size=3, kv_offloading_size=4)
    with pytest.raises(ValueError, match="pipeline_parallel_size"):
        EngineConfig(pipeline_parallel_size=0)
