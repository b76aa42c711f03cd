"""The roofline step-time model: sanity, monotonicity, TP, MoE, CUDA graphs, warnings
(its speed: ``benchmarks/perf_step_time.py``, never a test's assertion)."""

from __future__ import annotations

import json
import random
import warnings

import pytest

from servesim.engine import EngineConfig, simulate
from servesim.engine.step_time import BatchComposition, StepTimeModel
from servesim.perf import (
    ExtrapolationWarning,
    FittedRange,
    HardwareProfile,
    RooflineStepTime,
    build_step_time_model,
    load_catalog,
)
from servesim.perf.roofline import cudagraph_capture_sizes
from servesim.traces.schema import Trace


def model(name: str = "llama-3.1-8b", gpu: str = "h100", tp: int = 1, **kw: object) -> RooflineStepTime:
    return build_step_time_model(
        name, gpu, tp, HardwareProfile(**kw), max_num_batched_tokens=8192, warn=False
    )  # type: ignore[arg-type]


def test_implements_the_engine_protocol_and_dumps_json() -> None:
    st = model()
    assert isinstance(st, StepTimeModel)
    d = st.model_dump()
    json.dumps(d)
    assert (
        d["kind"] == "roofline"
        and d["model"] == "llama-3.1-8b"
        and d["profile"]["gemm_compute_efficiency"] > 0
    )


def test_decode_step_is_weight_streaming_plus_overheads() -> None:
    """One decode on an 8B model reads its 15 GB of weights (all but the embedding table, which is
    only gathered): ~5 ms at 90 % of 3.35 TB/s."""
    st = model()
    eta = HardwareProfile().gemm_bandwidth_efficiency
    t = st.step_time(BatchComposition(1, 100, []))
    weights_s = st.weight_bytes_read / (3.35e12 * eta)
    assert weights_s == pytest.approx((16.06e9 - 128256 * 4096 * 2) / (3.35e12 * eta), rel=0.01)
    assert weights_s < t < weights_s + 2e-3


def test_large_prefill_is_compute_bound() -> None:
    """8192 prefill tokens of an 8B model: 2 x 6.98B x 8192 FLOPs (all GEMM weights but the
    lm_head, which runs on the one sampled row) at 73 % of 989.5 TFLOP/s."""
    st = model()
    eta = HardwareProfile().gemm_compute_efficiency
    parts = st.breakdown(BatchComposition(0, 0, [(8192, 0)]))
    assert parts["gemm_compute_only"] == pytest.approx(2 * 6.98e9 * 8192 / (eta * 989.5e12), rel=0.01)
    assert parts["gemm_compute_only"] > 5 * parts["gemm_memory_only"]
    # the smooth roofline lies between max(compute, memory) and their sum
    assert parts["gemm_compute_only"] < parts["gemm"] < parts["gemm_compute_only"] + parts["gemm_memory_only"]
    sharp = model(gemm_roofline_sharpness=50.0).breakdown(BatchComposition(0, 0, [(8192, 0)]))
    assert sharp["gemm"] == pytest.approx(sharp["gemm_compute_only"], rel=1e-3)


def test_step_time_equals_the_breakdown_total() -> None:
    rng = random.Random(1)
    for name, tp in (("llama-3.1-70b", 4), ("mixtral-8x7b", 2), ("qwen2.5-7b", 1)):
        st = model(name, tp=tp)
        for _ in range(50):
            nd = rng.randint(0, 200)
            chunks = [(rng.randint(1, 3000), rng.randint(0, 5000)) for _ in range(rng.randint(0, 3))]
            if not nd and not chunks:
                continue
            b = BatchComposition(nd, nd * rng.randint(1, 4000), chunks)
            assert st.step_time(b) == pytest.approx(st.breakdown_total(st.breakdown(b)), rel=1e-12)


@pytest.mark.parametrize(("name", "tp"), [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mixtral-8x7b", 2)])
def test_more_tokens_never_faster(name: str, tp: int) -> None:
    st = model(name, tp=tp)
    rng = random.Random(7)
    for _ in range(300):
        nd = rng.randint(0, 300)
        ctx = nd * rng.randint(1, 4000)
        chunks = [(rng.randint(1, 2000), rng.randint(0, 4000)) for _ in range(rng.randint(0, 2))]
        if not nd and not chunks:
            nd, ctx = 1, 10
        base = st.step_time(BatchComposition(nd, ctx, chunks))
        # one more decode (with its context), a longer chunk, or one more chunk
        assert st.step_time(BatchComposition(nd + 1, ctx + 500, chunks)) >= base
        if chunks:
            longer = [(chunks[0][0] + rng.randint(1, 500), chunks[0][1]), *chunks[1:]]
            assert st.step_time(BatchComposition(nd, ctx, longer)) >= base
        assert st.step_time(BatchComposition(nd, ctx, [*chunks, (64, 0)])) >= base


def test_decode_time_grows_with_context() -> None:
    st = model()
    times = [st.step_time(BatchComposition(64, 64 * c, [])) for c in (128, 1024, 8192, 65536)]
    assert times == sorted(times) and times[-1] > times[0] * 1.5
    # KV read: 64 x 65536 tokens x 128 KiB at 70 % of 3.35 TB/s
    parts = st.breakdown(BatchComposition(64, 64 * 65536, []))
    assert parts["decode_attention"] == pytest.approx(64 * 65536 * 131072 / (0.7 * 3.35e12), rel=1e-6)


def test_prefill_attention_is_quadratic_in_the_chunk() -> None:
    st = model()
    a1 = st.breakdown(BatchComposition(0, 0, [(4096, 0)]))["prefill_attention"]
    a2 = st.breakdown(BatchComposition(0, 0, [(8192, 0)]))["prefill_attention"]
    assert a2 / a1 == pytest.approx(4.0, rel=0.01)
    cached = st.breakdown(BatchComposition(0, 0, [(4096, 8192)]))["prefill_attention"]
    assert cached > a1  # attending to cached context costs more


def test_tensor_parallelism_cuts_gemm_time_but_adds_allreduce() -> None:
    b = BatchComposition(32, 32 * 2000, [(1024, 0)])
    one = model("llama-3.1-70b", tp=1).breakdown(b)
    four = model("llama-3.1-70b", tp=4).breakdown(b)
    assert four["gemm"] < one["gemm"] / 3
    assert one["allreduce"] == 0 and four["allreduce"] > 0
    # 161 all-reduces of 1056 x 8192 x 2 bytes (17 MB: two-shot, ring factor 1.5) over
    # 450 GB/s x 0.7, + 4 us per peer each, + what two-shot's synchronisation costs (what
    # one-shot reads at the 512 KiB switch, 31 tokens, beyond the ring's bytes); the lm_head's
    # logits gathered for 33 sequences
    gather = 33 * 128256 * 2 * 0.75 / (450e9 * 0.7)
    switch = 31 * (3 - 1.5) * 8192 * 2 / (450e9 * 0.7)
    expected = 161 * (3 * 4e-6 + 1.5 * 1056 * 8192 * 2 / (450e9 * 0.7) + switch) + gather
    assert four["allreduce"] == pytest.approx(expected, rel=1e-6)
    assert model("llama-3.1-70b", tp=4).step_time(b) < model("llama-3.1-70b", tp=1).step_time(b)
    # 16 decodes: 256 KiB messages go one-shot (under vLLM's 512 KiB limit for 4 GPUs), each
    # rank reading its 3 peers' buffers
    small = model("llama-3.1-70b", tp=4).breakdown(BatchComposition(16, 16 * 100, []))
    one_shot = 161 * (3 * 4e-6 + 3 * 16 * 8192 * 2 / (450e9 * 0.7)) + 16 * 128256 * 2 * 0.75 / (450e9 * 0.7)
    assert small["allreduce"] == pytest.approx(one_shot, rel=1e-6)
    # 2 GPUs: one-shot and ring read the same bytes, and there is one peer
    two = model("llama-3.1-70b", tp=2).breakdown(BatchComposition(16, 16 * 100, []))
    assert two["allreduce"] == pytest.approx(
        161 * (4e-6 + 16 * 8192 * 2 / (450e9 * 0.7)) + 16 * 128256 * 2 * 0.5 / (450e9 * 0.7), rel=1e-6
    )


def test_moe_reads_only_the_experts_its_tokens_touch() -> None:
    st = model("mixtral-8x7b", tp=2)
    one = st.breakdown(BatchComposition(1, 100, []))
    many = st.breakdown(BatchComposition(256, 256 * 100, []))
    assert one["experts_touched"] == pytest.approx(2.0)  # top-2 of 8 for one token
    assert many["experts_touched"] == pytest.approx(8.0, abs=1e-6)
    assert many["gemm_memory_only"] > one["gemm_memory_only"] * 2.5


def test_cuda_graph_padding_and_eager_steps() -> None:
    sizes = cudagraph_capture_sizes(128, 8192)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 256
    assert cudagraph_capture_sizes(512, 8192)[-1] == 512
    st = model()
    assert st.breakdown(BatchComposition(33, 3300, []))["padded_tokens"] == 40
    eager = st.breakdown(BatchComposition(0, 0, [(300, 0)]))
    graphed = st.breakdown(BatchComposition(0, 0, [(200, 0)]))
    assert eager["eager_overhead"] > 0 and graphed["eager_overhead"] == 0


def test_fp8_weights_halve_streaming_time() -> None:
    cat = load_catalog()
    b = BatchComposition(8, 8000, [])
    bf16 = RooflineStepTime(cat.entry("llama-4-scout-17b-16e"), cat.gpu("h100"), 4).breakdown(b)
    fp8 = RooflineStepTime(cat.entry("llama-4-scout-17b-16e-fp8"), cat.gpu("h100"), 4).breakdown(b)
    assert fp8["gemm_memory_only"] < 0.6 * bf16["gemm_memory_only"]


def test_runs_in_the_engine() -> None:
    recs = [
        {"req_id": str(i), "arrival_time_s": 0.05 * i, "prompt_len": 512, "output_len": 64}
        for i in range(200)
    ]
    st = model()
    res = simulate(Trace.from_records(recs), EngineConfig(num_gpu_blocks=5000), st)
    s = res.summary
    assert s.num_finished == 200
    assert 4 < s.tpot_ms.mean < 30  # an 8B model decoding on an H100
    assert res.step_time_model["kind"] == "roofline"


def test_extrapolation_warnings() -> None:
    prof = HardwareProfile(
        name="calibrated",
        gpu="h100",
        fitted_range=FittedRange(
            gpu="h100", tp=[1, 2], weight_bytes_per_gpu=(10e9, 40e9), tokens_per_step=(1, 2048)
        ),
    )
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", ExtrapolationWarning)
        build_step_time_model("llama-3.1-8b", "h100", 1, prof, max_num_batched_tokens=2048)
    assert not [x for x in w if issubclass(x.category, ExtrapolationWarning)]
    with pytest.warns(ExtrapolationWarning) as rec:
        build_step_time_model("llama-3.1-405b-fp8", "a100-80gb", 8, prof, max_num_batched_tokens=16384)
    text = " ".join(str(r.message) for r in rec)
    assert "calibrated on h100" in text and "TP=8" in text and "far above" in text
    with pytest.warns(ExtrapolationWarning, match="generic priors"):
        build_step_time_model("llama-3.1-8b", "l4", 1)
