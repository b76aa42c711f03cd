"""Pipeline parallelism's arithmetic (``perf.pipeline``): the layer split against vLLM 0.33's own
``get_pp_indices``, each stage's weights and KV blocks by closed forms, each stage's step time
and the activations it sends onward."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from oracle_venv import run_oracle_tool
from servesim.engine.step_time import BatchComposition
from servesim.errors import ConfigError
from servesim.perf.catalog import resolve_gpu, resolve_model
from servesim.perf.errors import MemoryFitError
from servesim.perf.memory import kv_bytes_per_token, kv_capacity, weight_breakdown
from servesim.perf.pipeline import (
    StageStepTime,
    build_pipeline_step_time,
    check_pp,
    p2p_bytes_per_token,
    pp_indices,
    pp_kv_capacity,
    pp_partition,
    stage_weights,
    stages,
)
from servesim.perf.roofline import RooflineStepTime, build_step_time_model

GRID = [
    (n, p) for n in (1, 2, 3, 7, 26, 32, 61, 62, 80, 81, 95, 126) for p in (1, 2, 3, 4, 5, 6, 8) if p <= n
]
PARTITIONS = [
    (80, 2, "30,50"),
    (80, 4, "19,21,20,20"),
    (32, 3, "10,11,11"),
    (80, 2, "30,40"),
    (80, 3, "40,40"),
]


def test_the_split_worked_by_hand_from_vllms_rule() -> None:
    # 80 = 3 x 26 + 2: the two left over go to the stages before the last, nearest it first
    assert pp_partition(80, 3) == (27, 27, 26)
    assert pp_partition(81, 4) == (20, 20, 21, 20)  # one left over: the stage before the last
    assert pp_partition(32, 5) == (6, 6, 7, 7, 6)
    assert pp_partition(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)  # 6 over: the middle stages
    assert pp_indices(80, 1, 3) == (27, 54)
    assert pp_partition(80, 2, "30,50") == (30, 50)


@pytest.fixture(scope="module")
def vllm_split() -> list[dict[str, Any]]:
    items = [{"num_layers": n, "pp": p, "partition": None} for n, p in GRID]
    items += [{"num_layers": n, "pp": p, "partition": s} for n, p, s in PARTITIONS]
    return run_oracle_tool("pp_indices_oracle.py", items, timeout=300)


def test_the_split_is_vllms_get_pp_indices(vllm_split: list[dict[str, Any]]) -> None:
    for (n, p), got in zip(GRID, vllm_split, strict=False):
        assert [list(pp_indices(n, r, p)) for r in range(p)] == got["indices"], (n, p)
    for (n, p, s), got in zip(PARTITIONS, vllm_split[len(GRID) :], strict=True):
        if "error" in got:  # vLLM refuses the partition: so does servesim, naming it
            with pytest.raises(ConfigError, match="VLLM_PP_LAYER_PARTITION"):
                pp_partition(n, p, s)
        else:
            assert [list(pp_indices(n, r, p, s)) for r in range(p)] == got["indices"], (n, p, s)


def test_refusals_name_the_flag() -> None:
    m = resolve_model("llama-3.1-8b")
    with pytest.raises(
        ConfigError, match=re.escape("pipeline_parallel_size 40 exceeds llama-3.1-8b's 32 layers")
    ):
        check_pp(m, 1, 40)
    with pytest.raises(ConfigError, match="tensor_parallel_size 8 x pipeline_parallel_size 16 = 128 GPUs"):
        check_pp(m, 8, 16)
    with pytest.raises(ConfigError, match="pipeline_parallel_size must be >= 1"):
        pp_partition(32, 0)


@pytest.mark.parametrize("name", ["llama-3.1-70b", "llama-3.1-8b", "qwen2.5-7b"])
@pytest.mark.parametrize("pp", [2, 3, 4])
def test_stage_weights_add_up_to_the_model(name: str, pp: int) -> None:
    """Summed over stages the weights are the model's, plus what every stage holds a copy of:
    the RoPE table, and, when the lm_head is tied to the embedding, the last stage's embedding."""
    m = resolve_model(name)
    tp = 2
    full = weight_breakdown(m, tp)
    parts = [stage_weights(m, st, tp) for st in stages(m, pp)]
    extra = (pp - 1) * full.rope_cache + (full.embedding if m.tie_word_embeddings else 0)
    assert sum(w.total for w in parts) == pytest.approx(full.total + extra, abs=8 * pp)  # int() per part
    assert parts[0].embedding == full.embedding and parts[-1].lm_head == full.lm_head
    assert all(w.lm_head == 0 for w in parts[:-1])
    assert all(w.embedding == 0 for w in parts[1:-1])


def test_kv_blocks_are_the_smallest_stages() -> None:
    """Llama-3.1-70B on 2 stages of 2 x H100: each stage's token is 40 layers x 8 KV heads / 2 x
    128 x 2 x 2 B = 81,920 B, as TP 4 over 80 layers; its blocks are its own free memory over
    that, and the pool is the smaller count (vLLM's get_kv_cache_configs)."""
    m = resolve_model("llama-3.1-70b")
    kw = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024, "max_model_len": 4096}
    cap = pp_kv_capacity(m, "h100", 2, 2, **kw)
    assert [c.kv_bytes_per_token for c in cap.stages] == [81_920, 81_920] == [kv_bytes_per_token(m, 4)] * 2
    for c in cap.stages:
        assert c.num_gpu_blocks == c.kv_cache_bytes // (81_920 * 16)
    assert cap.num_gpu_blocks == min(c.num_gpu_blocks for c in cap.stages)
    # the sampler's reserve is the last stage's alone
    assert cap.stages[0].reserve.sampler == 0 < cap.stages[1].reserve.sampler
    # TP 4 holds the same weights per GPU and reserves the sampler on every GPU
    tp4 = kv_capacity(m, "h100", 4, **kw)
    assert abs(cap.num_gpu_blocks - tp4.num_gpu_blocks) / tp4.num_gpu_blocks < 0.01


def test_a_stage_that_does_not_fit_names_the_stage_and_the_flag() -> None:
    with pytest.raises(
        MemoryFitError, match=r"pipeline stage 0 of 2 \(layers 0-39\).*pipeline_parallel_size"
    ):
        pp_kv_capacity("llama-3.1-70b", "h100", 1, 2, max_model_len=4096, gpu_memory_utilization=0.5)


def test_the_send_onward_is_hidden_and_residual_split_over_tp() -> None:
    m = resolve_model("llama-3.1-70b")
    assert p2p_bytes_per_token(m, 2) == 2 * 8192 * 2 / 2  # hidden_states + residual, bf16, per rank
    g = resolve_gpu("h100")
    st = stages(m, 2)
    mid = StageStepTime(st[0].model, g, 2, first=True, last=False)
    plain = RooflineStepTime(st[0].model, g, 2)
    t = 96  # a CUDA graph size: no padding
    _, tail_mid, _ = mid._shape_terms(t, t, False)
    _, tail_plain, _ = plain._shape_terms(t, t, False)
    link = g.interconnect_bandwidth * plain.profile.interconnect_efficiency
    tok = 2 * 8192 * 2
    assert tail_mid - tail_plain == pytest.approx(t * (tok / 2 + tok * 1 / 2) / link, rel=1e-12)


def test_the_last_stage_is_the_roofline_of_its_layers() -> None:
    """At TP 1 the last stage (lm_head, sampling, no send) is exactly the roofline of its layers;
    an earlier stage is faster by the lm_head and slower by the send."""
    m = resolve_model("llama-3.1-8b")
    g = resolve_gpu("h100")
    st = stages(m, 2)
    last = StageStepTime(st[1].model, g, 1, first=False, last=True)
    plain = RooflineStepTime(st[1].model, g, 1)
    for b in (BatchComposition(64, 64 * 900, []), BatchComposition(3, 3000, [(512, 0)])):
        assert last.step_time(b) == plain.step_time(b)


def test_a_memory_bound_decode_step_is_split_not_multiplied() -> None:
    """Summed over the stages a decode step costs about the whole model's step (the weights are
    read once either way; each stage adds its fixed costs and the send), and the slowest stage
    is about half of it: the pipeline's throughput gain with two micro-batches in flight."""
    full = build_step_time_model(
        "llama-3.1-70b", "h100", 2, max_num_seqs=256, max_num_batched_tokens=2048, warn=False
    )
    pipe = build_pipeline_step_time(full, 2)
    b = BatchComposition(32, 32 * 2000, [])
    parts = pipe.stage_times(b)
    assert sum(parts) == pipe.step_time(b)
    assert math.isclose(sum(parts), full.step_time(b), rel_tol=0.05)
    assert max(parts) < 0.55 * full.step_time(b)


def test_adapter_loads_are_the_largest_stages() -> None:
    """With LoRA each stage loads its own layers' adapter weights at once: two equal stages of
    Llama-3.1-8B read half the bytes the whole model does (perf.lora's load times)."""
    full = build_step_time_model(
        "llama-3.1-8b", "h100", 1, max_num_seqs=64, max_num_batched_tokens=2048, warn=False, lora_slots=2
    )
    pipe = build_pipeline_step_time(full, 2)
    whole, staged = full.adapter_load_times(), pipe.adapter_load_times()
    assert whole is not None and staged is not None
    assert staged.read_s == pytest.approx(whole.read_s / 2, rel=0.02)
