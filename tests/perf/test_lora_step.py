"""LoRA's cost in the roofline: vLLM 0.33's adapter slots (``perf.lora``), worked by hand.

vLLM allocates, per wrapped linear layer and slice, A ``(max_loras, 1, max_lora_rank, in)`` and
B ``(max_loras, 1, out, max_lora_rank)`` on each GPU (``create_lora_weights``); with LoRA on, a
step reads the slots' weights and each token runs its adapter's shrink and expand."""

from __future__ import annotations

import warnings

import pytest

from servesim.engine import EngineConfig
from servesim.engine.step_time import BatchComposition
from servesim.perf.catalog import resolve_model
from servesim.perf.lora import lora_params_per_slot
from servesim.perf.roofline import build_step_time_model
from servesim.perf.setup import replica_setup


def test_llama_8b_slot_sizes_by_hand() -> None:
    # Llama-3.1-8B: h 4096, q 32x128 = 4096, kv 8x128 = 1024, MLP 14336 (gated), 32 layers.
    # rank 16, TP 1, per layer: qkv A 3*16*4096 + B 16*(4096+2*1024) = 294,912; o A 16*4096 +
    # B 4096*16 = 131,072; gate_up A 2*16*4096 + B 2*14336*16 = 589,824; down 16*14336 + 4096*16
    # = 294,912; 1,310,720 per layer, 41,943,040 per slot (84 MB in bf16).
    model = resolve_model("llama-3.1-8b")
    assert lora_params_per_slot(model, 1, 16) == 32 * 1_310_720 == 41_943_040
    # TP 2: outputs of qkv/gate_up and inputs of o/down halve; A's hidden input stays whole.
    # qkv 3*16*4096 + 16*(2048+2*512) = 245,760; o 16*2048 + 4096*16 = 98,304; gate_up
    # 2*16*4096 + 2*7168*16 = 360,448; down 16*7168 + 4096*16 = 180,224 -> 884,736 per layer.
    assert lora_params_per_slot(model, 2, 16) == 32 * 884_736
    assert lora_params_per_slot(model, 1, 64) == 4 * lora_params_per_slot(model, 1, 16)  # linear in rank


def _model(slots: int, rank: int = 16):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_step_time_model(
            "llama-3.1-8b",
            "h100",
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            lora_slots=slots,
            lora_rank=rank,
        )


BATCHES = (
    BatchComposition(1, 1000, []),
    BatchComposition(64, 64 * 2000, []),
    BatchComposition(8, 8 * 900, [(2048, 0), (300, 4096)]),
)


def test_the_slots_are_read_every_step_and_decode_terms_stay_exact() -> None:
    base, four, sixteen = _model(0), _model(4), _model(16)
    per_slot = lora_params_per_slot(base.model, 1, 16) * base.model.dtype_bytes
    assert four.weight_bytes_read == base.weight_bytes_read + 4 * per_slot
    for batch in BATCHES:
        assert base.step_time(batch) < four.step_time(batch) < sixteen.step_time(batch)
        assert four.step_time(batch) == pytest.approx(four.breakdown_total(four.breakdown(batch)), rel=1e-12)
    # a one-request decode is weight-bound: 16 slots' extra bytes at the step's bandwidth
    one = BATCHES[0]
    extra = sixteen.step_time(one) - base.step_time(one)
    assert extra == pytest.approx(16 * per_slot * (base._m_weights / base.weight_bytes_read), rel=0.05)
    head, per_ctx, tail, seq = four.decode_terms(64)
    assert head + 64 * 2000 * per_ctx + tail + seq == four.step_time(BATCHES[1])
    assert four.model_dump()["lora_slots"] == 4 and "lora_slots" not in base.model_dump()


def test_an_engine_with_lora_gets_the_term_and_one_without_does_not() -> None:
    plain = replica_setup(EngineConfig()).step_time
    on = replica_setup(EngineConfig(enable_lora=True, max_loras=4, max_lora_rank=32)).step_time
    assert on.model_dump()["lora_slots"] == 4 and on.model_dump()["lora_rank"] == 32
    assert on.step_time(BATCHES[0]) > plain.step_time(BATCHES[0])
    assert "lora_slots" not in plain.model_dump()  # a report without LoRA reads as before


def test_the_slots_take_their_bytes_from_the_kv_cache() -> None:
    # 16 slots of Llama-3.1-8B at rank 16 in bf16: 16 * 41,943,040 * 2 = 1,342,177,280 bytes, and a
    # block of 16 tokens holds 16 * (2 * 32 layers * 8 heads * 128 * 2 bytes) = 2,097,152: 640 blocks.
    plain = replica_setup(EngineConfig()).config.num_gpu_blocks
    on = replica_setup(EngineConfig(enable_lora=True, max_loras=16)).config.num_gpu_blocks
    assert plain - on in (640, 641)  # the two floors may split one block differently
    assert replica_setup(EngineConfig(enable_lora=False, max_loras=16)).config.num_gpu_blocks == plain
