"""A hybrid model's KV usage split by KV cache group kind: worked by hand for one request, and
for random traces the split adds up to the run's KV usage while every step's counts match a
recount of the groups' tables (KV-7, ``Engine.assert_invariants``).

Why: the per-group figures are what tell a person whether a gpt-oss / Gemma-3 / Llama-4 cache
fills with the full layers' blocks or the windowed ones'; they must be exact, not estimates.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.kv_groups import KVCacheGroup, blocks_for_one_sequence, skipped_tokens
from servesim.engine.recorder import Recorder
from servesim.traces.schema import Trace

FULL = KVCacheGroup(kind="full")


def _kind_blocks(result: object, usable: int) -> dict[str, list[int]]:
    """Each ``kv_usage:<kind>`` column of the steps frame as block counts."""
    steps = result.steps  # type: ignore[attr-defined]
    return {
        c.removeprefix("kv_usage:"): [round(v * usable) for v in steps[c]]
        for c in steps.columns
        if c.startswith("kv_usage:")
    }


@settings(max_examples=25, deadline=None)
@given(
    prompt=st.integers(1, 700),
    output=st.integers(1, 60),
    kind=st.sampled_from(["sliding_window", "chunked_local"]),
    window=st.integers(2, 300),
    bs=st.sampled_from([8, 16, 32]),
    budget=st.sampled_from([64, 256, 2048]),
)
def test_one_request_holds_the_blocks_worked_by_hand_in_each_group(
    prompt: int, output: int, kind: str, window: int, bs: int, budget: int
) -> None:
    """One request alone: a step computing ``n`` tokens after ``c`` holds, in the full group,
    every block up to token ``c + n``; in the windowed group, the blocks from the one holding
    the first token the next token still attends to (``c - window + 1`` for a sliding window,
    the start of ``c``'s chunk for chunked local attention) on."""
    win = KVCacheGroup(kind=kind, window=window)  # type: ignore[arg-type]
    trace = Trace.from_records(
        [{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": prompt, "output_len": output}]
    )
    cfg = EngineConfig(
        num_gpu_blocks=4001,
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=4,
        enable_prefix_caching=False,
        kv_cache_groups=[win, FULL],
    )
    log: list[dict] = []
    result = simulate(
        trace, cfg, ConstantStepTime(step_time_s=0.01), step_log=log.append, check_invariants=True
    )
    c, want_win, want_full = 0, [], []
    while c < prompt + output - 1:
        n = min(budget, prompt - c) if c < prompt else 1
        end = -(-(c + n) // bs)
        want_full.append(end)
        want_win.append(end - skipped_tokens(kind, window, c) // bs)
        c += n
    assert _kind_blocks(result, 4000) == {win.label(): want_win, "full": want_full}
    total = result.steps["kv_blocks_used"].tolist()
    assert total == [a + b for a, b in zip(want_win, want_full, strict=True)]
    # --step-log's lines split kv_blocks_used the same way
    assert [d["kv_blocks_by_group"] for d in log] == [
        {win.label(): a, "full": b} for a, b in zip(want_win, want_full, strict=True)
    ]


LAYOUTS = {
    "gpt-oss": [KVCacheGroup(kind="sliding_window", window=48), FULL],
    "gemma-3": [KVCacheGroup(kind="sliding_window", window=96)] * 5 + [FULL],
    "llama-4": [KVCacheGroup(kind="chunked_local", window=64)] * 3 + [FULL],
}


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    n = draw(st.integers(3, 24))
    rows = []
    t = 0.0
    for i in range(n):
        t += draw(st.floats(0.0, 0.05))
        prompt = draw(st.integers(1, 400))
        group = draw(st.sampled_from([None, "p", "q"]))
        shared = draw(st.integers(0, prompt)) if group else 0
        rows.append(
            {
                "req_id": f"r{i}",
                "arrival_time_s": t,
                "prompt_len": prompt,
                "output_len": draw(st.integers(1, 80)),
                "prefix_group": group,
                "prefix_len": shared,
            }
        )
    return Trace.from_records(rows)


@settings(max_examples=30, deadline=None)
@given(
    trace=traces(),
    layout=st.sampled_from(sorted(LAYOUTS)),
    spare=st.integers(0, 400),
    caching=st.booleans(),
)
def test_the_group_kinds_split_the_runs_kv_usage_exactly(
    trace: Trace, layout: str, spare: int, caching: bool
) -> None:
    """Random traces with shared prefixes, pools small enough to preempt: every step the groups'
    counts match a recount of their tables (KV-7, checked by ``check_invariants``), the kinds'
    columns add up to ``kv_blocks_used``, and the summary's per-kind means add up to the run's
    mean usage, each kind's max no more than the run's."""
    groups = LAYOUTS[layout]
    # the least pool vLLM starts with (one sequence of max_model_len), plus a few blocks
    blocks = blocks_for_one_sequence(groups, 512, 16, 128) + 1 + spare
    cfg = EngineConfig(
        num_gpu_blocks=blocks,
        max_model_len=512,
        block_size=16,
        max_num_batched_tokens=128,
        max_num_seqs=8,
        enable_prefix_caching=caching,
        kv_cache_groups=groups,
    )
    result = simulate(trace, cfg, ConstantStepTime(step_time_s=0.01), check_invariants=True)
    kinds = _kind_blocks(result, blocks - 1)
    assert list(kinds) == list(dict.fromkeys(g.label() for g in groups))  # vLLM's group order
    total = result.steps["kv_blocks_used"].to_numpy()
    assert np.array_equal(np.sum(list(kinds.values()), axis=0), total)
    s = result.summary
    assert s.kv_usage_by_group is not None
    assert [g.group for g in s.kv_usage_by_group] == list(kinds)
    assert sum(g.mean_usage for g in s.kv_usage_by_group) == pytest.approx(s.mean_kv_usage, abs=1e-12)
    assert max(g.max_usage for g in s.kv_usage_by_group) <= s.max_kv_usage
    for g in s.kv_usage_by_group:
        assert g.max_usage == pytest.approx(max(kinds[g.group]) / (blocks - 1), abs=1e-15)


def test_a_model_with_one_block_table_reports_no_split() -> None:
    """A full-attention model (or a single full group) keeps its documents byte for byte: no
    ``kv_usage_by_group`` key, no per-kind column."""
    trace = Trace.from_records(
        [{"req_id": f"r{i}", "arrival_time_s": i * 0.01, "prompt_len": 50, "output_len": 5} for i in range(5)]
    )
    for groups in (None, [FULL]):
        cfg = EngineConfig(num_gpu_blocks=200, kv_cache_groups=groups)
        result = simulate(trace, cfg, ConstantStepTime(step_time_s=0.01))
        assert result.summary.kv_usage_by_group is None
        assert "kv_usage_by_group" not in result.summary.model_dump_json()
        assert not [c for c in result.steps.columns if c.startswith("kv_usage:")]
        log: list[dict] = []
        simulate(trace, cfg, ConstantStepTime(step_time_s=0.01), step_log=log.append)
        assert log and not [d for d in log if "kv_blocks_by_group" in d]


def test_a_rolling_recorder_keeps_each_kept_steps_group_counts() -> None:
    """An online fleet's rolling recorder drops old steps: their group counts go with them, so
    the k-th kept row still has the k-th kept counts."""
    rec = Recorder(0)
    rec.kv_group_steps = array("i")
    rec.num_kv_groups = 2
    for k in range(10):
        rec.steps.extend(rec.pack_step(float(k), 1, 1, 0, 1, 0, 3 * k, 0, 0, 0))
        rec.durations.append(1.0)
        rec.step_end.append(k + 1.0)
        rec.kv_group_steps.extend((k, 2 * k))
    rec.trim(keep_steps=4, keep_requests=100)
    kept = rec.step_table()
    counts = np.frombuffer(rec.kv_group_steps, dtype=np.intc).reshape(-1, 2)
    assert len(counts) == len(kept) == 4
    assert (counts.sum(axis=1) == kept["kv_blocks_used"]).all()
    assert counts[:, 0].tolist() == [6, 7, 8, 9]
