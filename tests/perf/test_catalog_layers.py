"""Catalog entries from shipped config.json files, their layer patterns, and the models refused.

Each entry below is checked against its published ``config.json`` (shipped in
``servesim/data/perf/hf_configs``), its parameter count against its model card, and the layer
pattern servesim reads (sliding-window, chunked-local) against transformers' own config classes in
the vLLM oracle virtualenv (skipped where it is absent). Sliding-window and chunked-local models
run as KV cache groups (tests/perf/test_kv_groups_vllm.py checks their capacity against vLLM), and
so does Qwen3-Next, whose GatedDeltaNet layers are mamba groups; a model with other Mamba or
linear-attention layers is refused in one line through the CLI, whether named from the catalog or
given as a config.json path.
"""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oracle_venv import oracle_python
from servesim.cli.main import app
from servesim.perf.catalog import load_catalog, model_from_hf_config
from servesim.perf.layer_pattern import layer_pattern_of

SHIPPED = (
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "llama-3.3-70b",
    "glm-4.5",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "gemma-3-27b",
)
WINDOWED = {"gpt-oss-20b": (12, 24, 128), "gpt-oss-120b": (18, 36, 128), "gemma-3-27b": (52, 62, 1024)}
_IDENTITY = {"name", "hf_id", "aliases", "source", "notes"}


def _config_path(name: str) -> Path:
    return Path(str(resources.files("servesim") / "data" / "perf" / "hf_configs" / f"{name}.json"))


def _shipped(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_config_path(name).read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", SHIPPED)
def test_catalog_entries_are_their_shipped_config_json(name: str) -> None:
    entry = load_catalog().entry(name)
    loaded = model_from_hf_config(_shipped(name), name=name)
    fields = set(type(entry).model_fields) - _IDENTITY
    assert {f: getattr(entry, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
    assert entry.source == f"https://huggingface.co/{entry.hf_id}/blob/main/config.json"


@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "rel"),
    [
        ("qwen3-32b", 32.8, 32.8, 0.01),  # card: 32.8B
        ("qwen3-30b-a3b", 30.5, 3.3, 0.02),  # card: 30.5B total, 3.3B activated
        ("qwen3-235b-a22b", 235, 22, 0.01),  # card: 235B total, 22B activated
        ("llama-3.3-70b", 70.6, 70.6, 0.01),  # card: 70B (70.6B in the safetensors index)
        ("glm-4.5", 355, 32, 0.06),  # card: 355B total, 32B active (MTP layer not counted here)
        ("gpt-oss-20b", 20.91, None, 0.01),  # card: 20.91B total
        ("gpt-oss-120b", 116.83, None, 0.01),  # card: 116.83B total
        ("gemma-3-27b", 27.4, None, 0.02),  # card: 27B (27.4B with the vision encoder)
    ],
)
def test_parameter_counts_are_the_model_cards(
    name: str, total_b: float, active_b: float | None, rel: float
) -> None:
    m = load_catalog().entry(name)
    assert m.num_params / 1e9 == pytest.approx(total_b, rel=rel)
    if active_b is not None:
        assert m.active_params_per_token / 1e9 == pytest.approx(active_b, rel=rel)


@pytest.mark.parametrize(
    "name", ["qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama-3.3-70b", "glm-4.5"]
)
def test_full_attention_models_are_simulated(name: str) -> None:
    """Qwen3 ships sliding_window null with use_sliding_window false: every layer is full attention."""
    assert load_catalog().model(name).layer_pattern is None


@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_windowed_models_are_read_and_simulated(name: str) -> None:
    layers, of, window = WINDOWED[name]
    spec = load_catalog().model(name)  # no longer refused
    p = spec.layer_pattern
    assert p is not None and (p.kind, p.layers, spec.num_layers, p.window) == (
        "sliding_window",
        layers,
        of,
        window,
    )


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env={"COLUMNS": "240"})


def test_the_cli_sizes_a_windowed_model_as_kv_cache_groups(tmp_path: Path) -> None:
    """Named from the catalog or given as a config.json path, gpt-oss-20b gets vLLM's two groups."""
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_shipped("gpt-oss-20b")), encoding="utf-8")
    for model in ("gpt-oss-20b", str(folder / "config.json")):
        res = _cli(["perf", "memory", "--model", model, "--gpu", "h100", "--json"])
        assert res.exit_code == 0, res.output
        cap = json.loads(res.stdout)
        assert cap["kv_cache_groups"] == [
            {"kind": "sliding_window", "window": 128},
            {"kind": "full", "window": None},
        ]
        assert cap["layers_per_block"] == 12


def test_a_mamba_model_is_refused_in_one_line(tmp_path: Path) -> None:
    config = {**_shipped("qwen3-32b"), "layers_block_type": ["mamba", "attention"] * 32}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    res = CliRunner().invoke(app, ["simulate", "default", "--model", str(path), "--gpu", "h200"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert (
        "uses Mamba (state-space) layers in 32 of its 64 layers (config.json: layers_block_type)" in lines[0]
    )
    assert (
        "servesim models full, sliding-window, chunked-local and MLA attention and Qwen3-Next's "
        "GatedDeltaNet linear attention only" in lines[0]
    )


def test_mamba_and_linear_layers_are_found_by_their_config_names() -> None:
    nemotron_h = {"hybrid_override_pattern": "M-M-M*-M-M-"}  # Nemotron-H: M = Mamba layer
    assert layer_pattern_of(nemotron_h, 11, "nemotron_h") == layer_pattern_of(
        {"layers_block_type": ["mamba"] * 5 + ["attention"]}, 6, "jamba"
    ).model_copy(update={"field": "hybrid_override_pattern"})
    qwen3_next = {"layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    pattern = layer_pattern_of(qwen3_next, 4, "qwen3_next")
    assert pattern is not None and (pattern.kind, pattern.layers) == ("linear_attention", 3)
    assert layer_pattern_of({"sliding_window": 4096, "use_sliding_window": False}, 28, "qwen2") is None
    assert layer_pattern_of({"sliding_window": None}, 32, "mistral") is None


def _oracle_python() -> str | None:
    found = oracle_python()
    return str(found) if found.exists() else None


_ORACLE = r"""
import json, sys
from transformers import AutoConfig
out = {}
for name, path in json.loads(sys.argv[1]).items():
    cfg = json.load(open(path))
    conf = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    text = conf.get_text_config()
    out[name] = [t for t in text.layer_types if t != "full_attention"]
print(json.dumps(out))
"""


@pytest.mark.skipif(_oracle_python() is None, reason="vLLM oracle virtualenv not installed")
def test_layer_counts_agree_with_transformers_config_classes() -> None:
    """transformers builds each layer's type from the same fields (what vLLM's models read)."""
    names = {n: str(_config_path(n)) for n in (*WINDOWED, "qwen3-32b", "qwen3-next-80b-a3b")}
    res = subprocess.run(
        [str(_oracle_python()), "-c", _ORACLE, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    windowed = json.loads(res.stdout.strip().splitlines()[-1])
    assert windowed["qwen3-32b"] == []
    assert windowed["qwen3-next-80b-a3b"] == ["linear_attention"] * 36
    for name, (layers, _, _) in WINDOWED.items():
        assert windowed[name] == ["sliding_attention"] * layers, name


def test_the_models_table_says_which_are_refused() -> None:
    res = CliRunner().invoke(app, ["perf", "models"], env={"COLUMNS": "240"})
    assert res.exit_code == 0, res.output
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") > 5}
    assert "│ sliding window 12/24" in rows["gpt-oss-20b"] and "refused" not in rows["gpt-oss-20b"]
    assert "│ chunked local 36/48" in rows["llama-4-scout-17b-16e"]
    assert "refused" not in rows["llama-4-scout-17b-16e"]
    assert "│ full" in rows["glm-4.5"] and "│ MLA" in rows["deepseek-v3"]
    assert "│ linear attention 36/48" in rows["qwen3-next-80b-a3b"]
    assert "refused" not in rows["qwen3-next-80b-a3b"]


def test_qwen3_next_is_its_shipped_config_with_gated_delta_net_state_layers() -> None:
    """The entry is the shipped config.json (transformers' Qwen3NextConfig defaults, the released
    checkpoint's sizes); 36 of 48 layers are GatedDeltaNet with its state sizes; about 80B
    parameters (the card: 80B total), about 3B of them active besides the embeddings (card: 3B)."""
    entry = load_catalog().model("qwen3-next-80b-a3b")  # not refused
    loaded = model_from_hf_config(_shipped("qwen3-next-80b-a3b"), name="qwen3-next-80b-a3b")
    fields = set(type(entry).model_fields) - _IDENTITY
    assert {f: getattr(entry, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
    p = entry.layer_pattern
    assert p is not None and p.state is not None and (p.kind, p.layers) == ("linear_attention", 36)
    assert (p.state.num_k_heads, p.state.num_v_heads, p.state.head_k_dim, p.state.head_v_dim) == (
        16,
        32,
        128,
        128,
    )
    assert entry.num_attention_layers == 12
    assert entry.num_params / 1e9 == pytest.approx(80, rel=0.01)
    embeddings = entry.embedding_params + entry.lm_head_params
    assert (entry.active_params_per_token - embeddings) / 1e9 == pytest.approx(3.0, rel=0.06)


def test_a_linear_attention_model_without_known_state_sizes_is_refused() -> None:
    """``linear_attention`` layers of another model type (no GatedDeltaNet sizes): refused."""
    other = {"layer_types": ["linear_attention"] * 3 + ["full_attention"], "model_type": "minimax"}
    pattern = layer_pattern_of(other, 4, "minimax")
    assert pattern is not None and pattern.state is None and not pattern.modelled


def test_qwen3_next_runs_with_prefix_caching_as_vllms_align_mode_and_without(tmp_path: Path) -> None:
    """vLLM's default for a hybrid Mamba model (prefix caching on: mamba_cache_mode "align") runs:
    on an H100 (GatedDeltaNet prefill on FlashInfer) the block size is raised until a page holds
    a state and kept a multiple of 64 tokens (320 at TP 4), with a prefill checkpoint block per
    state layer; with --no-enable-prefix-caching ("none") the block is 272 tokens and no
    checkpoint is kept. Both in vLLM's groups, the raised block size said."""
    trace = tmp_path / "t.csv"
    res = _cli(["generate", "default", "-n", "40", "--seed", "1", "-o", str(trace)])
    assert res.exit_code == 0, res.output
    run = ["simulate", str(trace), "--model", "qwen3-next-80b-a3b", "--gpu", "h100", "--tp", "4", "--json"]
    for flags, block, ckpt in (([], 320, 1), (["--no-enable-prefix-caching"], 272, 0)):
        ok = _cli([*run, *flags])
        assert ok.exit_code == 0, ok.output
        assert f"KV block size {block} tokens, not 16" in ok.stderr
        out = json.loads(ok.stdout)
        assert out["summary"]["num_finished"] == 40
        assert [g["kind"] for g in out["config"]["kv_cache_groups"]] == ["mamba", "mamba", "mamba", "full"]
        assert out["config"]["block_size"] == block
        assert out["config"]["mamba_prefill_checkpoint_blocks"] == ckpt
        assert out["config"]["enable_prefix_caching"] is not flags


def test_qwen3_next_with_prefix_caching_on_blackwell_is_refused_naming_the_unknown() -> None:
    """On Blackwell vLLM's GatedDeltaNet prefill runs on FlashInfer only with a CUDA 13 runtime:
    servesim cannot tell which, so prefix caching there is refused in one line naming the flag."""
    run = ["simulate", "default", "-n", "10", "--model", "qwen3-next-80b-a3b", "--gpu", "b200", "--tp", "2"]
    refused = _cli(run)
    assert refused.exit_code == 2, refused.output
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA 13" in lines[0] and "--no-enable-prefix-caching" in lines[0], (
        refused.stderr
    )
