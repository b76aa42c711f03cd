"""The exact reuse rule: full computed blocks come back, the rest is recomputed, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resched_strategies import problems

from servesim.engine import ConstantStepTime
from servesim.resched import InterruptedRequest, reschedule, reusable_tokens, reuse_split
from servesim.resched.models import parse_input
from servesim.resched.plan import split_of


@pytest.mark.parametrize(
    ("processed", "block", "reused", "recomputed"),
    [
        (512, 16, 512, 0),  # seed req-101: block aligned, all of it
        (64, 16, 64, 0),  # seed req-102
        (4096, 16, 4096, 0),  # seed req-201
        (100, 16, 96, 4),  # non-aligned: the partial tail block was never hashed
        (15, 16, 0, 15),  # less than one block: nothing cached
        (16, 16, 16, 0),
        (17, 16, 16, 1),
        (0, 16, 0, 0),
        (100, 1, 100, 0),
        (100, 64, 64, 36),
        (1000, 32, 992, 8),
    ],
)
def test_reuse_rule(processed: int, block: int, reused: int, recomputed: int) -> None:
    assert reusable_tokens(processed, block) == reused
    assert reuse_split(processed, block) == (reused, recomputed)


def test_vllm_cap_num_tokens_minus_one_never_bites_for_an_interrupted_request() -> None:
    # vLLM caps the hit at num_tokens - 1, block aligned. A decoding request has num_tokens = P + 1
    # (its last sampled token is not computed yet), so the cap floor(P / B)·B is exactly the
    # request's full computed blocks, and docs/vllm-scheduling.md §5's "recompute =
    # num_tokens - B·floor((num_tokens - 1)/B)" is our recomputed tokens plus that pending token.
    for processed in range(0, 200):
        for block in (1, 7, 16, 32):
            r = InterruptedRequest(
                req_id="x", tokens_processed=processed, tokens_remaining=5, sla_budget_ms=1
            )
            num_tokens = r.num_tokens
            assert num_tokens == processed + 1
            cap = block * ((num_tokens - 1) // block)
            assert reusable_tokens(processed, block) == cap
            vllm_recompute = num_tokens - block * ((num_tokens - 1) // block)
            assert reuse_split(processed, block).recomputed + 1 == vllm_recompute


def test_prefilling_request_reuses_its_full_computed_blocks_and_prefills_the_rest() -> None:
    # Interrupted at 40 of a 300-token prompt: 32 reused, 8 recomputed, then 260 new prompt tokens.
    plan = reschedule(
        {
            "batch_capacity": 1,
            "interrupted_requests": [
                {
                    "req_id": "p",
                    "tokens_processed": 40,
                    "prompt_len": 300,
                    "tokens_remaining": 2,
                    "sla_budget_ms": 1000,
                }
            ],
        },
        step_time=ConstantStepTime(step_time_s=0.01),
    )
    (p,) = plan.requests
    assert (p.reused_tokens, p.recomputed_tokens) == (32, 8)
    assert p.completion_ms == pytest.approx(20.0)  # one 268-token chunk (samples), one decode


def test_cache_survives_false_recomputes_everything_and_cached_tokens_overrides() -> None:
    reqs = [
        {"req_id": "a", "tokens_processed": 100, "tokens_remaining": 1, "sla_budget_ms": 100},
        {
            "req_id": "b",
            "tokens_processed": 100,
            "tokens_remaining": 1,
            "sla_budget_ms": 100,
            "cached_tokens": 40,
        },
        {
            "req_id": "c",
            "tokens_processed": 100,
            "tokens_remaining": 1,
            "sla_budget_ms": 100,
            "cached_tokens": 0,
        },
    ]
    kept = reschedule({"batch_capacity": 3, "interrupted_requests": reqs, "policy": "fcfs"})
    assert [(p.reused_tokens, p.recomputed_tokens) for p in kept.requests] == [(96, 4), (32, 68), (0, 100)]
    assert kept.prefix_cache_savings_tokens == 128
    gone = reschedule(
        {"batch_capacity": 3, "interrupted_requests": reqs, "policy": "fcfs"}, cache_survives=False
    )
    assert [(p.reused_tokens, p.recomputed_tokens) for p in gone.requests] == [(0, 100), (32, 68), (0, 100)]
    assert gone.prefix_cache_savings_tokens == 32 and gone.recomputed_tokens == 268
    assert "KV blocks are evicted" in gone.assumptions[0] and "b, c" in gone.assumptions[0]
    assert "KV blocks survive" in kept.assumptions[0]


def test_recomputing_costs_time() -> None:
    data = {
        "batch_capacity": 1,
        "interrupted_requests": [
            {"req_id": "a", "tokens_processed": 4000, "tokens_remaining": 1, "sla_budget_ms": 100}
        ],
    }
    kept, gone = reschedule(data), reschedule(data, cache_survives=False)
    assert gone.requests[0].completion_ms > kept.requests[0].completion_ms


@settings(max_examples=80, deadline=None)
@given(problems())
def test_reused_plus_recomputed_is_processed_and_savings_never_exceed_processed(data: dict) -> None:
    plan = reschedule(data)
    by_id = {r["req_id"]: r for r in data["interrupted_requests"]}
    inp = parse_input(data)
    for p in plan.requests:
        r = by_id[p.req_id]
        assert p.reused_tokens + p.recomputed_tokens == r["tokens_processed"] == p.tokens_processed
        assert 0 <= p.reused_tokens <= r["tokens_processed"]
        assert p.reused_tokens % data["block_size"] == 0
        cached = r.get("cached_tokens")
        if cached is not None:
            assert p.reused_tokens <= cached
        elif not data["cache_survives"]:
            assert p.reused_tokens == 0
        else:
            assert r["tokens_processed"] - p.reused_tokens < data["block_size"]
    assert plan.prefix_cache_savings_tokens == sum(p.reused_tokens for p in plan.requests)
    assert plan.prefix_cache_savings_tokens <= sum(
        r["tokens_processed"] for r in data["interrupted_requests"]
    )
    assert plan.prefix_cache_savings_tokens + plan.recomputed_tokens == sum(
        r["tokens_processed"] for r in data["interrupted_requests"]
    )
    assert [split_of(inp, r).reused for r in inp.interrupted_requests] == [
        next(p.reused_tokens for p in plan.requests if p.req_id == r.req_id) for r in inp.interrupted_requests
    ]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**7), st.integers(1, 4096), st.none() | st.integers(0, 10**7))
def test_reuse_split_sums_and_is_block_aligned(processed: int, block: int, cached: int | None) -> None:
    s = reuse_split(processed, block, cached)
    assert s.reused + s.recomputed == processed
    assert s.reused % block == 0 and s.recomputed >= 0
    assert s.reused <= processed if cached is None else s.reused <= min(processed, cached)
    assert (processed if cached is None else min(processed, cached)) - s.reused < block
