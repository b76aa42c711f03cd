"""The worked examples of docs/vllm-scheduling.md §10, derived by hand from vLLM's rules.

Each example is replayed with every step taking the same time, and the step log is checked
against the hand-derived schedule: which requests get how many tokens, when prefixes hit, who is
preempted and in which order they come back.
"""

from __future__ import annotations

from helpers import by_step, run_steps, trace_of

AMPLE = {"num_gpu_blocks": 10000, "enable_prefix_caching": True, "max_num_seqs": 64}


def _example_a_trace(threshold_w_alone: bool = False):  # type: ignore[no-untyped-def]
    if threshold_w_alone:
        return trace_of(("W", 0, 3000, 5))
    # R1..R3 are decoding when W (a 3000-token prompt) arrives at step 1.
    return trace_of(("R1", 0, 16, 50), ("R2", 0, 16, 50), ("R3", 0, 16, 50), ("W", 1, 3000, 5))


def test_a_chunked_prefill_shares_the_budget_with_running_decodes() -> None:
    _, log = run_steps(_example_a_trace(), max_num_batched_tokens=2048, **AMPLE)
    steps = by_step(log)
    assert steps[1]["scheduled_tokens"] == {"R1": 1, "R2": 1, "R3": 1, "W": 2045}
    assert steps[2]["scheduled_tokens"] == {"R1": 1, "R2": 1, "R3": 1, "W": 955}
    assert steps[2]["num_tokens"] == 958
    # W's 3000 tokens fill ceil(3000/16) = 188 blocks; each decode (17 -> 18 tokens) holds 2.
    assert steps[2]["kv_blocks_used"] == 188 + 3 * 2
    assert "W" not in steps[1]["finished"]


def test_a_long_prefill_threshold_caps_the_chunk_per_step() -> None:
    result, log = run_steps(
        _example_a_trace(), max_num_batched_tokens=2048, long_prefill_token_threshold=512, **AMPLE
    )
    steps = by_step(log)
    assert [steps[k]["scheduled_tokens"]["W"] for k in range(1, 7)] == [512] * 5 + [440]
    assert [steps[k]["num_tokens"] for k in range(1, 7)] == [515] * 5 + [443]
    w = result.requests.set_index("req_id").loc["W"]
    assert w["ttft_ms"] == 6 * 1000 / 64  # first token after 6 steps


def test_a_threshold_is_ignored_for_a_lone_request() -> None:
    _, log = run_steps(
        _example_a_trace(threshold_w_alone=True),
        max_num_batched_tokens=2048,
        long_prefill_token_threshold=512,
        **AMPLE,
    )
    assert [d["scheduled_tokens"]["W"] for d in log[:2]] == [2048, 952]


def test_b_chunking_off_rejects_prompts_that_cannot_fit_one_step() -> None:
    result, _ = run_steps(
        _example_a_trace(),
        max_num_batched_tokens=2048,
        max_model_len=2048,
        enable_chunked_prefill=False,
        **AMPLE,
    )
    w = result.requests.set_index("req_id").loc["W"]
    assert w["outcome"] == "rejected_prompt_too_long"
    assert result.summary.num_rejected_prompt_too_long == 1


def test_b_chunking_off_prefills_whole_prompts_with_head_of_line_blocking() -> None:
    trace = trace_of(
        ("R1", 0, 16, 50),
        ("R2", 0, 16, 50),
        ("R3", 0, 16, 50),
        ("W1", 1, 3000, 5),
        ("W2", 1, 1500, 5),
        ("T", 1, 8, 5),
    )
    common = {"max_num_batched_tokens": 4096, "max_model_len": 4096, **AMPLE}
    _, log = run_steps(trace, enable_chunked_prefill=False, **common)
    steps = by_step(log)
    # W1 whole; W2 (1500 > 1093 left) stops the scan: T, though tiny, waits behind it.
    assert steps[1]["scheduled_tokens"] == {"R1": 1, "R2": 1, "R3": 1, "W1": 3000}
    assert "T" not in steps[1]["scheduled_tokens"]
    assert steps[2]["scheduled_tokens"]["W2"] == 1500
    # With chunking on, W2 takes the 1093 tokens left in step 1 instead.
    _, log_on = run_steps(trace, enable_chunked_prefill=True, **common)
    assert by_step(log_on)[1]["scheduled_tokens"]["W2"] == 1093


def test_c_preemption_cascade_from_the_non_reserving_admission_gate() -> None:
    trace = trace_of(("D", 0, 128, 10), ("E", 0, 16, 50), ("F", 0, 16, 50), ("G", 0, 16, 50))
    result, log = run_steps(
        trace,
        num_gpu_blocks=11,
        long_prefill_token_threshold=32,
        max_num_batched_tokens=2048,
        enable_prefix_caching=True,
    )
    s = {i + 1: d for i, d in enumerate(log)}  # the example numbers steps from 1
    assert s[1]["scheduled_tokens"] == {"D": 32, "E": 16, "F": 16, "G": 16}
    assert s[1]["kv_blocks_free"] == 5
    assert s[2]["kv_blocks_free"] == 0
    assert s[3]["preempted"] == ["G"] and s[3]["scheduled_tokens"] == {"D": 32, "E": 1, "F": 1}
    assert s[4]["preempted"] == ["F"]
    assert s[5]["preempted"] == ["E"]
    assert s[5]["kv_blocks_free"] == 1  # D took E's unhashed block; E's cached block 0 survives
    assert all(not s[k]["new"] and not s[k]["resumed"] for k in (3, 4, 5))  # no admission in those steps
    # Victims were prepended one by one, so they come back in their original order: E, F, G.
    order = [r for d in log for r in d["resumed"]]
    assert order[:3] == ["E", "F", "G"]
    e_back = next(d for d in log if "E" in d["resumed"])
    assert e_back["prefix_hit_tokens"] == {"E": 16}  # block 0 still cached: 4 of 20 tokens recomputed
    assert sum(len(s[k]["preempted"]) for k in range(1, 6)) == 3  # vllm:num_preemptions = 3 so far
    assert result.summary.num_preemptions == len(result.preemptions) >= 3


def test_d_preempted_request_recovers_what_the_cache_still_holds() -> None:
    trace = trace_of(("A", 0, 48, 10), ("B", 0, 48, 10), ("C", 0, 48, 10))
    result, log = run_steps(trace, num_gpu_blocks=11, enable_prefix_caching=True, max_num_batched_tokens=2048)
    s = {i + 1: d for i, d in enumerate(log)}
    assert s[1]["scheduled_tokens"] == {"A": 48, "B": 48, "C": 48} and s[1]["kv_blocks_free"] == 1
    assert s[2]["preempted"] == ["C"]
    assert s[2]["kv_blocks_free"] == 2  # C1 and C0 are free but still cached; B took C2
    # C (49 tokens, 2 cached blocks) needs 4 - 2 + 2 evictable = 4 > 2 free blocks: it waits.
    assert not s[3]["resumed"]
    back = next(d for d in log if "C" in d["resumed"])
    assert back["prefix_hit_tokens"] == {"C": 32}  # A and B finished before needing a 5th block
    c = result.requests.set_index("req_id").loc["C"]
    assert (c["reused_tokens"], c["recomputed_tokens"]) == (32, 16)  # of the 48 computed before


def test_d_eviction_eats_the_victims_tail_first() -> None:
    trace = trace_of(("A", 0, 48, 30), ("B", 0, 48, 30), ("C", 0, 48, 10))
    result, log = run_steps(trace, num_gpu_blocks=11, enable_prefix_caching=True, max_num_batched_tokens=2048)
    back = next(d for d in log if "C" in d["resumed"])
    assert back["prefix_hit_tokens"] == {}  # A's and B's 5th blocks took C1, then C0
    assert result.requests.set_index("req_id").loc["C", "reused_tokens"] == 0


def test_e_identical_prompts_recompute_the_last_block() -> None:
    for prompt, hit in ((1000, 992), (1024, 1008)):
        group = {"prefix_group": "same", "prefix_len": prompt}
        trace = trace_of(
            {"req_id": "first", "arrival_time_s": 0.0, "prompt_len": prompt, "output_len": 2, **group},
            {"req_id": "again", "arrival_time_s": 1.0, "prompt_len": prompt, "output_len": 2, **group},
        )
        result, log = run_steps(trace, **AMPLE)
        again = next(d for d in log if "again" in d["new"])
        assert again["prefix_hit_tokens"] == {"again": hit}
        assert again["scheduled_tokens"]["again"] == prompt - hit
        assert result.summary.prefix_cache_hit_rate == hit / (2 * prompt)
