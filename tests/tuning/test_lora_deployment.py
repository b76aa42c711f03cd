"""A deployment with LoRA on carries vLLM's LoRA flags into its engine and its ``vllm serve``
command (the server must run the constraint that was simulated); with LoRA off its document
and its command are what they were before the flags existed."""

from __future__ import annotations

from servesim.engine import EngineConfig
from servesim.tuning.deployment import Deployment


def test_lora_flags_reach_the_engine_and_the_serve_command() -> None:
    d = Deployment.from_engine_config(
        EngineConfig(enable_lora=True, max_loras=3, max_lora_rank=64), max_model_len=4096
    )
    config = d.engine_config(5000)
    assert (config.enable_lora, config.max_loras, config.max_lora_rank) == (True, 3, 64)
    assert d.vllm_serve_command("llama-3.1-8b").endswith("--enable-lora --max-loras 3 --max-lora-rank 64")
    assert Deployment.model_validate(d.model_dump()) == d


def test_without_lora_nothing_changes() -> None:
    d = Deployment(max_model_len=4096)
    assert not {"enable_lora", "max_loras", "max_lora_rank"} & set(d.model_dump())
    assert "lora" not in d.vllm_serve_command("llama-3.1-8b")
    assert not d.engine_config(5000).enable_lora
