"""Step times of a model with GatedDeltaNet state layers (Qwen3-Next), against hand-worked numbers.

Qwen3-Next-80B-A3B at TP 4 on H100: 36 GatedDeltaNet layers and 12 full-attention layers. A state
layer has no KV cache: decodes read the 12 attention layers' KV only; each scheduled request reads
and writes its state once per step (274,432 B per layer per rank, ``perf.roofline``); a prefill's
(query, key) pairs are counted in the 12 attention layers only.
"""

from __future__ import annotations

import pytest

from servesim.engine.step_time import BatchComposition
from servesim.perf import HardwareProfile, RooflineStepTime, build_step_time_model
from servesim.perf.catalog import load_catalog
from servesim.perf.memory import kv_bytes_per_token, weight_breakdown

H100_BW = 3.35e12


def _model(name: str = "qwen3-next-80b-a3b", tp: int = 4) -> RooflineStepTime:
    return build_step_time_model(name, "h100", tp, HardwareProfile(), max_num_batched_tokens=8192, warn=False)  # type: ignore[arg-type]


def test_each_request_reads_and_writes_its_state_once_per_step() -> None:
    st = _model()
    eff = HardwareProfile().attention_bandwidth_efficiency
    per_request = 36 * 2 * 274_432 / (H100_BW * eff)
    for n in (1, 7, 64):
        parts = st.breakdown(BatchComposition(n, 100 * n, []))
        assert parts["state_io"] == pytest.approx(n * per_request, rel=1e-12)
        assert st.breakdown_total(parts) == pytest.approx(
            st.step_time(BatchComposition(n, 100 * n, [])), rel=1e-12
        )
    prefill = st.breakdown(BatchComposition(0, 0, [(2048, 0)]))
    assert prefill["state_io"] == pytest.approx(per_request, rel=1e-12)  # one request's state


def test_decodes_read_the_kv_of_the_attention_layers_only() -> None:
    """KV: 2 x 12 layers x 1 KV head per rank (2 replicated over 4) x 256 x 2 B = 12,288 B per
    token; pairs: 4 x 4 heads per rank x 256 x 12 layers = 49,152 FLOPs each."""
    st = _model()
    pr = HardwareProfile()
    assert kv_bytes_per_token(load_catalog().model("qwen3-next-80b-a3b"), 4) == 12_288
    flops = load_catalog().gpu("h100").bf16_flops
    ctx = 40_000
    memory = ctx * 12_288 / (H100_BW * pr.attention_bandwidth_efficiency)
    compute = ctx * 49_152 / (flops * pr.attention_compute_efficiency)
    parts = st.breakdown(BatchComposition(10, ctx, []))
    assert parts["decode_attention"] == pytest.approx(max(memory, compute), rel=1e-12)


def test_the_state_layers_weights_are_their_projections_not_attentions() -> None:
    """A GatedDeltaNet layer: in_proj_qkvz 2048 x (2 x 2048 + 2 x 4096), in_proj_ba 2048 x 64,
    out_proj 4096 x 2048, conv1d 8192 x 4 = 33,718,272 parameters; an attention layer
    2048 x (4096 + 2 x 512) + 4096 x 2048 = 18,874,368 (bf16 weights, TP 1)."""
    m = load_catalog().model("qwen3-next-80b-a3b")
    assert m.state_params_per_layer == 33_718_272
    assert m.attention_params_per_layer == 18_874_368
    w = weight_breakdown(m, 1)
    assert w.attention == (36 * 33_718_272 + 12 * 18_874_368) * 2


def test_models_without_state_layers_have_no_state_cost() -> None:
    st = build_step_time_model(
        "llama-3.1-8b", "h100", 1, HardwareProfile(), max_num_batched_tokens=8192, warn=False
    )
    assert st.breakdown(BatchComposition(8, 800, [(512, 0)]))["state_io"] == 0.0
