"""The KV capacity of sliding-window, chunked-local and Mamba-hybrid models equals vLLM 0.33's own planning.

For each row (model x GPU x TP), servesim's memory model gives the bytes left for the KV cache;
vLLM's ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` (run by
``tools/oracle/hybrid_kv_oracle.py`` in the oracle's virtualenv, from the model's own config.json)
must plan the same groups, the same bytes per pool block (one page of ``group_size`` layers) and
the same ``num_gpu_blocks`` from those bytes, and accept them for one ``max_model_len`` sequence.
For Qwen3-Next (GatedDeltaNet state layers) vLLM also raises the attention block size until a
page holds a state (``Platform._align_hybrid_block_size``): the block size must be the same too.
Skipped where the oracle's virtualenv is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oracle_venv import run_oracle_tool
from servesim.perf.memory import kv_capacity

ROOT = Path(__file__).resolve().parents[2]

#: (model, GPU, TP, block size): each windowed catalog model where it fits.
ROWS = [
    ("gpt-oss-20b", "h100", 1, 16),
    ("gpt-oss-20b", "l40s", 1, 32),
    ("gpt-oss-120b", "h100", 2, 16),
    ("gpt-oss-120b", "h200", 1, 16),
    ("gemma-3-27b", "h100", 1, 16),
    ("gemma-3-27b", "h200", 2, 32),
    ("llama-4-scout-17b-16e", "h100", 4, 16),
    ("llama-4-scout-17b-16e", "h200", 2, 16),
    ("qwen3-next-80b-a3b", "h100", 4, 16),
    ("qwen3-next-80b-a3b", "h100", 8, 16),
    ("qwen3-next-80b-a3b", "h200", 2, 16),
    ("qwen3-next-80b-a3b", "h200", 4, 32),
    ("qwen3-next-80b-a3b", "b200", 2, 16),
]
MML, MBT = 32768, 8192


def _config(name: str) -> dict[str, Any]:
    if name.startswith("llama-4-scout"):  # not shipped: the sim2real fixture's, as vLLM logged it
        return json.loads((ROOT / "tests" / "fixtures" / "sim2real" / "17.json").read_text())["hf_config"]
    path = ROOT / "src" / "servesim" / "data" / "perf" / "hf_configs" / f"{name}.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def vllm_plans() -> list[dict[str, Any]]:
    items = []
    for name, gpu, tp, block in ROWS:
        cap = kv_capacity(name, gpu, tp, block_size=block, max_model_len=MML, max_num_batched_tokens=MBT)
        items.append(
            {
                "config": _config(name),
                "tp": tp,
                "block_size": block,
                "available_memory": cap.kv_cache_bytes,
                "max_model_len": MML,
                "max_num_batched_tokens": MBT,
            }
        )
    return run_oracle_tool("hybrid_kv_oracle.py", items)


@pytest.mark.parametrize("i", range(len(ROWS)), ids=["-".join(map(str, r)) for r in ROWS])
def test_groups_and_num_gpu_blocks_equal_vllms(vllm_plans: list[dict[str, Any]], i: int) -> None:
    name, gpu, tp, block = ROWS[i]
    cap = kv_capacity(name, gpu, tp, block_size=block, max_model_len=MML, max_num_batched_tokens=MBT)
    got = vllm_plans[i]
    assert cap.kv_cache_groups is not None
    assert [g.model_dump(exclude_none=True) for g in cap.kv_cache_groups] == got["groups"]
    assert cap.layers_per_block == got["layers_per_group"]
    assert cap.bytes_per_block == got["bytes_per_block"]
    assert cap.num_gpu_blocks == got["num_blocks"]
    assert cap.block_size == got["block_size"]
    assert got["fits"]


def test_a_pool_block_is_a_page_of_one_groups_layers() -> None:
    """Closed form: gpt-oss-120b (36 layers, 8 KV heads of 64, bf16) at TP 2: a token's page is
    2 x 4 heads x 64 x 2 bytes = 1 KiB per layer; 18 layers per group, 16 tokens: 288 KiB a block,
    half of the 576 KiB a block of all 36 layers takes with the hybrid manager off."""
    full = kv_capacity("gpt-oss-120b", "h100", 2, max_model_len=MML, hybrid=False)
    hybrid = kv_capacity("gpt-oss-120b", "h100", 2, max_model_len=MML)
    assert hybrid.bytes_per_block == 18 * 16 * 1024 and full.bytes_per_block == 36 * 16 * 1024
    assert hybrid.kv_cache_bytes == full.kv_cache_bytes
    assert hybrid.num_gpu_blocks == hybrid.kv_cache_bytes // hybrid.bytes_per_block
    assert full.kv_cache_groups is None and hybrid.layers_per_block == 18


def test_a_state_layer_raises_the_block_size_until_a_page_holds_its_state() -> None:
    """Closed form: Qwen3-Next at TP 4 (bf16). A GatedDeltaNet state per rank is a conv state of
    (2 x 16 x 128 + 32 x 128) / 4 = 2048 channels x 3 columns and 32 / 4 = 8 heads of 128 x 128:
    (6,144 + 131,072) x 2 B = 274,432 B. An attention token is 2 x 1 KV head (2 replicated over 4
    ranks) x 256 x 2 B = 1,024 B, so the block is 16 x ceil(274,432 / 16,384) = 272 tokens, a page
    278,528 B; 36 state layers and 12 attention layers make groups of 12: 3 mamba groups and 1 full,
    a pool block 12 pages."""
    cap = kv_capacity("qwen3-next-80b-a3b", "h100", 4, max_model_len=MML, max_num_batched_tokens=MBT)
    assert cap.block_size == 272
    assert cap.kv_bytes_per_token == 12 * 1024  # the 12 attention layers only
    assert cap.bytes_per_block == 12 * 278_528
    assert [g.kind for g in cap.kv_cache_groups or []] == ["mamba", "mamba", "mamba", "full"]
    assert cap.num_gpu_blocks == cap.kv_cache_bytes // cap.bytes_per_block
