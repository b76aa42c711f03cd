"""Memory model: the KV-bytes formula, weights per GPU, KV capacity against measured vLLM runs."""

from __future__ import annotations

import pytest

from servesim.perf import (
    MemoryFitError,
    PerfError,
    deployment_setup,
    kv_bytes_per_token,
    kv_capacity,
    load_catalog,
    model_from_hf_config,
    weight_breakdown,
)
from servesim.perf.sim2real import MEASURED_HYBRID_KV, SIM2REAL_GPU_MEMORY_UTILIZATION

GiB = 2**30


@pytest.mark.parametrize(
    ("model", "tp", "kv_dtype", "expected"),
    [
        ("llama-3.1-8b", 1, "auto", 131_072),  # 2 x 32 x 8 x 128 x 2
        ("llama-3.1-70b", 1, "auto", 327_680),  # 2 x 80 x 8 x 128 x 2
        ("llama-3.1-70b", 4, "auto", 81_920),  # 2 heads per rank
        ("llama-3.1-70b", 16, "auto", 40_960),  # 8 KV heads over 16 ranks: replicated, 1 per rank
        ("llama-2-7b", 1, "auto", 524_288),  # MHA: 32 KV heads
        ("llama-3.1-8b", 1, "fp8", 65_536),
        ("mixtral-8x7b", 2, "auto", 65_536),
        ("qwen2.5-7b", 1, "auto", 57_344),  # 2 x 28 x 4 x 128 x 2
    ],
)
def test_kv_bytes_per_token_hand_computed(model: str, tp: int, kv_dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(load_catalog().model(model), tp, kv_dtype) == expected


def test_kv_bytes_rejects_impossible_tp_and_dtype() -> None:
    m = load_catalog().model("llama-3.1-8b")
    with pytest.raises(PerfError, match="attention heads"):
        kv_bytes_per_token(m, 3)
    with pytest.raises(PerfError, match="kv_dtype"):
        kv_bytes_per_token(m, 1, "int3")


def test_weights_per_gpu() -> None:
    cat = load_catalog()
    w = weight_breakdown(cat.model("llama-3.1-8b"), 1)
    # 8.03B bf16 parameters + the RoPE cos/sin cache (131072 x 128 x 2 bytes)
    assert (w.total - w.rope_cache) / 1e9 == pytest.approx(16.06, rel=0.005)
    assert w.rope_cache == 131072 * 128 * 2
    w4 = weight_breakdown(cat.model("llama-3.1-70b"), 4)
    w1 = weight_breakdown(cat.model("llama-3.1-70b"), 1)
    assert w4.attention * 4 == pytest.approx(w1.attention, rel=1e-6)  # 8 KV heads split evenly
    assert w4.norms == w1.norms  # replicated
    fp8 = weight_breakdown(cat.entry("llama-4-scout-17b-16e-fp8"), 2)  # refused to simulate; weights
    bf16 = weight_breakdown(cat.entry("llama-4-scout-17b-16e"), 2)  # still as published
    assert fp8.experts * 2 == bf16.experts and fp8.attention == bf16.attention
    tied = weight_breakdown(cat.model("llama-3.2-3b"), 1)
    assert tied.lm_head == 0 and tied.embedding > 0


@pytest.mark.parametrize(
    ("model", "weight_dtype", "tp", "logged_gib"),
    [
        ("llama-3.1-8b", None, 1, 14.99),
        ("llama-3.1-70b", "fp8", 2, 33.88),  # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic (same shape)
        ("llama-3.1-70b", "fp8", 1, 67.72),
    ],
)
def test_weights_match_vllms_logged_model_loading(
    model: str, weight_dtype: str | None, tp: int, logged_gib: float
) -> None:
    """vLLM's "Model loading took X GiB" on H100 (llm-d-benchmark's empirical vLLM memory results,
    docs/perf.md): weights, FP8 linears with BF16 embeddings and lm_head, and the RoPE cache."""
    m = load_catalog().model(model).model_copy(update={"weight_dtype": weight_dtype})
    assert weight_breakdown(m, tp).total / GiB == pytest.approx(logged_gib, rel=0.005)


def test_estimates_outside_the_validated_runs_carry_caveats(sim2real_files: list[dict[str, object]]) -> None:
    assert kv_capacity("llama-3.1-8b", "h100", 1, max_model_len=8192).caveats == []
    (moe,) = kv_capacity("mixtral-8x7b", "h100", 2, max_model_len=8192).caveats
    assert "MoE models is not validated" in moe and "upper bound" in moe and "--num-gpu-blocks" in moe
    (gpu,) = kv_capacity("llama-3.1-8b", "a100-80gb", 1, max_model_len=8192).caveats
    assert "fitted on H100" in gpu
    scout = next(d for d in sim2real_files if "Scout" in str(d["model"]))
    hf = scout["hf_config"]
    assert isinstance(hf, dict)
    full = model_from_hf_config(hf, name="scout").model_copy(update={"layer_pattern": None})  # as if global
    (both,) = kv_capacity(full, "h100", 2, max_model_len=4096).caveats
    assert "MoE and multimodal" in both
    setup = deployment_setup("mixtral-8x7b", "h100", 2, max_num_seqs=64, max_num_batched_tokens=2048)
    assert moe in setup.notes
    assert not any(
        "not validated" in n
        for n in deployment_setup(
            "mixtral-8x7b", "h100", 2, max_num_seqs=64, max_num_batched_tokens=2048, size_kv_cache=False
        ).notes
    )


def _measured_runs(sim2real_files: list[dict[str, object]]) -> list[tuple[str, dict[str, object], int]]:
    out = []
    for d in sim2real_files:
        hf = d["hf_config"]
        assert isinstance(hf, dict)
        model = model_from_hf_config(hf, name=str(d["model"]))
        if model.layer_pattern is not None:  # Llama-4-Scout: chunked local layers (see below)
            continue
        cap = kv_capacity(
            model,
            "h100",
            int(str(d["tp"])),
            gpu_memory_utilization=SIM2REAL_GPU_MEMORY_UTILIZATION,
            block_size=16,
            max_num_batched_tokens=int(str(d["max_num_batched_tokens"])),
            max_num_seqs=int(str(d["max_num_seqs"])),
            max_model_len=4096,
        )
        out.append((str(d["id"]), d, cap.num_gpu_blocks))
    return out


def test_kv_blocks_match_measured_dense_runs(sim2real_files: list[dict[str, object]]) -> None:
    """From model, precision, TP and GPU alone (utilization 0.9): within 5 % of the logged count."""
    checked = 0
    for rid, d, blocks in _measured_runs(sim2real_files):
        measured = int(str(d["total_kv_blocks"]))
        assert abs(blocks - measured) / measured < 0.05, (rid, blocks, measured)
        checked += 1
    assert checked == 5


def test_scout_runs_were_sized_without_the_hybrid_kv_cache_manager(
    sim2real_files: list[dict[str, object]],
) -> None:
    """Llama-4-Scout's published config gives 36 of 48 layers 8192-token chunked local attention.
    vLLM 0.33 caches those in their own KV cache groups (a block is one page of 12 layers: four
    times the blocks), but the measured runs' vLLM turned that off for chunked local attention:
    their logged blocks are the full-attention sizing's (within the 14 % the MoE caveat states),
    a quarter of the hybrid one -- which is why sim2real replays them as full attention."""
    scout = next(d for d in sim2real_files if "Scout" in str(d["model"]))
    hf = scout["hf_config"]
    assert isinstance(hf, dict)
    model = model_from_hf_config(hf, name="scout")
    full = kv_capacity(model, "h100", 2, max_model_len=4096, hybrid=False)
    hybrid = kv_capacity(model, "h100", 2, max_model_len=4096)
    measured = int(str(scout["total_kv_blocks"]))
    assert abs(full.num_gpu_blocks - measured) / measured < 0.15
    assert hybrid.bytes_per_block * 4 == full.bytes_per_block
    assert hybrid.num_gpu_blocks == hybrid.kv_cache_bytes // hybrid.bytes_per_block
    assert not MEASURED_HYBRID_KV


def test_capacity_arithmetic_is_consistent() -> None:
    cap = kv_capacity("llama-3.1-8b", "h100", 1, gpu_memory_utilization=0.9, max_model_len=8192)
    assert cap.kv_cache_bytes == cap.requested_bytes - cap.weight_bytes - cap.reserve_bytes
    assert cap.num_gpu_blocks == cap.kv_cache_bytes // (cap.kv_bytes_per_token * 16)
    assert cap.usable_blocks == cap.num_gpu_blocks - 1
    more = kv_capacity("llama-3.1-8b", "h100", 1, gpu_memory_utilization=0.95, max_model_len=8192)
    assert more.num_gpu_blocks > cap.num_gpu_blocks
    fp8 = kv_capacity("llama-3.1-8b", "h100", 1, kv_dtype="fp8", max_model_len=8192)
    assert fp8.num_gpu_blocks == pytest.approx(2 * cap.num_gpu_blocks, abs=1)
    tp2 = kv_capacity("llama-3.1-70b", "h100", 2, max_model_len=8192)
    tp4 = kv_capacity("llama-3.1-70b", "h100", 4, max_model_len=8192)
    assert tp4.num_gpu_blocks > 2 * tp2.num_gpu_blocks  # more memory per GPU and fewer KV heads each


def test_weights_that_do_not_fit_state_the_numbers() -> None:
    with pytest.raises(MemoryFitError) as e:
        kv_capacity("llama-3.1-70b", "h100", 1)
    msg = str(e.value)
    assert "GiB" in msg and "TP >= 2" in msg and "gpu_memory_utilization" in msg


def test_no_room_for_one_max_model_len_sequence() -> None:
    with pytest.raises(MemoryFitError) as e:
        kv_capacity("llama-3.1-8b", "l4", 1)  # 131072-token context does not fit next to 16 GB of weights
    msg = str(e.value)
    assert "max_model_len 131072" in msg and "lower max_model_len" in msg
    ok = kv_capacity("llama-3.1-8b", "l4", 1, max_model_len=8192)
    assert ok.usable_blocks * 16 >= 8192


def test_bad_arguments() -> None:
    with pytest.raises(PerfError, match="gpu_memory_utilization"):
        kv_capacity("llama-3.1-8b", "h100", 1, gpu_memory_utilization=1.5)
    with pytest.raises(PerfError, match="tensor-parallel"):
        kv_capacity("llama-3.1-8b", "h100", 0)
