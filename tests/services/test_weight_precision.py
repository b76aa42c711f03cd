"""Weight precision (vLLM's ``--quantization`` and a checkpoint's ``quantization_config``): the bytes
a weight takes (scales included), held in memory and read every step, worked by hand from the
formats' layouts; the tensor-core rate each format's GEMMs run at on each GPU, as vLLM 0.33's
kernels run them; vLLM's refusals as one line; the command and the web carry the flag."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import get_args

import pytest
from parity import cli_json, upload, web_client, web_document, without, write_trace
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine.config import Quantization
from servesim.perf import build_step_time_model, kv_capacity, load_catalog
from servesim.perf.catalog import model_from_hf_config
from servesim.perf.errors import PerfError
from servesim.perf.memory import reserve_breakdown
from servesim.perf.precision import QUANTIZATION_METHODS, apply_quantization
from servesim.tuning.deployment import Deployment

runner = CliRunner()

# Llama-3.1-8B's config.json: the linear layers every token runs through, and the 16-bit rest.
H, L, INTER, VOCAB, CTX = 4096, 32, 14336, 128256, 131072
LINEAR = L * (H * (4096 + 2 * 1024) + 4096 * H + 3 * H * INTER)  # q, k, v, o; gate, up, down
REST_16BIT = 2 * (2 * VOCAB * H + (2 * L + 1) * H + CTX * 128)  # embed + lm_head, norms, RoPE cache
#: Bytes per weight from each format's layout: fp8 one byte (one fp32 scale per tensor, or per
#: 128 x 128 block), NVFP4 half a byte + one E4M3 byte per 16, MXFP4 half a byte + one E8M0 per 32.
BYTES = {None: 2.0, "fp8": 1.0, "fp8_per_block": 1 + 4 / 16384, "mxfp4": 0.5 + 1 / 32}


def _llama(quantization: str | None, gpu: str = "h100"):  # type: ignore[no-untyped-def]
    cat = load_catalog()
    return apply_quantization(cat.model("llama-3.1-8b"), quantization, cat.gpu(gpu))


def _nvfp4_llama():  # type: ignore[no-untyped-def]
    """Llama-3.1-8B as NVIDIA's ModelOpt NVFP4 checkpoint declares it (hf_quant_config style)."""
    m = load_catalog().model("llama-3.1-8b")
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": INTER, "num_hidden_layers": L, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": VOCAB, "max_position_embeddings": CTX,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
    }  # fmt: skip
    spec = model_from_hf_config(cfg, name="llama-3.1-8b-nvfp4")
    assert spec.num_params == m.num_params and spec.weight_dtype == "nvfp4"
    return spec


@pytest.mark.parametrize("quantization", list(BYTES))
def test_weight_bytes_and_kv_blocks_are_the_formats_closed_form(quantization: str | None) -> None:
    model = _llama(quantization)
    cap = kv_capacity(model, "h100", 1, max_num_seqs=256, max_num_batched_tokens=8192)
    weights = LINEAR * BYTES[quantization] + REST_16BIT
    assert cap.weight_bytes == pytest.approx(weights, abs=8)  # each module's bytes rounded down
    reserve = reserve_breakdown(model, max_num_batched_tokens=8192, max_num_seqs=256).total
    left = math.ceil(load_catalog().gpu("h100").memory_bytes * 0.9) - cap.weight_bytes - reserve
    assert cap.num_gpu_blocks == left // (16 * L * 2 * 8 * 128 * 2)  # K and V, 8 heads, bf16


def test_nvfp4_checkpoint_bytes_include_its_e4m3_scales() -> None:
    cap = kv_capacity(_nvfp4_llama(), "b200", 1, max_num_seqs=256, max_num_batched_tokens=8192)
    assert cap.weight_bytes == pytest.approx(LINEAR * (0.5 + 1 / 16) + REST_16BIT, abs=8)
    st = build_step_time_model(_nvfp4_llama(), "b200", 1, warn=False)
    assert st.weight_bytes_read == pytest.approx(LINEAR * 0.5625 + 2 * VOCAB * H, rel=1e-12)


@pytest.mark.parametrize(
    ("gpu", "fmt", "peak"),
    [
        ("h100", None, 989.5e12),
        ("h100", "fp8", 1979e12),  # FP8 tensor cores
        ("h100", "nvfp4", 989.5e12),  # no FP4 tensor cores: Marlin W4A16 dequantizes to bf16
        ("h100", "mxfp4", 989.5e12),  # vLLM's MXFP4 kernels keep bf16 activations
        ("a100-80gb", "fp8", 312e12),  # no FP8 tensor cores: Marlin FP8 weight-only
        ("b200", "nvfp4", 9e15),
        ("gb200", "nvfp4", 10e15),
        ("b300", "nvfp4", 13.5e15),
        ("b200", "fp8_block", 4.5e15),
        ("mi355x", "fp8", 5033.2e12),
        ("mi355x", "mxfp4", 2516.6e12),
    ],
)
def test_the_gemm_peak_per_gpu_and_format(gpu: str, fmt: str | None, peak: float) -> None:
    assert load_catalog().gpu(gpu).peak_flops(fmt) == pytest.approx(peak)


@pytest.mark.parametrize(("gpu", "ratio"), [("b200", 2.25 / 9), ("h100", 1.0), ("h20", 1.0)])
def test_a_compute_bound_token_costs_the_formats_peak(gpu: str, ratio: float) -> None:
    """Llama's GEMMs are all linear layers: NVFP4 on B200 runs them at 4x the bf16 rate; on Hopper
    (Marlin, bf16 MMA) the compute per token is unchanged while the weights read fall to 28 %."""
    nvfp4 = build_step_time_model(_nvfp4_llama(), gpu, 1, warn=False)
    bf16 = build_step_time_model("llama-3.1-8b", gpu, 1, warn=False)
    assert nvfp4._c_tok / bf16._c_tok == pytest.approx(ratio)
    read = (LINEAR * 0.5625 + 2 * VOCAB * H) / (LINEAR * 2 + 2 * VOCAB * H)
    assert nvfp4.weight_bytes_read / bf16.weight_bytes_read == pytest.approx(read)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "h100", "--quantization", "nvfp4_per_token"], "runs it on Blackwell (SM100) GPUs only"),
        (["--gpu", "b200", "--quantization", "nvfp4_per_token"], "quantizes MoE experts only"),
        (["--quantization", "modelopt_fp4"], "needs a checkpoint quantized as nvfp4"),
        (
            ["--model", "llama-3.1-405b-fp8", "--tp", "8", "--quantization", "mxfp4"],
            "already a fp8 checkpoint",
        ),
        (["--quantization", "int4"], "'int4' is not one of"),
    ],
)
def test_what_vllm_refuses_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    write_trace(tmp_path, "trace.csv")
    res = runner.invoke(app, ["simulate", str(tmp_path / "trace.csv"), *args])
    assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output, res.output


@pytest.mark.parametrize("gpu", ["mi300x", "mi355x"])
def test_nvfp4_on_rocm_is_refused_naming_the_gpu(gpu: str) -> None:
    with pytest.raises(PerfError, match=f"{gpu} \\(AMD\\) has no vLLM 0.33 NVFP4 kernel"):
        apply_quantization(_nvfp4_llama(), None, load_catalog().gpu(gpu))


def test_checkpoint_formats_from_quantization_config() -> None:
    """DeepSeek-V3's config (fp8, weight_block_size), gpt-oss's (mxfp4, attention left 16-bit) and
    a compressed-tensors NVFP4 one (4-bit floats in groups of 16)."""
    base = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 100}  # fmt: skip
    q = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert model_from_hf_config({**base, "quantization_config": q}).weight_dtype == "fp8_block"
    q = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    gpt_oss = model_from_hf_config({**base, "quantization_config": q})
    assert gpt_oss.weight_dtype == "mxfp4" and "attention" not in gpt_oss.quantized_modules
    w = {"num_bits": 4, "type": "float", "group_size": 16}
    q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": w}}}
    assert model_from_hf_config({**base, "quantization_config": q}).weight_dtype == "nvfp4"
    assert load_catalog().model("deepseek-v3").weight_dtype == "fp8_block"


def test_the_flag_values_are_one_list() -> None:
    assert set(QUANTIZATION_METHODS) == set(get_args(Quantization))


def test_the_command_and_the_document_carry_the_flag() -> None:
    base = {"max_model_len": 32768, "max_num_batched_tokens": 8192}
    d = Deployment(**base, quantization="fp8_per_block")
    assert ("quantization", "fp8_per_block") in d.vllm_args("llama-3.1-8b")
    assert Deployment.model_validate(d.model_dump()).quantization == "fp8_per_block"
    plain = Deployment(**base)
    assert "quantization" not in plain.model_dump()  # unset: documents as before the key
    assert all(flag != "quantization" for flag, _ in plain.vllm_args("llama-3.1-8b"))


def test_the_web_offers_the_flag_and_gives_the_cli_s_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_trace(tmp_path, "trace.csv")
    cli = cli_json(["simulate", "trace.csv", "--quantization", "fp8", "--json"], tmp_path, monkeypatch)
    assert cli["config"]["quantization"] == "fp8"
    with web_client(tmp_path / "web") as client:
        flags = {f["name"]: f for f in client.get("/api/catalog").json()["engine_flags"]}
        assert "nvfp4_per_token" in json.dumps(flags["quantization"])
        body = {
            "trace_id": upload(client, tmp_path / "trace.csv"),
            "deployment": {"engine": {"quantization": "fp8"}},
        }
        web = web_document(client, "/api/simulate", body)
    assert without(web, "requests") == without(cli, "requests")


def test_tune_keeps_the_quantization_in_every_trial_and_in_the_command(tmp_path: Path) -> None:
    """Study-wide, like the KV dtype: not a change to make, and the recommended command carries it."""
    write_trace(tmp_path, "trace.csv")
    args = [
        "tune", str(tmp_path / "trace.csv"), "--quantization", "fp8_per_block", "--trials", "2",
        "--trial-seeds", "1", "--verify-seeds", "1", "--space", "replicas=1", "--space",
        "tensor_parallel_size=1", "--space", "max_num_seqs=64,128", "--slo", "ttft_p99_ms=5000",
        "--storage", "memory", "--executor", "local", "--json",
    ]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)["recommendation"]
    assert "--quantization fp8_per_block" in rec["vllm_serve_command"]
    assert rec["deployment"]["quantization"] == "fp8_per_block"
    assert all(c["flag"] != "quantization" for c in rec["changes"]), rec["changes"]


def test_nvfp4_per_token_quantizes_the_routed_experts_only() -> None:
    """vLLM's shorthand has a ``moe`` spec and no ``linear`` one: Qwen3-235B-A22B's experts take
    0.5625 bytes a weight, its attention (and everything else) stays bf16."""
    from servesim.perf.memory import weight_breakdown

    cat = load_catalog()
    bf16 = cat.model("qwen3-235b-a22b")
    q = apply_quantization(bf16, "nvfp4_per_token", cat.gpu("b200"), 4)
    a, b = weight_breakdown(bf16, 4), weight_breakdown(q, 4)
    assert b.experts == pytest.approx(a.experts * 0.5625 / 2, abs=1)
    assert (b.attention, b.embedding, b.router) == (a.attention, a.embedding, a.router)
