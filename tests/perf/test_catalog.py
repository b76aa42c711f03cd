"""Catalogs: the issue's model and GPU lists, sources, HF config loading, user extension, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from servesim.perf import (
    CatalogError,
    UnknownGPUError,
    UnknownModelError,
    load_catalog,
    model_from_hf_config,
)
from servesim.perf.catalog import resolve_model

# The issue's list: Llama-3.1-8B/70B/405B, Llama-2-7B/70B, Mistral-7B, Mixtral-8x7B,
# Qwen2.5-7B/32B/72B, CodeLlama-34B, Phi-3/4, Qwen3 MoE.
REQUIRED_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-7b",
    "llama-2-70b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-32b",
    "qwen2.5-72b",
    "codellama-34b",
    "phi-3-mini",
    "phi-4",
    "qwen3-30b-a3b",
]
REQUIRED_GPUS = [
    "a10g",
    "l4",
    "l40s",
    "a100-40gb",
    "a100-80gb",
    "h100",
    "h100-pcie",
    "h200",
    "b200",
    "mi300x",
]

# Parameter counts the model cards state (billions), to check architecture transcription.
PUBLISHED_PARAMS_B = {
    "llama-3.1-8b": 8.03,
    "llama-3.1-70b": 70.6,
    "llama-3.1-405b": 405.9,
    "llama-2-7b": 6.74,
    "llama-2-70b": 69.0,
    "mixtral-8x7b": 46.7,
    "qwen2.5-7b": 7.62,
    "qwen2.5-32b": 32.8,
    "qwen2.5-72b": 72.7,
    "qwen3-30b-a3b": 30.5,
    "qwen3-235b-a22b": 235.1,
    "phi-4": 14.7,
    "phi-3-mini": 3.82,
}


def test_catalog_covers_the_issue_list() -> None:
    cat = load_catalog()
    for name in REQUIRED_MODELS:
        assert name in cat.models, name
    assert any(m.is_moe and m.name.startswith("qwen3") for m in cat.models.values())
    for name in REQUIRED_GPUS:
        assert name in cat.gpus, name


@pytest.mark.parametrize(("name", "billions"), sorted(PUBLISHED_PARAMS_B.items()))
def test_parameter_counts_match_model_cards(name: str, billions: float) -> None:
    m = load_catalog().entry(name)  # refused models (phi-3-mini) keep their published sizes
    assert m.num_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_moe_active_parameters() -> None:
    cat = load_catalog()
    # Mixtral-8x7B: ~12.9B active per token; Qwen3-30B-A3B: ~3.3B active.
    assert cat.model("mixtral-8x7b").active_params_per_token / 1e9 == pytest.approx(12.9, rel=0.02)
    assert cat.model("qwen3-30b-a3b").active_params_per_token / 1e9 == pytest.approx(3.3, rel=0.03)


def test_every_gpu_number_has_a_source() -> None:
    for g in load_catalog().gpus.values():
        for field in (
            "memory_bytes",
            "hbm_bandwidth",
            "bf16_flops",
            "interconnect_bandwidth",
            "pcie_bandwidth",
        ):
            assert g.sources.get(field), (g.name, field)
        if g.fp8_flops is not None:
            assert g.sources.get("fp8_flops"), g.name
        # dense figures, not "with sparsity": H100 SXM dense BF16 is 989.5 TFLOP/s
    h100 = load_catalog().gpu("h100")
    assert h100.bf16_flops == pytest.approx(989.5e12)
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)


def test_lookup_by_alias_hf_id_and_case() -> None:
    cat = load_catalog()
    assert cat.model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert cat.model("LLAMA-3.1-8B-INSTRUCT").name == "llama-3.1-8b"
    assert cat.gpu("H100-SXM").name == "h100"
    assert cat.gpu("A100").name == "a100-80gb"


def test_unknown_names_list_the_known_ones_and_how_to_add() -> None:
    cat = load_catalog()
    with pytest.raises(UnknownModelError) as e:
        cat.model("llama-9-1t")
    msg = str(e.value)
    assert "llama-3.1-8b" in msg and "--catalog" in msg and "config.json" in msg
    with pytest.raises(UnknownGPUError) as g:
        cat.gpu("tpu-v9")
    assert "h100" in str(g.value) and "--catalog" in str(g.value)


def test_sim2real_configs_load_and_match_the_catalog(sim2real_files: list[dict[str, object]]) -> None:
    cat = load_catalog()
    fields = [
        "num_layers",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "vocab_size",
        "tie_word_embeddings",
        "num_experts",
        "experts_per_token",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "dtype",
        "weight_dtype",
        "extra_params",
        "layer_pattern",  # Llama-4-Scout's chunked local attention, as its published config says
    ]
    seen = set()
    for d in sim2real_files:
        hf = d["hf_config"]
        assert isinstance(hf, dict)
        loaded = model_from_hf_config(hf, name=str(d["model"]))
        entry = cat.entry(str(d["model"]))
        for f in fields:
            assert getattr(loaded, f) == getattr(entry, f), (d["model"], f)
        seen.add(entry.name)
    assert len(seen) == 6  # six model families


def test_hf_loader_quantization_and_multimodal(sim2real_files: list[dict[str, object]]) -> None:
    scout = next(d for d in sim2real_files if "Scout" in str(d["model"]))
    hf = scout["hf_config"]
    assert isinstance(hf, dict)
    m = model_from_hf_config(hf)
    assert m.weight_dtype == "fp8"
    assert "attention" not in m.quantized_modules  # q/k/v/o are in the ignore list
    assert m.bytes_of("attention") == 2 and m.bytes_of("experts") == 1
    assert m.num_experts == 16 and m.experts_per_token == 1 and m.shared_expert_intermediate_size == 8192
    assert m.extra_params > 0  # vision encoder


def test_hf_loader_from_file_and_folder(tmp_path: Path) -> None:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 16,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "head_dim": 64,
    }
    folder = tmp_path / "llama-3.2-1b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    m = resolve_model(str(folder))
    assert m.name == "llama-3.2-1b" and m.tie_word_embeddings and m.lm_head_params == 0
    assert m.num_params / 1e9 == pytest.approx(1.24, rel=0.01)
    assert resolve_model(str(folder / "config.json")).num_layers == 16


def test_hf_loader_refuses_incomplete_mla_and_broken_configs(tmp_path: Path) -> None:
    base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100}
    with pytest.raises(CatalogError, match=r"MLA.*qk_rope_head_dim"):
        model_from_hf_config({**base, "kv_lora_rank": 512})
    with pytest.raises(CatalogError, match="lacks"):
        model_from_hf_config({"hidden_size": 10})
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="cannot read"):
        model_from_hf_config(bad)


def test_user_catalog_extends_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "tiny-1b": {
                        "num_layers": 4,
                        "hidden_size": 512,
                        "intermediate_size": 1024,
                        "num_attention_heads": 8,
                        "num_kv_heads": 8,
                        "head_dim": 64,
                        "vocab_size": 1000,
                        "max_position_embeddings": 2048,
                    }
                },
                "gpus": {
                    "h100": {
                        "vendor": "NVIDIA",
                        "description": "a throttled H100",
                        "memory_bytes": 80 * 2**30,
                        "hbm_bandwidth": 2.0e12,
                        "bf16_flops": 500e12,
                        "interconnect": "nvlink",
                        "interconnect_bandwidth": 400e9,
                        "pcie_bandwidth": 64e9,
                        "sources": {
                            "memory_bytes": "measured",
                            "hbm_bandwidth": "measured",
                            "bf16_flops": "measured",
                            "interconnect_bandwidth": "measured",
                            "pcie_bandwidth": "measured",
                        },
                    }
                },
            }
        )
    )
    cat = load_catalog(f)
    assert cat.model("tiny-1b").num_layers == 4
    assert cat.gpu("h100").hbm_bandwidth == 2.0e12
    assert "llama-3.1-8b" in cat.models  # shipped entries stay
    assert load_catalog().gpu("h100").hbm_bandwidth == 3.35e12  # the shipped catalog is unchanged


def test_bad_user_catalog_files(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("models:\n  x:\n    num_layers: 0\n")
    with pytest.raises(CatalogError, match="entry 'x'"):
        load_catalog(f)
    f.write_text(
        "gpus:\n  g:\n    vendor: X\n    description: no sources\n    memory_bytes: 1\n"
        "    hbm_bandwidth: 1\n    bf16_flops: 1\n    interconnect: pcie\n"
        "    interconnect_bandwidth: 1\n    pcie_bandwidth: 1\n    sources: {}\n"
    )
    with pytest.raises(CatalogError, match="sources missing"):
        load_catalog(f)
    f.write_text("[1, 2]")
    with pytest.raises(CatalogError, match="models:"):
        load_catalog(f)
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")
