"""Data parallelism with expert parallelism (``perf.expert_parallel``): the MoE layers' split
against vLLM's own ``FusedMoEParallelConfig.make`` / ``determine_expert_map``, the per-GPU
weights and KV that follow, the dispatch/combine time in closed form, DP padding, and the
lockstep step of hand-worked batches."""

from __future__ import annotations

import math
from typing import Any

import pytest

from oracle_venv import run_oracle_tool
from servesim.engine.step_time import BatchComposition
from servesim.perf.catalog import load_catalog
from servesim.perf.errors import PerfError
from servesim.perf.expert_parallel import (
    DataParallelStepTime,
    check_data_parallel,
    dispatch_combine_bytes,
    dp_padded_sizes,
    expert_shards,
    local_experts,
    moe_parallel_sizes,
)
from servesim.perf.memory import kv_capacity, weight_breakdown
from servesim.perf.roofline import build_step_time_model

#: (tp, dp, enable_expert_parallel, experts): even and uneven expert splits, EP on and off.
MOE_CASES = [
    (1, 8, True, 128),
    (2, 4, True, 128),
    (4, 2, False, 128),
    (1, 3, True, 8),
    (2, 3, True, 256),
    (1, 1, True, 64),
]


@pytest.fixture(scope="module")
def vllm_moe() -> list[dict[str, Any]]:
    items = [{"kind": "moe", "tp": tp, "dp": dp, "ep": ep, "num_experts": e} for tp, dp, ep, e in MOE_CASES]
    return run_oracle_tool("dp_oracle.py", items, timeout=300)


@pytest.mark.parametrize("i", range(len(MOE_CASES)))
def test_moe_split_is_vllms(vllm_moe: list[dict[str, Any]], i: int) -> None:
    """Every GPU's MoE tp/ep sizes and the experts it holds are what vLLM 0.33 computes."""
    tp, dp, ep, experts = MOE_CASES[i]
    gpus = vllm_moe[i]["gpus"]
    assert len(gpus) == tp * dp
    moe_tp, ep_size = moe_parallel_sizes(tp, dp, ep)
    held = local_experts(experts, ep_size)
    for k, g in enumerate(gpus):  # vLLM's ep_rank is the flattened rank dp_rank x tp + tp_rank
        assert (g["tp_size"], g["ep_size"], g["use_ep"]) == (moe_tp, ep_size, ep_size > 1)
        assert g["local_experts"] == held[k % ep_size]


def test_expert_bytes_per_gpu_are_the_fullest_gpus_experts() -> None:
    """Qwen3-235B (128 experts, 94 MoE layers): the experts' bytes on a GPU are its whole experts
    under EP (``ceil(E / ep)`` on the fullest), a 1/(D x tp) slice of each without; the rest of
    the weights are one DP rank's TP split, as at TP alone."""
    m = load_catalog().model("qwen3-235b-a22b")
    one_expert = m.num_moe_layers * m.expert_params * m.bytes_of("experts")
    for tp, dp, ep in [(1, 8, True), (2, 4, True), (4, 2, False), (1, 3, True)]:
        w = weight_breakdown(m, tp, expert_shards(m, tp, dp, ep))
        held = max(local_experts(m.num_experts, dp * tp)) if ep else m.num_experts / (dp * tp)
        assert w.experts == int(held * one_expert)
        at_tp = weight_breakdown(m, tp)
        assert w.total - w.experts == at_tp.total - at_tp.experts
    # 3 EP ranks of 128 experts: 43, 43, 42; memory is sized by a GPU with 43
    assert expert_shards(m, 1, 3, True) == pytest.approx(128 / 43)


def test_kv_per_rank_grows_as_experts_spread() -> None:
    """DP 8 x TP 1 with EP puts 1/8 of the experts on each GPU: each rank's KV cache is what one
    GPU has left after its attention (whole) and its experts; every rank has one."""
    kw: dict[str, Any] = {"max_model_len": 8192, "max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    m = load_catalog().model("qwen3-235b-a22b")
    dp8 = kv_capacity(m, "h200", 1, expert_shards=expert_shards(m, 1, 8, True), **kw)
    tp8 = kv_capacity(m, "h200", 8, **kw)
    assert dp8.weights.experts == tp8.weights.experts
    assert dp8.weights.attention == weight_breakdown(m, 1).attention > tp8.weights.attention
    assert dp8.kv_cache_bytes == dp8.requested_bytes - dp8.weight_bytes - dp8.reserve_bytes
    with pytest.raises(PerfError, match="does not fit"):
        kv_capacity(m, "h200", 1, **kw)  # without DP's expert split one GPU cannot hold it


def test_refusals_name_the_flag() -> None:
    dense = load_catalog().model("llama-3.1-8b")
    with pytest.raises(PerfError, match=r"--enable-expert-parallel with llama-3\.1-8b: a dense model"):
        check_data_parallel(dense, 1, 2, True)
    check_data_parallel(dense, 1, 2, False)  # dense DP: independent ranks, accepted
    with pytest.raises(PerfError, match="--data-parallel-size must be >= 1"):
        check_data_parallel(dense, 1, 0, False)


def test_dispatch_combine_closed_form() -> None:
    """Per MoE layer a GPU all-gathers the other ranks' tokens (hidden + router logits) and
    reduce-scatters their outputs (hidden), each over the link, plus a latency per peer each."""
    base = build_step_time_model("qwen3-235b-a22b", "h200", 1, warn=False)
    dp = DataParallelStepTime(base, 4, True)
    m, g, pr = base.model, base.gpu, base.profile
    link = g.interconnect_bandwidth * pr.interconnect_efficiency
    own, total = 16, 64
    gather, scatter = dispatch_combine_bytes(m, own, total)
    assert gather == 48 * (4096 + 128) * 2 and scatter == 48 * 4096 * 2
    want = 94 * (gather + scatter) / link + 94 * 2 * pr.allreduce_latency_s * 3
    assert dp.dispatch_combine_time(own, total) == pytest.approx(want, rel=1e-12)
    assert DataParallelStepTime(base, 1, False).dispatch_combine_time(own, own) == 0.0


def test_padding_is_coordinate_batch_across_dp() -> None:
    """Each rank's CUDA-graph size, then all padded to the largest; no padding when a rank runs
    eager (the synced CUDA-graph mode is a minimum)."""
    pad = [0, 1, 2, 4, 4, 8, 8, 8, 8]
    assert dp_padded_sizes([3, 1], pad, 8) == [4, 4]
    assert dp_padded_sizes([5, 1, 2], pad, 8) == [8, 8, 8]
    assert dp_padded_sizes([9, 1], pad, 8) == [9, 1]


BATCHES = [
    BatchComposition(8, 8000, []),
    BatchComposition(3, 3000, [(500, 0)]),
    BatchComposition(0, 0, [(4000, 100)]),
    BatchComposition(700, 700 * 900, []),
]


@pytest.mark.parametrize("b", BATCHES, ids=repr)
def test_one_rank_is_the_plain_roofline(b: BatchComposition) -> None:
    """DP 1: the group's step is the TP roofline's step to the bit (no collective, no padding)."""
    base = build_step_time_model("qwen3-30b-a3b", "h100", 2, warn=False)
    assert DataParallelStepTime(base, 1, False).lockstep([b]) == base.step_time(b)


def test_lockstep_lasts_the_slowest_rank() -> None:
    """Two ranks, one idle: the idle rank runs the dummy batch padded to the busy rank's size,
    the experts see both ranks' tokens, and the step lasts the busy rank's time."""
    base = build_step_time_model("qwen3-30b-a3b", "h100", 1, warn=False)
    dp = DataParallelStepTime(base, 2, True)
    busy = BatchComposition(6, 6000, [])
    t_busy, t_idle = dp.rank_times([busy, None])
    assert t_busy > t_idle
    assert dp.lockstep([busy, None]) == t_busy
    assert dp.lockstep([None, busy]) == t_busy
    # the same rank's step by hand: 6 tokens padded to the graph of 8, the group's 16 tokens
    # through the experts, the all-gather / reduce-scatter of the other rank's 8
    comp = 8 * dp._c_tok + 6 * dp._c_sample + 16 * dp._topk * dp._c_routed / 2
    frac = max(1.0 - dp._miss**7, dp._touch_floor)  # 6 + the dummy's 1 real token
    mem = dp._m_weights + 6 * dp._m_act_tok + dp._experts * frac * dp._m_expert / 2
    gemm = (comp**dp._p + mem**dp._p) ** (1 / dp._p)
    attn = max(6000 * dp._d_cmp, 6000 * dp._a_mem)
    want = dp._fixed + gemm + attn + dp.dispatch_combine_time(8, 16) + 6 * (dp._per_seq + dp._gather_sample)
    assert t_busy == pytest.approx(want, rel=1e-12)
    # two busy ranks: each the same, and a larger group step than one busy rank's
    assert dp.lockstep([busy, busy]) > t_busy
    assert dp.rank_times([busy, busy])[0] == dp.rank_times([busy, busy])[1]
    assert not math.isnan(dp.lockstep([None, None]))  # a wave's tail: both ranks dummy
