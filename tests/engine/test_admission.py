"""vLLM's API-server admission (``max_num_queued_reqs``, ``max_num_queued_tokens``: HTTP 503) and
vLLM 0.33's other scheduler knobs beside the oracle cases.

The 503 limits are not the scheduler's (``AsyncLLM.check_admission``), so the oracle, which drives
vLLM's ``Scheduler``, cannot check them: they are checked here by hand-worked runs and by
properties that recompute, from the per-request records alone, what the API server saw at each
arrival (in flight: arrived, admitted and not finished; in prefill: no first token yet).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import STEP, run_steps, trace_of
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples, traces

from servesim.engine import SLO, ConstantStepTime, EngineConfig, simulate
from servesim.errors import ConfigError
from servesim.traces.schema import Trace

REQS = "rejected_max_num_queued_reqs"
TOKENS = "rejected_max_num_queued_tokens"


def test_max_num_queued_reqs_answers_503_once_that_many_are_in_flight() -> None:
    # Two slots; r0 and r1 run for 3 steps (prompt step + 2 more decodes): r2 at step 1 finds
    # both in flight (503), r3 arrives at step 3 exactly when r0 and r1 finish: admitted.
    rows = [("r0", 0, 10, 3), ("r1", 0, 10, 3), ("r2", 1, 10, 3), ("r3", 3, 10, 3)]
    result, _ = run_steps(trace_of(*rows), max_num_queued_reqs=2)
    out = result.requests.set_index("req_id")["outcome"].to_dict()
    assert out == {"r0": "finished", "r1": "finished", "r2": REQS, "r3": "finished"}
    adm = result.summary.admission
    assert adm is not None
    assert (adm.num_rejected, adm.num_rejected_queued_reqs, adm.num_rejected_queued_tokens) == (1, 1, 0)
    assert adm.first_rejection_s == adm.last_rejection_s == 1 * STEP
    assert adm.rejection_rate == 0.25


def test_a_request_arriving_mid_step_counts_those_that_finish_at_the_steps_end() -> None:
    # r0 finishes at the end of step 0 (one output token); r1 arrives half-way through step 0:
    # vLLM's API server still holds r0 then (503); r2 arrives at the step's end: admitted.
    rows = [
        ("r0", 0, 10, 1),
        {"req_id": "r1", "arrival_time_s": STEP / 2, "prompt_len": 10, "output_len": 1},
        ("r2", 1, 10, 1),
    ]
    result, _ = run_steps(trace_of(*rows), max_num_queued_reqs=1)
    assert list(result.requests["outcome"]) == ["finished", REQS, "finished"]


def test_max_num_queued_tokens_counts_whole_prompts_until_their_first_token() -> None:
    # Limit 250, prompts of 100, chunks of 64 (budget): r0 (t=0) is admitted with 0 queued, r1
    # with 100, r2 with 200; r3 finds 300 >= 250 (the arriving prompt is not counted: vLLM's
    # ``current >= max``). r0 is still in prefill at step 1 (64 of 100 computed: counted whole).
    rows = [("r0", 0, 100, 2), ("r1", 0, 100, 2), ("r2", 0, 100, 2), ("r3", 1, 100, 2)]
    result, log = run_steps(
        trace_of(*rows), max_num_queued_tokens=250, max_num_batched_tokens=64, max_num_seqs=4
    )
    assert log[0]["scheduled_tokens"] == {"r0": 64}
    assert list(result.requests["outcome"]) == ["finished"] * 3 + [TOKENS]
    # at exactly the limit the next request is refused too: 200 queued >= 200
    result, _ = run_steps(trace_of(*rows[:3]), max_num_queued_tokens=200)
    assert list(result.requests["outcome"]) == ["finished", "finished", TOKENS]


def test_a_full_server_answers_503_before_looking_at_the_prompt() -> None:
    # vLLM's serving layer checks admission before rendering: a too-long prompt gets the 503.
    rows = [("r0", 0, 10, 5), ("long", 1, 5000, 5), ("long2", 20, 5000, 5)]
    result, _ = run_steps(trace_of(*rows), max_num_queued_reqs=1, max_model_len=2048)
    assert list(result.requests["outcome"]) == ["finished", REQS, "rejected_prompt_too_long"]


def test_rejections_are_never_good_and_have_no_latency() -> None:
    rows = [(f"r{i}", 0, 10, 4) for i in range(6)]
    result, _ = run_steps(trace_of(*rows), max_num_queued_reqs=4)
    s = result.summary
    assert s.admission is not None and s.admission.num_rejected == 2
    rej = result.requests[result.requests["outcome"] == REQS]
    assert not rej["good"].any()
    assert rej[["ttft_ms", "tpot_ms", "e2e_ms", "queue_ms"]].isna().all().all()
    assert s.ttft_ms.count == s.e2e_ms.count == s.num_finished == s.num_good == 4
    assert s.by_priority["0"].sla_violations == 2  # not good: counted against its class


def test_the_summary_names_the_limits_and_the_classes_rejected() -> None:
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 4, "priority": i % 2}
        for i in range(6)
    ]
    result, _ = run_steps(Trace.from_records(rows), max_num_queued_reqs=3)
    adm = result.summary.admission
    assert adm is not None and adm.max_num_queued_reqs == 3 and adm.max_num_queued_tokens is None
    assert adm.by_priority == {"0": 1, "1": 2}  # r3, r4, r5 rejected: priorities 1, 0, 1
    doc = result.summary.model_dump(mode="json")
    assert doc["admission"]["num_rejected"] == 3
    plain, _ = run_steps(trace_of(("r0", 0, 10, 2)))
    assert "admission" not in plain.summary.model_dump(mode="json")  # no limit: the document as before


def test_bad_limits_are_one_line_errors_naming_the_field() -> None:
    with pytest.raises(ValueError, match="max_num_active_seqs \\(9\\) cannot be greater than max_num_seqs"):
        EngineConfig(max_num_seqs=8, max_num_active_seqs=9)
    with pytest.raises(ValueError, match="prefill_schedule_interval 2 with kv_offloading_size"):
        EngineConfig(prefill_schedule_interval=2, kv_offloading_size=1.0)
    with pytest.raises(ValueError, match="max_num_queued_reqs"):
        EngineConfig(max_num_queued_reqs=-1)


def _in_flight_at(req: pd.DataFrame, i: int) -> tuple[int, int]:
    """(requests in flight, prompt tokens in prefill) when request ``i`` arrived, from the
    records alone: earlier admitted requests that had not finished (first token) by then."""
    a = req["arrival_s"].to_numpy()
    fin = req["finish_s"].to_numpy()
    ft = req["first_token_s"].to_numpy()
    prompt = req["prompt_len"].to_numpy()
    outcome = req["outcome"].to_numpy()
    earlier = np.arange(len(req)) < i
    admitted = earlier & ~np.isin(outcome, [REQS, TOKENS, "rejected_prompt_too_long"])
    flying = admitted & ~(fin <= a[i])  # NaN (never finished) stays in flight
    prefilling = flying & ~(ft <= a[i])
    return int(flying.sum()), int(prompt[prefilling].sum())


@settings(max_examples=examples(60), deadline=None, derandomize=True)
@given(
    trace=traces(max_requests=40, max_prompt=300, max_output=30),
    max_reqs=st.sampled_from([None, 1, 2, 5]),
    max_tokens=st.sampled_from([None, 0, 1, 150, 600]),
    seqs=st.integers(1, 8),
)
def test_each_arrival_is_admitted_exactly_when_the_api_server_would(
    trace: Trace, max_reqs: int | None, max_tokens: int | None, seqs: int
) -> None:
    cfg = EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=256,
        max_num_queued_reqs=max_reqs,
        max_num_queued_tokens=max_tokens,
    )
    result = simulate(
        trace, cfg, ConstantStepTime(step_time_s=0.01), check_invariants=True, slo=SLO(ttft_ms=1e9)
    )
    req = result.requests.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    for i in range(len(req)):
        n, tokens = _in_flight_at(req, i)
        want = "admitted"
        if max_reqs is not None and n + 1 > max_reqs:
            want = REQS
        elif max_tokens is not None and tokens >= max_tokens:
            want = TOKENS
        got = req.loc[i, "outcome"] if req.loc[i, "outcome"] in (REQS, TOKENS) else "admitted"
        assert got == want, (i, n, tokens)
    s = result.summary
    rejected = int(req["outcome"].isin([REQS, TOKENS]).sum())
    assert s.num_finished + s.num_rejected_prompt_too_long + rejected == s.num_requests
    assert s.num_good <= s.num_finished
    if max_reqs is None and max_tokens is None:
        assert s.admission is None
    else:
        assert s.admission is not None and s.admission.num_rejected == rejected


@st.composite
def knob_configs(draw: st.DrawFn) -> EngineConfig:
    seqs = draw(st.integers(1, 16))
    return EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=draw(st.integers(max(seqs, 16), 512)),
        max_num_active_seqs=draw(st.sampled_from([None, 1, max(1, seqs // 2), seqs])),
        max_num_scheduled_tokens=draw(st.sampled_from([None, 1, 7, 100])),
        prefill_schedule_interval=draw(st.sampled_from([1, 2, 5])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 16, 64])),
        long_prefill_token_threshold_adaptive=draw(st.booleans()),
        num_gpu_blocks=draw(st.sampled_from([200, 10000])),
        block_size=16,
        enable_prefix_caching=draw(st.booleans()),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
    )


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(trace=traces(max_requests=25, max_prompt=400, max_output=40), cfg=knob_configs())
def test_the_knobs_run_alike_on_the_fast_and_the_naive_path(trace: Trace, cfg: EngineConfig) -> None:
    """The decode group and its stretches give vLLM's schedule with the 0.33 knobs as well
    (the oracle cases check the naive path against vLLM itself)."""
    model = ConstantStepTime(step_time_s=0.01)
    try:
        fast = simulate(trace, cfg, model, fast=True)
    except ConfigError:  # a drawn max_model_len beyond the pool: vLLM refuses to start
        return
    naive = simulate(trace, cfg, model, fast=False, check_invariants=True)
    cols = ["req_id", "outcome", "num_output", "first_token_s", "finish_s", "num_preemptions"]
    pd.testing.assert_frame_equal(fast.requests[cols], naive.requests[cols])
    active = cfg.max_num_active_seqs or cfg.max_num_seqs
    assert int(naive.steps["num_running"].max() if len(naive.steps) else 0) <= active


def test_the_knobs_reach_the_vllm_serve_command_only_when_set() -> None:
    from servesim.tuning.deployment import Deployment

    d = Deployment(max_model_len=4096)
    plain = d.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct")
    assert "queued" not in plain and "interval" not in plain
    assert "max_num_queued_reqs" not in d.model_dump()  # the document as before
    set_ = d.model_copy(
        update={
            "max_num_queued_reqs": 64,
            "max_num_queued_tokens": 50000,
            "max_num_active_seqs": 32,
            "prefill_schedule_interval": 4,
            "long_prefill_token_threshold_adaptive": True,
            "max_num_scheduled_tokens": 1024,
            "stream_interval": 8,
        }
    )
    cmd = set_.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct")
    for flag in (
        "--max-num-queued-reqs 64",
        "--max-num-queued-tokens 50000",
        "--max-num-active-seqs 32",
        "--prefill-schedule-interval 4",
        "--long-prefill-token-threshold-adaptive",
        "--max-num-scheduled-tokens 1024",
        "--stream-interval 8",
    ):
        assert flag in cmd
    cfg = set_.engine_config(num_gpu_blocks=5000)
    assert (cfg.max_num_queued_reqs, cfg.prefill_schedule_interval, cfg.stream_interval) == (64, 4, 8)
    assert Deployment.from_engine_config(cfg, max_model_len=4096).max_num_active_seqs == 32


def test_a_one_replica_cluster_refuses_what_the_stand_alone_engine_refuses() -> None:
    """A cluster's replica is a vLLM server with its own API server: the same 503s as the engine
    alone (routing at the arrival time), counted in the fleet's summary."""
    from servesim.cluster import Replica, simulate_cluster

    rows = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.004, "prompt_len": 200, "output_len": 30}
        for i in range(80)
    ]
    trace = Trace.from_records(rows)
    cfg = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=512, max_num_queued_reqs=12, max_num_queued_tokens=1500
    )
    model = ConstantStepTime(step_time_s=0.01)
    alone = simulate(trace, cfg, model)
    fleet = simulate_cluster(trace, [Replica("n0", cfg, model)])
    assert list(fleet.requests["outcome"]) == list(alone.requests["outcome"])
    adm = fleet.summary.cluster.admission
    assert adm is not None and alone.summary.admission is not None
    assert adm.num_rejected == alone.summary.admission.num_rejected > 0
