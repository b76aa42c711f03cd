"""Catalog entries from shipped config.json files, and the models servesim refuses to simulate.

Each entry below is checked against its published ``config.json`` (shipped in
``servesim/data/perf/hf_configs``), its parameter count against its model card, and the layer
pattern servesim reads (sliding-window, chunked-local) against transformers' own config classes in
the vLLM oracle virtualenv (skipped where it is absent). A refused model is refused in one line
through the CLI, whether named from the catalog or given as a config.json path.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf.catalog import load_catalog, model_from_hf_config
from servesim.perf.layer_pattern import UnmodelledLayersError, layer_pattern_of

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
REFUSED = {"gpt-oss-20b": (12, 24, 128), "gpt-oss-120b": (18, 36, 128), "gemma-3-27b": (52, 62, 1024)}
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


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_models_say_why(name: str) -> None:
    layers, of, window = REFUSED[name]
    with pytest.raises(
        UnmodelledLayersError, match=rf"sliding-window attention of {window} tokens in {layers} of its {of}"
    ):
        load_catalog().model(name)


def _cli_error(model: str) -> str:
    res = CliRunner().invoke(app, ["simulate", "default", "--model", model, "--gpu", "h200"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (
            "gpt-oss-20b",
            "model 'gpt-oss-20b' uses sliding-window attention of 128 tokens in 12 of its 24 layers",
        ),
        ("openai/gpt-oss-120b", "model 'gpt-oss-120b' uses sliding-window attention"),
        (
            "gemma-3-27b-it",
            "model 'gemma-3-27b' uses sliding-window attention of 1024 tokens in 52 of its 62",
        ),
        ("llama-4-scout", "chunked local attention of 8192 tokens in 36 of its 48 layers"),
        (
            "phi-3-mini",
            "sliding-window attention of 2047 tokens in 32 of its 32 layers (config.json: sliding_window)",
        ),
    ],
)
def test_the_cli_refuses_them_in_one_line(model: str, said: str) -> None:
    line = _cli_error(model)
    assert said in line and "servesim models full attention and MLA only" in line


def test_a_config_json_path_is_refused_too(tmp_path: Path) -> None:
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_shipped("gpt-oss-20b")), encoding="utf-8")
    assert "model 'gpt-oss-20b' uses sliding-window attention" in _cli_error(str(folder / "config.json"))


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
    found = glob.glob(os.path.expanduser("~/.cache/vllm-oracle-venv/bin/python"))
    return found[0] if found else None


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
    names = {n: str(_config_path(n)) for n in REFUSED} | {"qwen3-32b": str(_config_path("qwen3-32b"))}
    res = subprocess.run(
        [str(_oracle_python()), "-c", _ORACLE, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    windowed = json.loads(res.stdout.strip().splitlines()[-1])
    assert windowed["qwen3-32b"] == []
    for name, (layers, _, _) in REFUSED.items():
        assert windowed[name] == ["sliding_attention"] * layers, name


def test_the_models_table_says_which_are_refused() -> None:
    res = CliRunner().invoke(app, ["perf", "models"], env={"COLUMNS": "240"})
    assert res.exit_code == 0, res.output
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") > 5}
    assert "refused: sliding window 12/24" in rows["gpt-oss-20b"]
    assert "refused: chunked local 36/48" in rows["llama-4-scout-17b-16e"]
    assert "│ full" in rows["glm-4.5"] and "│ MLA" in rows["deepseek-v3"]
