"""MLA (DeepSeek-V3/R1, Kimi-K2): the latent KV cache as vLLM 0.33 sizes it, and its roofline.

Checked three ways: against vLLM's own ``MLAAttentionSpec`` and KV-cache planning run in the oracle
virtualenv (skipped where it is absent), against a ``num_gpu_blocks`` worked by hand from the
config's numbers, and against the published parameter counts of the models' cards.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from oracle_venv import run_oracle_tool
from servesim.engine.step_time import BatchComposition
from servesim.perf.catalog import load_catalog, model_from_hf_config
from servesim.perf.errors import CatalogError, MemoryFitError, PerfError
from servesim.perf.memory import (
    MemoryOverheads,
    check_kv_cache_dtype,
    kv_bytes_per_token,
    kv_capacity,
    reserve_breakdown,
)
from servesim.perf.mla import absorbed_params, default_block_size
from servesim.perf.roofline import build_step_time_model
from servesim.perf.serve_defaults import vllm_default_block_size

ROOT = Path(__file__).resolve().parents[2]
MLA_MODELS = ("deepseek-v3", "deepseek-r1", "kimi-k2")
_IDENTITY = {"name", "hf_id", "aliases", "source", "notes"}


def _shipped(name: str) -> dict[str, Any]:
    path = resources.files("servesim") / "data" / "perf" / "hf_configs" / f"{name}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", MLA_MODELS)
def test_catalog_entries_are_their_shipped_config_json(name: str) -> None:
    entry = load_catalog().model(name)
    loaded = model_from_hf_config(_shipped(name), name=name)
    fields = set(type(entry).model_fields) - _IDENTITY
    assert {f: getattr(entry, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
    assert entry.is_mla and entry.num_kv_heads == 1 and entry.head_dim == 192


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("deepseek-v3", 671e9, 37e9), ("deepseek-r1", 671e9, 37e9), ("kimi-k2", 1e12, 32e9)],
)
def test_parameter_counts_are_the_model_cards(name: str, total: float, active: float) -> None:
    """DeepSeek-V3's card: 671B total, 37B activated (without the 14B MTP module); Kimi-K2's:
    "1T" total (rounded), 32B activated. MLA projections, 3 (1) dense layers, shared expert."""
    m = load_catalog().model(name)
    assert m.num_params == pytest.approx(total, rel=0.001 if total == 671e9 else 0.03)
    assert m.active_params_per_token == pytest.approx(active, rel=0.03)
    assert m.num_moe_layers == 61 - (3 if name != "kimi-k2" else 1)


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_latent_kv_is_one_replicated_head(tp: int) -> None:
    """61 layers x (512 + 64) x 2 bytes on every GPU, whatever the TP; fp8 halves it."""
    m = load_catalog().model("deepseek-v3")
    assert kv_bytes_per_token(m, tp) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(m, tp, "fp8") == 61 * 576


def test_num_gpu_blocks_worked_by_hand_for_deepseek_v3_on_8_h200() -> None:
    """Every weight on one of 8 ranks from config.json's numbers (fp8 linear layers with one fp32
    scale per 128 x 128 block, as ``weight_block_size`` says; bf16 rest)."""
    m = load_catalog().model("deepseek-v3")
    cap = kv_capacity(m, "h200", 8, max_model_len=32768, max_num_seqs=1024, max_num_batched_tokens=8192)
    h, heads = 7168, 128 // 8
    block = 1 + 4 / 128**2  # bytes per fp8 weight, its block's scale included
    attention = (
        61 * (h * (1536 + 512 + 64) + 1536 * heads * 192 + 512 * heads * 256 + heads * 128 * h) * block
    )
    attention += 61 * 512 * heads * 256 * 2  # W_UK / W_UV in bf16
    dense = 3 * 3 * h * 18432 // 8 * block
    experts = 58 * 256 * 3 * h * 2048 // 8 * block
    shared = 58 * 3 * h * 2048 // 8 * block
    router = 58 * h * 256 * 2
    vocab = math.ceil(129280 / 8) * h * 2 * 2  # embedding + lm_head
    norms = ((2 * 61 + 1) * h + 61 * (1536 + 512)) * 2
    rope = 163840 * 64 * 2
    weights = attention + dense + experts + shared + router + vocab + norms + rope
    assert cap.weight_bytes == pytest.approx(weights, abs=4)  # each module's bytes rounded down
    reserve = reserve_breakdown(m, max_num_batched_tokens=8192, max_num_seqs=1024).total
    kv = math.ceil(load_catalog().gpu("h200").memory_bytes * 0.9) - cap.weight_bytes - reserve
    assert cap.bytes_per_block == 16 * 61 * 576 * 2 == 1_124_352
    assert cap.num_gpu_blocks == kv // 1_124_352


def test_a_model_that_does_not_fit_is_refused_with_the_numbers() -> None:
    with pytest.raises(MemoryFitError, match=r"deepseek-v3 does not fit h100 at TP=8: weights need 79\.5"):
        kv_capacity("deepseek-v3", "h100", 8)


def test_mla_refuses_an_fp8_e5m2_cache_on_nvidia_as_vllm_does() -> None:
    cat = load_catalog()
    m = cat.model("kimi-k2")
    with pytest.raises(PerfError, match=r"fp8_e5m2.*MLA"):
        check_kv_cache_dtype(m, cat.gpu("h200"), "fp8_e5m2")
    check_kv_cache_dtype(m, cat.gpu("h200"), "fp8")  # FlashMLA / Triton-MLA store fp8_e4m3
    check_kv_cache_dtype(cat.model("llama-3.1-8b"), cat.gpu("h200"), "fp8_e5m2")  # not MLA: fine


def test_incomplete_mla_config_is_refused() -> None:
    broken = {k: v for k, v in _shipped("deepseek-v3").items() if k != "v_head_dim"}
    with pytest.raises(CatalogError, match=r"MLA.*v_head_dim"):
        model_from_hf_config(broken)


@pytest.mark.parametrize(
    ("gpu", "kv", "want"),
    [
        ("h100", "auto", (16, "FLASH_ATTN_MLA")),
        ("h200", "fp8", (64, "FLASHMLA")),
        ("b200", "auto", (32, "FLASHINFER_MLA")),
        ("a100-80gb", "fp8", (16, "TRITON_MLA")),
    ],
)
def test_default_block_size_follows_vllms_mla_backend_choice(
    gpu: str, kv: str, want: tuple[int, str]
) -> None:
    assert default_block_size(load_catalog().gpu(gpu), kv) == want
    assert vllm_default_block_size("deepseek-v3", gpu, kv) == (None if want[0] == 16 else want[0])
    assert vllm_default_block_size("llama-3.1-8b", gpu, kv) is None  # not MLA: vLLM's 16


# ---------------------------------------------------------------------- the roofline
def test_absorbed_projections_cost_what_kv_b_proj_costs() -> None:
    """Decode multiplies by W_UK and W_UV instead of kv_b_proj: the same multiply-adds per token."""
    m = load_catalog().model("deepseek-v3")
    assert absorbed_params(m, 8) == 512 * 16 * (128 + 128)


def test_a_step_streams_the_absorbed_bf16_projections_in_place_of_kv_b_proj() -> None:
    """Weights one step reads on a rank (routed experts apart), from config.json's numbers."""
    st = build_step_time_model("deepseek-v3", "h200", 8, warn=False)
    h, heads = 7168, 16
    attention_fp8 = 61 * (h * (1536 + 576) + 1536 * heads * 192 + heads * 128 * h)
    absorbed_bf16 = 61 * 512 * heads * 256 * 2
    dense = 3 * 3 * h * 18432 // 8 + 58 * 3 * h * 2048 // 8
    router, lm_head = 58 * h * 256 * 2, math.ceil(129280 / 8) * h * 2
    block = 1 + 4 / 128**2  # fp8 weights with their 128 x 128 blocks' fp32 scales
    want = (attention_fp8 + dense) * block + absorbed_bf16 + router + lm_head
    assert st.weight_bytes_read == pytest.approx(want, rel=1e-12)


def test_mla_decode_reads_the_latent_and_scores_it_absorbed() -> None:
    """A decode step's attention, closed form: max(FLOPs, bytes) over 61 layers, 16 heads per rank."""
    st = build_step_time_model("deepseek-v3", "h200", 8, warn=False)
    pr, g = st.profile, st.gpu
    ctx = 40_000
    b = st.breakdown(BatchComposition(num_decodes=10, decode_ctx_sum=ctx, prefill_chunks=()))
    flops = ctx * 61 * 2 * 16 * (576 + 512) / (g.bf16_flops * pr.attention_compute_efficiency)
    reads = ctx * 61 * 576 * 2 / (g.hbm_bandwidth * pr.attention_bandwidth_efficiency)
    assert b["decode_attention"] == pytest.approx(max(flops, reads), rel=1e-12)


def test_mla_prefill_decompresses_its_cached_prefix() -> None:
    """The prefill path: per-head attention (q.k over 192, p.v over 128) plus kv_b_proj on every
    cached token; a chunk after a cached prefix costs exactly that much more compute."""
    st = build_step_time_model("deepseek-v3", "h200", 8, warn=False)
    pr, g = st.profile, st.gpu
    c, p = 512, 8192
    b = st.breakdown(BatchComposition(num_decodes=0, decode_ctx_sum=0, prefill_chunks=((c, p),)))
    pairs = (
        c * (p + (c + 1) / 2) * 61 * 2 * 16 * (192 + 128) / (g.bf16_flops * pr.attention_compute_efficiency)
    )
    decompress = p * 61 * 2 * 512 * 16 * 256 / (g.peak_flops("fp8") * pr.gemm_compute_efficiency)
    reads = (p + c) * 61 * 576 * 2 / (g.hbm_bandwidth * pr.attention_bandwidth_efficiency)
    assert b["prefill_attention"] == pytest.approx(max(pairs + decompress, reads), rel=1e-12)


def test_step_time_is_its_breakdown_for_mla_batches() -> None:
    st = build_step_time_model("kimi-k2", "h200", 8, warn=False)
    for batch in (
        BatchComposition(num_decodes=64, decode_ctx_sum=64 * 3000, prefill_chunks=()),
        BatchComposition(num_decodes=8, decode_ctx_sum=8 * 900, prefill_chunks=((1024, 4096), (300, 0))),
    ):
        assert st.step_time(batch) == pytest.approx(st.breakdown_total(st.breakdown(batch)), rel=1e-12)
    head, per_ctx, tail, seq = st.decode_terms(64)
    batch = BatchComposition(num_decodes=64, decode_ctx_sum=64 * 3000, prefill_chunks=())
    assert head + 64 * 3000 * per_ctx + tail + seq == st.step_time(batch)


# ---------------------------------------------------------------------- vLLM's own planning


#: (model, GPU, TP, kv_cache_dtype, block size): every MLA catalog model where it fits.
CASES = [
    ("deepseek-v3", "h200", 8, "auto", 16),
    ("deepseek-v3", "h200", 8, "fp8", 64),
    ("deepseek-v3", "b200", 8, "auto", 32),
    ("deepseek-v3", "mi300x", 8, "auto", 16),
    ("deepseek-r1", "h200", 8, "auto", 16),
    ("kimi-k2", "h200", 8, "fp8", 64),
    ("kimi-k2", "b200", 8, "auto", 32),
    ("kimi-k2", "mi300x", 16, "auto", 16),
]


@pytest.fixture(scope="module")
def vllm_sizes() -> list[dict[str, Any]]:
    items = []
    for name, gpu, tp, kv, block in CASES:
        cap = kv_capacity(name, gpu, tp, kv_dtype=kv, block_size=block, max_model_len=32768)
        items.append(
            {
                "config": _shipped(name),
                "tp": tp,
                "kv_cache_dtype": kv,
                "block_size": block,
                "available_memory": cap.kv_cache_bytes,
            }
        )
    return run_oracle_tool("mla_kv_oracle.py", items, timeout=300)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_page_size_and_num_gpu_blocks_equal_vllms(vllm_sizes: list[dict[str, Any]], i: int) -> None:
    name, gpu, tp, kv, block = CASES[i]
    cap = kv_capacity(name, gpu, tp, kv_dtype=kv, block_size=block, max_model_len=32768)
    got = vllm_sizes[i]
    assert got["use_mla"] and got["num_kv_heads"] == 1 and got["head_size"] == 576
    assert got["block_size"] == block and got["num_layers"] == 61
    assert got["page_size_bytes"] == block * 576 * (1 if kv == "fp8" else 2)
    assert got["bytes_per_block"] == cap.bytes_per_block
    assert got["num_blocks"] == cap.num_gpu_blocks


def test_overheads_are_the_shared_defaults() -> None:
    """The hand-worked case relies on the one fitted reserve (nothing MLA-specific is added)."""
    m = load_catalog().model("deepseek-v3")
    assert reserve_breakdown(m, max_num_batched_tokens=8192, max_num_seqs=1024) == reserve_breakdown(
        m, max_num_batched_tokens=8192, max_num_seqs=1024, overheads=MemoryOverheads()
    )
