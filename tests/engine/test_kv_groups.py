"""KV cache groups: vLLM's group layout and the blocks a windowed group holds, worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.kv_groups import KVCacheGroup, plan_groups
from servesim.traces.schema import Trace

SW = KVCacheGroup(kind="sliding_window", window=128)
CL = KVCacheGroup(kind="chunked_local", window=8192)
FULL = KVCacheGroup(kind="full")


@pytest.mark.parametrize(
    ("layers", "groups", "size"),
    [
        ([SW, FULL] * 12, [SW, FULL], 12),  # gpt-oss-20b
        ([SW] * 5 + [FULL], [SW] * 5 + [FULL], 1),
        ([SW] * 52 + [FULL] * 10, [SW] * 6 + [FULL], 10),  # Gemma 3 27B: 8 padding layers
        ([CL, CL, CL, FULL] * 12, [CL] * 3 + [FULL], 12),  # Llama 4 Scout
        ([SW] * 12 + [FULL] * 13, [SW, FULL], 13),  # gpt-oss + EAGLE: under 1.5x, the larger size
        ([FULL] * 4 + [SW] * 4, [FULL, SW], 4),  # the first layer's kind comes first
        ([SW] * 32, [SW], 32),  # one kind: one group of every layer
    ],
)
def test_groups_are_planned_as_vllm_plans_them(layers: list, groups: list, size: int) -> None:
    assert plan_groups(layers) == (groups, size)


def test_a_group_kind_and_its_window_go_together() -> None:
    with pytest.raises(ValueError, match="kv_cache_groups: a sliding_window group needs a window"):
        KVCacheGroup(kind="sliding_window")
    with pytest.raises(ValueError, match="async_scheduling with sliding-window"):
        EngineConfig(num_gpu_blocks=100, kv_cache_groups=[SW, FULL], async_scheduling=True)


def _one_request(prompt: int, output: int, groups: list, bs: int, budget: int) -> list[int]:
    trace = Trace.from_records(
        [{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": prompt, "output_len": output}]
    )
    cfg = EngineConfig(
        num_gpu_blocks=4000,
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=4,
        enable_prefix_caching=False,
        kv_cache_groups=groups,
    )
    log: list[dict] = []
    simulate(trace, cfg, ConstantStepTime(step_time_s=0.01), step_log=log.append, check_invariants=True)
    return [d["kv_blocks_used"] for d in log]


@settings(max_examples=25, deadline=None)
@given(
    prompt=st.integers(1, 700),
    output=st.integers(1, 60),
    window=st.integers(2, 300),
    bs=st.sampled_from([8, 16, 32]),
    budget=st.sampled_from([64, 256, 2048]),
)
def test_a_sliding_window_holds_the_window_and_the_new_tokens(
    prompt: int, output: int, window: int, bs: int, budget: int
) -> None:
    """One request alone, by hand: a step computing ``n`` tokens after ``c`` holds every block up
    to token ``c + n`` in the full group and, in the window's group, the blocks from the one
    holding token ``c - window + 1`` (the oldest the next token attends to) on."""
    used = _one_request(
        prompt, output, [KVCacheGroup(kind="sliding_window", window=window), FULL], bs, budget
    )
    c, want = 0, []
    while c < prompt + output - 1:
        n = min(budget, prompt - c) if c < prompt else 1
        end = -(-(c + n) // bs)
        first = max(0, c - window + 1) // bs
        want.append(end + (end - first))
        c += n
    assert used == want


MAMBA = KVCacheGroup(kind="mamba")


@settings(max_examples=25, deadline=None)
@given(
    prompt=st.integers(1, 700),
    output=st.integers(1, 60),
    bs=st.sampled_from([8, 16, 272]),
    budget=st.sampled_from([64, 256, 2048]),
)
def test_a_mamba_group_holds_one_state_block_for_the_whole_request(
    prompt: int, output: int, bs: int, budget: int
) -> None:
    """One request alone, by hand (vLLM's MambaManager without prefix caching): every step holds
    the full group's blocks up to token ``c + n`` and one block in each of three mamba groups."""
    used = _one_request(prompt, output, [MAMBA, MAMBA, MAMBA, FULL], bs, budget)
    c, want = 0, []
    while c < prompt + output - 1:
        n = min(budget, prompt - c) if c < prompt else 1
        want.append(-(-(c + n) // bs) + 3)
        c += n
    assert used == want


def test_prefix_caching_beside_a_mamba_group_needs_chunked_prefill_as_vllms_align_mode_does() -> None:
    with pytest.raises(ValueError, match=r"mamba_cache_mode 'align'.*--no-enable-chunked-prefill"):
        EngineConfig(num_gpu_blocks=100, kv_cache_groups=[MAMBA, FULL], enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="kv_cache_groups: a mamba group takes no window"):
        KVCacheGroup(kind="mamba", window=4)
    for caching in (True, False):
        cfg = EngineConfig(num_gpu_blocks=100, kv_cache_groups=[MAMBA, FULL], enable_prefix_caching=caching)
        assert cfg.hybrid


def _aligned_chunks(prompt: int, bs: int, budget: int, ckpt: int) -> list[int]:
    """vLLM's ``_mamba_block_aligned_split`` for one request alone, by hand: a chunk that does
    not finish the prompt ends at a block boundary, and none runs past the last block boundary
    before the prompt's last token -- unless (``ckpt``) the last chunk starts on a boundary a
    block or more before it, when the backend saves that state within the chunk."""
    c, out = 0, []
    last = (prompt - 1) // bs * bs
    while c < prompt:
        end = min(c + budget, prompt)
        if end < prompt:
            end = end // bs * bs
        internal = ckpt and end == prompt and c % bs == 0 and c + bs <= last < end
        if not internal and c < last < end:
            end = last
        out.append(end - c)
        c = end
    return out


@settings(max_examples=30, deadline=None)
@given(
    prompt=st.integers(1, 700),
    output=st.integers(1, 30),
    bs=st.sampled_from([8, 16, 32]),
    budget=st.sampled_from([64, 100, 256, 2048]),
    ckpt=st.sampled_from([0, 1]),
)
def test_with_prefix_caching_mamba_groups_cut_prefill_chunks_at_block_boundaries(
    prompt: int, output: int, bs: int, budget: int, ckpt: int
) -> None:
    """vLLM's mamba_cache_mode "align", one request alone: its prefill chunks are cut as worked by
    hand (``_aligned_chunks``), then it decodes a token a step; each mamba group holds the running
    state, the one it was copied from and, in the chunk that saves one, a checkpoint."""
    trace = Trace.from_records(
        [{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": prompt, "output_len": output}]
    )
    cfg = EngineConfig(
        num_gpu_blocks=4000,
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=4,
        kv_cache_groups=[MAMBA, MAMBA, MAMBA, FULL],
        mamba_prefill_checkpoint_blocks=ckpt,
    )
    log: list[dict] = []
    simulate(trace, cfg, ConstantStepTime(step_time_s=0.01), step_log=log.append, check_invariants=True)
    chunks = [d["scheduled_tokens"]["a"] for d in log]
    assert chunks == _aligned_chunks(prompt, bs, budget, ckpt) + [1] * (output - 1)
