"""What users rely on from one simulated replica: outcomes, metric definitions, goodput,
admission control, determinism, and real-size traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import STEP, by_step, run_steps, trace_of

from servesim.engine import SLO, ConstantStepTime, EngineConfig, LatencyStats, LinearStepTime, simulate
from servesim.traces import Trace, load_trace, open_trace


def test_starter_example_admits_both_requests_into_the_first_batch() -> None:
    trace = trace_of(("r0", 0, 512, 128), ("r1", 0, 1024, 256))
    result, log = run_steps(trace, max_num_seqs=64, max_num_batched_tokens=2048, enable_prefix_caching=False)
    assert log[0]["scheduled_tokens"] == {"r0": 512, "r1": 1024}
    assert log[0]["new"] == ["r0", "r1"]
    assert [len(log), log[127]["finished"], log[255]["finished"]] == [256, ["r0"], ["r1"]]
    assert list(result.requests["ttft_ms"]) == [STEP * 1e3] * 2


def test_empty_trace_gives_zero_batches_and_zero_metrics() -> None:
    result = simulate(Trace.empty(), EngineConfig(), check_invariants=True)
    s = result.summary
    assert s.num_requests == s.num_steps == s.num_finished == 0
    assert s.ttft_ms == s.tpot_ms == s.itl_ms == s.e2e_ms == LatencyStats()
    assert s.request_throughput == s.goodput == 0.0
    assert result.requests.empty and result.steps.empty


def test_every_request_ends_with_exactly_one_outcome() -> None:
    rows = [("ok", 0, 100, 10), ("long", 0, 3000, 10), ("capped", 0, 1000, 2000)]
    result, _ = run_steps(trace_of(*rows), max_model_len=2048, max_num_batched_tokens=4096)
    out = result.requests.set_index("req_id")
    assert out.loc["ok", "outcome"] == "finished" and out.loc["ok", "num_output"] == 10
    assert out.loc["long", "outcome"] == "rejected_prompt_too_long"  # prompt >= max_model_len
    assert out.loc["capped", "outcome"] == "finished_max_model_len"
    assert out.loc["capped", "num_output"] == 2048 - 1000  # stops when prompt + outputs reach the limit
    s = result.summary
    assert (s.num_finished, s.num_length_capped, s.num_rejected_prompt_too_long) == (2, 1, 1)


def test_queue_timeout_rejects_and_reports_instead_of_dropping() -> None:
    rows = [(f"q{i}", i, 500, 200) for i in range(40)]
    result, _ = run_steps(trace_of(*rows), max_num_seqs=2, queue_timeout_s=1.0)
    r = result.requests
    rejected = r[r["outcome"] == "rejected_queue_timeout"]
    assert len(rejected) > 10
    assert len(rejected) + (r["outcome"] == "finished").sum() == 40  # nobody lost
    assert rejected["first_token_s"].isna().all()
    assert (r.loc[r["outcome"] == "finished", "queue_ms"] <= 1000.0 + STEP * 1e3).all()
    assert result.summary.num_rejected_queue_timeout == len(rejected)


def test_metric_definitions_match_vllm_on_every_token() -> None:
    trace = open_trace("bursty", num_requests=120, seed=5)
    config = EngineConfig(num_gpu_blocks=700, max_num_seqs=16, max_num_batched_tokens=1024)
    result = simulate(trace, config, LinearStepTime(), record_token_times=True)
    assert result.summary.num_preemptions > 0  # token runs get interrupted too
    gaps, tpots = [], []
    for row in result.requests.itertuples():
        times = np.asarray(result.token_times(row.req_id))
        assert len(times) == row.num_output
        assert times[0] == pytest.approx(row.first_token_s) and times[-1] == pytest.approx(row.finish_s)
        gaps.extend(np.diff(times))
        if len(times) > 1:
            tpots.append((times[-1] - times[0]) / (len(times) - 1))
    brute_itl = LatencyStats.of(np.asarray(gaps) * 1e3)
    s = result.summary
    for q in ("count", "mean", "p50", "p90", "p95", "p99", "max"):
        assert getattr(s.itl_ms, q) == pytest.approx(getattr(brute_itl, q), rel=1e-9, abs=1e-9)
    assert s.tpot_ms.mean == pytest.approx(np.mean(tpots) * 1e3)
    assert s.ttft_ms.p90 == pytest.approx(np.percentile(result.requests["ttft_ms"], 90))


def test_goodput_counts_requests_meeting_every_slo() -> None:
    trace = open_trace("default", num_requests=300, seed=1)
    slo = SLO(ttft_ms=300, tpot_ms=40)
    result = simulate(trace, EngineConfig(), LinearStepTime(), slo=slo)
    r = result.requests
    tpot = r["tpot_ms"].fillna(0.0)
    good = (r["ttft_ms"] <= 300) & (tpot <= 40) & (r["outcome"] == "finished")
    assert result.summary.num_good == int(good.sum()) == int(r["good"].sum())
    assert 0 < result.summary.num_good < 300
    assert result.summary.goodput == pytest.approx(good.sum() / result.summary.duration_s)
    assert SLO.parse("ttft_ms=300, tpot=40") == slo


def test_per_request_sla_from_the_trace_counts_towards_goodput() -> None:
    rows = [
        {"req_id": "tight", "arrival_time_s": 0.0, "prompt_len": 2000, "output_len": 4, "sla_ttft_ms": 1.0},
        {"req_id": "loose", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 4, "sla_e2e_ms": 1e6},
    ]
    result = simulate(Trace.from_records(rows), EngineConfig(), LinearStepTime())
    assert result.requests.set_index("req_id")["good"].to_dict() == {"tight": False, "loose": True}


def test_priority_policy_admits_lower_values_first() -> None:
    rows = [
        {"req_id": f"p{i}", "arrival_time_s": 0.0, "prompt_len": 200, "output_len": 5, "priority": pr}
        for i, pr in enumerate([3, 1, 2, 0])
    ]
    _, log = run_steps(Trace.from_records(rows), max_num_seqs=1, policy="priority")
    admitted = [r for d in log for r in d["new"]]
    assert admitted == ["p3", "p1", "p2", "p0"]


def test_same_inputs_give_byte_identical_reports() -> None:
    trace = open_trace("prefix_heavy", num_requests=200, seed=2)
    config = EngineConfig(num_gpu_blocks=1500)
    a = simulate(trace, config, LinearStepTime(), slo=SLO(ttft_ms=500)).report(include_requests=True)
    b = simulate(trace, config, LinearStepTime(), slo=SLO(ttft_ms=500)).report(include_requests=True)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.summary.prefix_cache_hit_rate is not None and a.summary.prefix_cache_hit_rate > 0.3


@pytest.mark.parametrize("source", ["default", "azure-code"])
def test_real_size_traces_give_ordered_percentiles(source: str) -> None:
    trace = open_trace(source) if source != "azure-code" else load_trace(source)
    assert len(trace) >= 1000
    result = simulate(trace, EngineConfig(num_gpu_blocks=20000, max_num_seqs=128), LinearStepTime())
    s = result.summary
    assert s.num_finished == len(trace)
    for st in (s.ttft_ms, s.tpot_ms, s.e2e_ms, s.itl_ms):
        assert 0 < st.p50 <= st.p90 <= st.p95 <= st.p99 <= st.max
    assert s.max_running > 1  # continuous batching really batches
    assert isinstance(result.to_pandas(), pd.DataFrame) and len(result.to_pandas()) == len(trace)


def test_step_log_records_what_vllm_logs_per_step() -> None:
    _, log = run_steps(trace_of(("a", 0, 40, 3), ("b", 2, 40, 3)), num_gpu_blocks=64)
    keys = {"step", "start_s", "duration_s", "scheduled_tokens", "preempted", "new", "resumed", "finished"}
    keys |= {"num_running", "num_waiting", "kv_blocks_used", "kv_blocks_free", "prefix_hit_tokens"}
    assert all(keys <= d.keys() for d in log)
    assert by_step(log)[2]["scheduled_tokens"] == {"a": 1, "b": 40}
    assert sum(d["kv_blocks_used"] + d["kv_blocks_free"] == 63 for d in log) == len(log)


def test_constant_step_time_rejects_non_positive_durations() -> None:
    with pytest.raises(ValueError):
        ConstantStepTime(step_time_s=0)
