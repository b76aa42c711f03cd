"""Recommendations: claims that re-simulation confirms, fallbacks, validators, derived rationale."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError
from tuning_helpers import poisson_workload

from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.tuning import (
    Deployment,
    FixedHardware,
    PercentileSLO,
    SaturationSettings,
    SchedulerRecommendation,
    recommend,
)
from servesim.tuning.recommend import _ms

SLO = PercentileSLO.parse("ttft_p99_ms=400,tpot_p99_ms=40")
FAST = SaturationSettings(rtol=0.05, curve_fractions=())


def _engine_config_from_yaml(rec: SchedulerRecommendation) -> EngineConfig:
    """What an operator would run: the YAML's vLLM keys (and the simulated KV blocks)."""
    data = yaml.safe_load(rec.config_yaml)
    keys: dict[str, object] = {}
    for key, value in data.items():
        if key in ("model", "tensor-parallel-size", "gpu-memory-utilization"):
            continue
        if key.startswith("no-"):
            keys[key[3:].replace("-", "_")] = not value
        else:
            keys[key.replace("-", "_")] = value
    return EngineConfig(
        num_gpu_blocks=rec.num_gpu_blocks, queue_timeout_s=rec.deployment.queue_timeout_s, **keys
    )


@pytest.mark.parametrize(
    "flags",
    [
        {"max_num_seqs": 32, "max_num_batched_tokens": 1024},
        {
            "max_num_seqs": 16,
            "max_num_batched_tokens": 2048,
            "enable_chunked_prefill": False,
            "block_size": 32,
        },
    ],
)
def test_recommendation_meets_its_claimed_slo_on_resimulation(flags: dict[str, object]) -> None:
    wl = poisson_workload(n=150)
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment.model_validate({"max_model_len": wl.default_max_model_len(), **flags})
    rec = recommend(wl, hw, SLO, [d], target_rate=5.0, saturation=FAST)
    assert rec.requires_human_review is True and rec.meets_slo is True and rec.status == "STABLE"
    assert rec.verification_seeds == [1000, 1001, 1002]  # fresh: the search used 0, 1, ...
    cfg = _engine_config_from_yaml(rec)
    assert cfg == d.engine_config(rec.num_gpu_blocks)
    caps = SLO.caps()
    for run, seed in zip(rec.verification, rec.verification_seeds, strict=True):
        res = simulate(wl.trace(5.0, seed), cfg, LinearStepTime(), slo=SLO.request_slo())
        s = res.summary
        assert s.ttft_ms.p99 == pytest.approx(run.ttft_p99_ms) and s.ttft_ms.p99 <= caps["ttft"]
        assert s.tpot_ms.p99 == pytest.approx(run.tpot_p99_ms) and s.tpot_ms.p99 <= caps["tpot"]
    assert rec.predicted_ttft_ms.p99.max <= caps["ttft"]
    assert rec.saturation_rps is not None and rec.headroom == pytest.approx(rec.saturation_rps / 5.0 - 1)
    assert rec.goodput_knee_rps is not None and rec.goodput_knee_rps <= rec.saturation_rps * 1.5


def test_a_candidate_failing_fresh_seeds_is_not_recommended() -> None:
    wl = poisson_workload(n=150)
    hw = FixedHardware(LinearStepTime(), 3000)
    mml = wl.default_max_model_len()
    bad = Deployment(max_num_seqs=1, max_num_batched_tokens=256, max_model_len=mml)  # one at a time
    good = Deployment(max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=mml)
    rec = recommend(wl, hw, SLO, [bad, good], target_rate=5.0, saturation=FAST)
    assert rec.deployment == good and rec.meets_slo
    assert any("failed re-verification" in w for w in rec.warnings)
    only_bad = recommend(wl, hw, SLO, [bad], target_rate=5.0, saturation=FAST)
    assert only_bad.meets_slo is False and only_bad.deployment == bad
    assert any(v.slo_violations for v in only_bad.verification)
    assert "misses the SLO" in only_bad.rationale[0]


def test_validators_reject_false_claims_and_invalid_flags() -> None:
    wl = poisson_workload(n=150)
    hw = FixedHardware(LinearStepTime(), 3000)
    mml = wl.default_max_model_len()
    bad = Deployment(max_num_seqs=1, max_num_batched_tokens=256, max_model_len=mml)
    rec = recommend(wl, hw, SLO, [bad], target_rate=5.0, saturation=FAST)
    data = rec.model_dump(mode="json")
    with pytest.raises(ValidationError, match="meets_slo claimed but re-verification shows"):
        SchedulerRecommendation.model_validate({**data, "meets_slo": True})
    with pytest.raises(ValidationError, match="requires_human_review"):
        SchedulerRecommendation.model_validate({**data, "requires_human_review": False})
    with pytest.raises(ValidationError, match="gpus"):
        SchedulerRecommendation.model_validate({**data, "gpus": 4})
    unchunked = {**data["deployment"], "enable_chunked_prefill": False, "max_num_batched_tokens": 512}
    with pytest.raises(ValidationError, match=r"chunked prefill off needs max_num_batched_tokens \(512\)"):
        SchedulerRecommendation.model_validate({**data, "deployment": unchunked})


def test_rationale_is_derived_from_the_measured_ablations() -> None:
    wl = poisson_workload(n=150)
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment(
        max_num_seqs=32, max_num_batched_tokens=1024, replicas=2, max_model_len=wl.default_max_model_len()
    )
    rec = recommend(wl, hw, SLO, [d], target_rate=5.0, saturation=FAST)
    by_change = {a.change: a for a in rec.ablations}
    off = by_change["chunked prefill off"]
    # 1,024 tokens per step < max_model_len: vLLM would refuse chunking off, and the rationale says so.
    assert not off.valid and "max_model_len" in (off.reason or "")
    assert any(r.startswith("chunked prefill must stay on") for r in rec.rationale)
    half = by_change["max_num_seqs 16"]
    assert half.valid and half.ttft_p99_ms is not None
    line = next(r for r in rec.rationale if r.startswith("max_num_seqs 32"))
    assert _ms(half.ttft_p99_ms) in line
    one = by_change["1 replica(s)"]
    assert one.valid and one.ttft_p99_ms is not None
    assert any(_ms(one.ttft_p99_ms) in r for r in rec.rationale if r.startswith("with 1 replica"))
    assert rec.replicas == 2 and rec.gpus == 2 and rec.router == "least_outstanding"
    assert "run 2 of them" in rec.config_yaml
