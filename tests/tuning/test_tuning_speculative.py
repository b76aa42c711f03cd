"""`tune` searches speculative decoding's k (``num_speculative_tokens``, 0 = off) with the method
and acceptance of ``--speculative-config``; a space that does not search it is the space it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.tuning import SchedulerRecommendation, TuneResult
from servesim.tuning.deployment import Deployment
from servesim.tuning.space import Knob, SearchSpace

runner = CliRunner()
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [0.8]}


def test_the_default_space_keeps_its_fingerprint_and_size() -> None:
    sp = SearchSpace()
    # the fingerprint and size of the default space before the knob existed (main at ba97b01)
    assert sp.fingerprint() == "2ecac5b831f76f4a253fea5c5c02275aa8b822e600327d51fa83fc952c70ba00"
    assert sp.size(2048, 8) == 97920
    searched = sp.with_overrides({"num_speculative_tokens": Knob(choices=[0, 2, 4])})
    assert searched.fingerprint() != sp.fingerprint()
    assert searched.size(2048, 8) == 3 * 97920


def test_a_deployment_turns_k_into_the_engines_speculative_config_and_vllms_flag() -> None:
    d = Deployment(max_model_len=4096, num_speculative_tokens=2, speculative_config=EAGLE3)
    keys = d.engine_keys()
    assert keys["speculative_config"]["num_speculative_tokens"] == 2  # k replaced, method kept
    assert keys["speculative_config"]["method"] == "eagle3"
    cmd = d.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct")
    # issue 46: vLLM starts EAGLE-3 only with the head's checkpoint, the catalog's published one
    head = '"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"'
    assert f"""--speculative-config '{{"method": "eagle3", {head}, "num_speculative_tokens": 2}}'""" in cmd
    off = Deployment(max_model_len=4096, num_speculative_tokens=0, speculative_config=EAGLE3)
    assert "speculative_config" not in off.engine_keys()  # k = 0: off, the engine sees nothing
    assert "speculative" not in off.vllm_serve_command("m")
    with pytest.raises(ValueError, match="num_speculative_tokens 2 needs a speculative config"):
        Deployment(max_model_len=4096, num_speculative_tokens=2)


FIXED = [
    "replicas=1",
    "tensor_parallel_size=1",
    "max_num_seqs=32",
    "max_num_batched_tokens=2048",
    "long_prefill_token_threshold=0",
    "enable_prefix_caching=true",
    "enable_chunked_prefill=true",
    "block_size=16",
    "queue_timeout_s=none",
]


def _tune(extra: list[str], tmp_path: Path) -> tuple[int, str, str]:
    res = runner.invoke(
        app,
        [
            "tune",
            "poisson_5_rps",
            "-n",
            "80",
            "--step-time-ms",
            "20",
            "--num-gpu-blocks",
            "3000",
            "--executor",
            "local",
            "--slo",
            "tpot_p99_ms=15",
            "--trials",
            "2",
            "--trial-seeds",
            "1",
            "--verify-seeds",
            "1",
            "--storage",
            "memory",
            *[a for f in FIXED for a in ("--space", f)],
            *extra,
        ],
    )
    return res.exit_code, res.stdout, res.stderr


def test_tune_searches_k_and_recommends_speculation_when_only_it_meets_a_tight_tpot(tmp_path: Path) -> None:
    """A 20 ms step cannot give a 15 ms TPOT one token a step: only k > 0 meets the SLO, so the
    recommendation speculates, its vllm serve line carries --speculative-config, and the trial
    table shows each trial's k."""
    code, out, err = _tune(
        ["--speculative-config", json.dumps(EAGLE3), "--space", "num_speculative_tokens=0,1,3", "--json"],
        tmp_path,
    )
    assert code == 0, out + err
    data = json.loads(out)
    study = TuneResult.model_validate(data["study"])
    rec = SchedulerRecommendation.model_validate(data["recommendation"])
    assert {t.params.get("num_speculative_tokens", 0) for t in study.trials} == {0, 1, 3}
    off = [t for t in study.trials if t.params.get("num_speculative_tokens", 0) == 0]
    assert off and all(t.outcome is not None and not t.outcome.feasible for t in off)
    assert rec.meets_slo and rec.deployment.num_speculative_tokens in (1, 3)
    assert '"method": "eagle3"' in rec.vllm_serve_command
    code, human, err = _tune(
        [
            "--speculative-config",
            json.dumps(EAGLE3),
            "--space",
            "num_speculative_tokens=0,1,3",
            "--no-recommend",
        ],
        tmp_path,
    )
    assert code == 0, human + err
    assert "spec k" in human  # the trial table's k column


def test_speculative_config_alone_searches_off_and_its_k(tmp_path: Path) -> None:
    code, out, err = _tune(["--speculative-config", json.dumps(EAGLE3), "--no-recommend", "--json"], tmp_path)
    assert code == 0, out + err
    study = TuneResult.model_validate(json.loads(out)["study"])
    assert {t.params.get("num_speculative_tokens", 0) for t in study.trials} == {0, 3}


def test_searching_k_without_a_method_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    code, out, err = _tune(["--space", "num_speculative_tokens=0,2"], tmp_path)
    assert code == 2
    assert "--speculative-config" in err and "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1
