"""The load generator as it ran: client timeouts abort requests in the engine, and a load above
what the replica can serve comes out above capacity (TTFT in seconds), however the one-request-
in-flight-per-session rule holds sends back.

The checks are against hand-worked steps (a constant step time) and closed forms: a replica of
``max_num_seqs`` slots whose requests each need ``output_len`` steps serves at most
``max_num_seqs / (output_len x step)`` requests a second, and with every one of ``N`` sessions
waiting on its request (saturation), Little's law puts a request's latency at ``N / throughput``.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.engine import EngineConfig
from servesim.engine.step_time import ConstantStepTime
from servesim.perf import HardwareProfile
from servesim.perf.replay import ReplayOutcome, RequestSet, replay, summarize_latencies
from servesim.perf.sim2real import INFERENCE_PERF_TIMEOUT_S, RunSettings
from servesim.perf.workload import SharedPrefixWorkload, shared_prefix_requests

STEP_S = 0.01
OUTPUT = 400
SLOTS = 8
SESSIONS = 200
#: The most requests a second the replica below can finish: SLOTS at a time, OUTPUT steps each.
CAPACITY = SLOTS / (OUTPUT * STEP_S)  # 2 req/s

#: No front end and no async lag: the client sees the engine's own times.
PLAIN = HardwareProfile(frontend_latency_s=0.0, async_scheduling=False)


def _spec(rate: float, duration: float = 300.0) -> SharedPrefixWorkload:
    return SharedPrefixWorkload.model_validate(
        {
            "shared_prefix": {
                "num_unique_system_prompts": 20,
                "num_users_per_system_prompt": SESSIONS // 20,
                "system_prompt_len": 0,
                "question_len": 100,
                "output_len": OUTPUT,
            },
            "stages": [{"rate": rate, "duration": duration}],
        }
    )


def _run(rate: float, timeout_s: float | None) -> tuple[RequestSet, ReplayOutcome]:
    rs = shared_prefix_requests(_spec(rate), seed=0, timeout_s=timeout_s)
    cfg = EngineConfig(num_gpu_blocks=10_000, max_num_seqs=SLOTS, max_num_batched_tokens=2048)
    return rs, replay(rs, cfg, ConstantStepTime(step_time_s=STEP_S), PLAIN)


def test_an_aborted_request_stops_where_its_client_gave_up() -> None:
    # Hand-worked: 10 ms steps; request 0 wants 100 tokens (its first at 10 ms, its last at 1 s),
    # request 1 wants 10 (done at 0.1 s). The client's 0.5 s timeout runs out after 50 steps:
    # request 0 is aborted with 50 tokens, failed, out of the statistics; request 1 is untouched.
    rs = RequestSet(
        scheduled=np.zeros(2),
        prompt_len=np.array([16, 16]),
        output_len=np.array([100, 10]),
        prefix_group=[None, None],
        prefix_len=np.zeros(2, dtype=np.int64),
        timeout_s=0.5,
    )
    out = replay(rs, EngineConfig(num_gpu_blocks=100), ConstantStepTime(step_time_s=STEP_S), PLAIN)
    assert out.failed is not None and out.failed.tolist() == [True, False]
    assert out.num_output.tolist() == [50, 10]
    assert out.result is not None
    assert out.result.requests.set_index("req_id")["outcome"].to_dict() == {"0": "aborted", "1": "finished"}
    assert np.isnan(out.e2e[0]) and out.e2e[1] == pytest.approx(0.10)
    s = summarize_latencies(out)
    assert s["num_requests"] == 1 and s["num_failed"] == 1
    assert s["e2e_mean"] == pytest.approx(100.0) and s["ttft_mean"] == pytest.approx(10.0)


def test_a_run_above_capacity_comes_out_above_capacity() -> None:
    # Below capacity (1 req/s of 2): requests barely queue. Above it (4 req/s), 200 sessions
    # each keep a request in flight while the replica serves 2 a second: TTFT runs to tens of
    # seconds, the throughput is the replica's, and a saturated request waits N / X.
    _, low = _run(1.0, None)
    rs_high, high = _run(4.0, None)
    low_s, high_s = summarize_latencies(low), summarize_latencies(high)
    assert low_s["ttft_mean"] < 100.0  # ms
    assert high_s["ttft_mean"] > 30_000.0  # seconds, not milliseconds
    done = high.send + high.e2e
    throughput = len(rs_high) / (done.max() - high.send.min())
    assert throughput == pytest.approx(CAPACITY, rel=0.02)
    # requests sent once every session had one waiting: Little's law, N / X
    late = high.send > high.send.min() + 0.5 * (done.max() - high.send.min())
    assert np.median(high.e2e[late]) == pytest.approx(SESSIONS / CAPACITY, rel=0.1)
    # held back at the client, not lost: every request ran, each after its session's previous one
    assert high.finished.all() and rs_high.predecessor is not None
    has = rs_high.predecessor >= 0
    ready = high.send[rs_high.predecessor[has]] + high.e2e[rs_high.predecessor[has]]
    assert np.mean(np.maximum(ready - high.send[has], 0.0)) < 1.0


def test_timed_out_clients_fail_and_free_the_replica() -> None:
    rs, out = _run(4.0, 60.0)
    assert out.failed is not None and 0 < out.failed.sum() < len(rs)
    ok = out.finished
    assert np.all(out.e2e[ok] <= 60.0) and not np.any(ok & out.failed)
    s = summarize_latencies(out)
    assert s["num_failed"] == out.failed.sum() and s["num_requests"] == ok.sum()
    assert s["e2e_mean"] < 60_000.0
    # a failed round releases its session's next one when the client gives up
    assert rs.predecessor is not None
    prev = rs.predecessor
    gave_up = (prev >= 0) & out.failed[np.maximum(prev, 0)]
    assert np.any(gave_up)
    released = out.send[prev[gave_up]] + 60.0
    assert np.all(out.send[gave_up] <= np.maximum(released, rs.scheduled[gave_up]) + 1.0)
    # aborted in the engine: they hold no slot once their client left
    assert out.result is not None
    outcomes = out.result.requests["outcome"]
    assert (outcomes == "aborted").sum() <= out.failed.sum()
    assert (outcomes == "aborted").sum() > 0


def test_a_timeout_that_never_runs_out_changes_nothing() -> None:
    _, none = _run(1.0, None)
    _, with_timeout = _run(1.0, INFERENCE_PERF_TIMEOUT_S)
    assert with_timeout.failed is not None and not with_timeout.failed.any()
    assert np.array_equal(none.e2e, with_timeout.e2e) and np.array_equal(none.ttft, with_timeout.ttft)
    assert RunSettings().request_timeout_s == 300.0  # inference-perf's default: aiohttp's total
