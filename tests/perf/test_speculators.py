"""Issue 46: a speculative ``vllm serve`` command names the drafter vLLM needs: the user's, or the
head published for the catalog model (``servesim/data/perf/speculators.yaml``); where none is
known, one line that says what to give, never a command vLLM would not start."""

from __future__ import annotations

import re

import pytest

from servesim.errors import ConfigError
from servesim.perf import load_catalog
from servesim.perf.speculators import PLACEHOLDER_DRAFT, draft_checkpoint, published_heads, served_id
from servesim.tuning.deployment import Deployment


def test_every_published_head_is_for_a_catalog_model_with_a_source() -> None:
    catalog = load_catalog()
    heads = published_heads()
    assert {"llama-3.1-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama-4-scout-17b-16e"} <= set(heads)
    for model, by_method in heads.items():
        assert model in catalog.models
        for method, head in by_method.items():
            assert method in ("eagle", "eagle3", "mtp")
            assert head.hf_id is None or re.fullmatch(r"[\w.-]+/[\w.-]+", head.hf_id)
            assert head.source and head.architecture


@pytest.mark.parametrize("target", ["llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"])
def test_the_published_head_is_named_by_catalog_name_or_hf_id(target: str) -> None:
    assert draft_checkpoint("eagle3", None, target) == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert draft_checkpoint("eagle", None, target) == "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"


def test_the_users_drafter_wins_and_a_catalog_name_becomes_its_hf_id() -> None:
    assert draft_checkpoint("eagle3", "me/my-head", "phi-4") == "me/my-head"
    assert (
        draft_checkpoint("draft_model", "llama-3.2-1b", "llama-3.1-8b") == "meta-llama/Llama-3.2-1B-Instruct"
    )
    assert served_id("llama-3.1-70b") == "meta-llama/Llama-3.1-70B-Instruct" and served_id("x/y") == "x/y"


def test_what_needs_no_checkpoint_and_placeholders() -> None:
    assert draft_checkpoint("ngram", None, "phi-4") is None
    assert draft_checkpoint("mtp", None, "someone/unknown-model") is None  # vLLM reads its checkpoint
    assert draft_checkpoint("eagle3", None, "MODEL") == PLACEHOLDER_DRAFT
    assert draft_checkpoint("mtp", None, None) is None


@pytest.mark.parametrize(
    ("method", "target", "said"),
    [
        ("eagle3", "phi-4", "no published EAGLE-3 head for phi-4"),
        ("eagle", "qwen3-30b-a3b", "no published EAGLE head for qwen3-30b-a3b"),
        ("mtp", "llama-3.1-8b", "multi-token-prediction layers"),
        ("draft_model", "llama-3.1-8b", "needs the draft model"),
    ],
)
def test_where_vllm_would_not_start_one_line_says_what_to_give(method: str, target: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as err:
        draft_checkpoint(method, None, target)
    assert str(err.value).startswith("--speculative-config") and "\n" not in str(err.value)


def _spec(method: str, **kw: object) -> Deployment:
    sc = {"method": method, "num_speculative_tokens": 3, **kw}
    return Deployment(max_model_len=4096, num_speculative_tokens=3, speculative_config=sc)


def test_the_command_names_the_drafter_or_refuses() -> None:
    assert '"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"' in _spec("eagle3").vllm_serve_command(
        "llama-3.1-8b"
    )
    assert '"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"' in _spec("eagle3").vllm_config_yaml(
        "llama-3.1-8b"
    )
    with pytest.raises(ConfigError, match="EAGLE-3 head"):
        _spec("eagle3").vllm_serve_command("phi-4")
    with pytest.raises(ConfigError, match="EAGLE-3 head"):
        _spec("eagle3").replica_commands("phi-4")
    shown = _spec("eagle3").vllm_serve_command("phi-4", strict=False)  # the report's view
    assert f'"model": "{PLACEHOLDER_DRAFT}"' in shown
    ngram = _spec("ngram").vllm_serve_command("phi-4")
    assert '"model"' not in ngram and '"method": "ngram"' in ngram


def test_the_command_refuses_values_vllm_refuses_and_drops_a_cap_that_never_binds() -> None:
    with pytest.raises(ConfigError, match="above microsoft/phi-4's context"):
        Deployment(max_model_len=16385).vllm_serve_command("phi-4")
    with pytest.raises(ConfigError, match="--block-size 8"):
        Deployment(max_model_len=4096, block_size=8).vllm_serve_command("llama-3.1-8b")
    capped = Deployment(max_model_len=1500, long_prefill_token_threshold=2048).vllm_serve_command("m")
    assert "--long-prefill-token-threshold" not in capped
    assert "--long-prefill-token-threshold 512" in Deployment(
        max_model_len=1500, long_prefill_token_threshold=512
    ).vllm_serve_command("m")


def test_a_study_can_be_refused_before_its_first_trial() -> None:
    from servesim.engine.speculative import SpeculativeConfig
    from servesim.tuning.deployment import check_speculative_draft
    from servesim.tuning.hardware import PerfHardware

    eagle3 = SpeculativeConfig(method="eagle3", num_speculative_tokens=3)
    check_speculative_draft(eagle3, PerfHardware(model="llama-3.1-8b"))  # a published head
    check_speculative_draft(None, PerfHardware(model="phi-4"))
    with pytest.raises(ConfigError, match="no published EAGLE-3 head for phi-4"):
        check_speculative_draft(eagle3, PerfHardware(model="phi-4"))
