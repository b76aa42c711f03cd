"""Inputs of capacity planning: percentile SLOs, workloads at any rate, deployments and their
validation, the vllm serve command and YAML, the hardware context."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import ValidationError
from tuning_helpers import constant_workload, poisson_workload

from servesim.engine import LinearStepTime
from servesim.errors import ConfigError
from servesim.traces import BurstArrivals, GeneratorSpec, OnOffArrivals, Trace, load_trace
from servesim.tuning import (
    Deployment,
    FixedHardware,
    PercentileSLO,
    PerfHardware,
    Workload,
    deployment_problems,
    resolve_deployment,
)
from servesim.tuning.workload import scale_arrival

# ---------------------------------------------------------------------- SLOs


def test_percentile_slo_parse_and_request_form() -> None:
    slo = PercentileSLO.parse("ttft_p99_ms=500, tpot_p99_ms=50,good=0.95")
    assert slo.caps() == {"ttft": 500.0, "tpot": 50.0}
    assert slo.min_good_fraction == 0.95
    req = slo.request_slo()
    assert req is not None and (req.ttft_ms, req.tpot_ms, req.e2e_ms) == (500.0, 50.0, None)
    assert slo.violations({"ttft": 600.0, "tpot": 50.0, "e2e": 1.0}, 0.9) == [
        "TTFT p99 600.0 ms > 500.0 ms",
        "good fraction 0.900 < 0.950",
    ]
    assert PercentileSLO.parse(slo.describe()) == slo


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("ttft_ms=500", "names no percentile"),
        ("ttft_p90_ms=500", "unknown SLO"),
        ("foo=1", "unknown SLO"),
        ("ttft_p99_ms", "name=value"),
        ("ttft_p99_ms=fast", "not a number"),
        ("good=0.9", "needs at least one latency cap"),
        ("", "empty SLO"),
    ],
)
def test_percentile_slo_errors(text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        PercentileSLO.parse(text)


# ---------------------------------------------------------------------- workloads


def _trace(times: list[float]) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"q{i}", "arrival_time_s": t, "prompt_len": 10 + i, "output_len": 5 + i}
            for i, t in enumerate(times)
        ]
    )


def test_real_trace_is_rescaled_in_time() -> None:
    tr = _trace([0.0, 1.0, 1.5, 4.0])
    wl = Workload.from_trace(tr)
    assert wl.kind == "trace" and wl.base_rate == pytest.approx(0.75)
    fast = wl.trace(1.5, 0)  # twice the rate: half the times
    assert fast.df["arrival_time_s"].tolist() == pytest.approx([0.0, 0.5, 0.75, 2.0])
    assert fast.df["req_id"].tolist() == tr.df["req_id"].tolist()
    assert wl.trace(None, 0).df.equals(tr.df)


def test_real_trace_seeds_are_circular_shifts() -> None:
    tr = _trace([0.0, 1.0, 1.5, 4.0, 4.2, 7.0])
    wl = Workload.from_trace(tr)
    shifted = wl.trace(None, 5)
    ids = shifted.df["req_id"].tolist()
    assert sorted(ids) == sorted(tr.df["req_id"]) and ids != tr.df["req_id"].tolist()
    k = tr.df["req_id"].tolist().index(ids[0])
    assert ids == tr.df["req_id"].tolist()[k:] + tr.df["req_id"].tolist()[:k]
    gaps = np.diff(tr.df["arrival_time_s"].to_numpy())
    new_gaps = np.diff(shifted.df["arrival_time_s"].to_numpy())
    wrap = 7.0 / 5  # the mean gap joins the end to the start
    expected = [*gaps[k:], wrap, *gaps[: k - 1]]  # every gap but the one before the new start
    assert new_gaps == pytest.approx(expected)
    # each request keeps its lengths
    merged = shifted.df.set_index("req_id")["prompt_len"].to_dict()
    assert merged == tr.df.set_index("req_id")["prompt_len"].to_dict()
    assert wl.trace(None, 5).df.equals(shifted.df)  # same seed, same shift


def test_generator_rate_is_replaced_and_poisson_scales_exactly() -> None:
    wl = poisson_workload(n=100, rate=5.0)
    slow, fast = wl.trace(5.0, 0), wl.trace(10.0, 0)
    assert fast.df["arrival_time_s"].to_numpy() == pytest.approx(slow.df["arrival_time_s"].to_numpy() / 2)
    assert fast.df["prompt_len"].tolist() == slow.df["prompt_len"].tolist()
    assert not wl.trace(5.0, 1).df["prompt_len"].equals(slow.df["prompt_len"])  # another seed
    assert fast.provenance.generator is not None
    assert fast.provenance.generator["arrival"]["rate"] == 10.0


def test_shaped_arrivals_keep_their_shape_and_burst_has_no_rate() -> None:
    onoff = OnOffArrivals(rate_on=20, rate_off=2, mean_on_s=10, mean_off_s=10)
    scaled = scale_arrival(onoff, onoff.mean_rate() * 3)
    assert isinstance(scaled, OnOffArrivals)
    assert (scaled.rate_on, scaled.rate_off, scaled.mean_on_s) == pytest.approx((60, 6, 10))
    wl = Workload.from_spec(GeneratorSpec(num_requests=10, arrival=BurstArrivals()))
    assert wl.base_rate is None
    with pytest.raises(ValueError, match="no rate to scale"):
        wl.trace(5.0, 0)


def test_seed_json_becomes_a_request_workload(tmp_path: Path) -> None:
    path = tmp_path / "seed.json"
    path.write_text(
        json.dumps(
            {
                "arrival_distribution": "poisson_10_rps",
                "requests": [
                    {"req_id": f"s{i}", "prompt_len": 100 + i, "expected_out": 20} for i in range(50)
                ],
            }
        )
    )
    wl = Workload.from_trace(load_trace(str(path)))
    assert wl.kind == "requests" and wl.base_rate == 10.0
    a, b = wl.trace(20.0, 0), wl.trace(20.0, 1)
    assert a.df["prompt_len"].tolist() == b.df["prompt_len"].tolist()
    assert not np.allclose(a.df["arrival_time_s"], b.df["arrival_time_s"])
    assert wl.default_max_model_len() == 149 + 20 + 1


# ---------------------------------------------------------------------- deployments


def _dep(**kw: object) -> Deployment:
    return Deployment.model_validate({"max_model_len": 4096, **kw})


@pytest.mark.parametrize(
    ("kw", "rule", "words"),
    [
        (
            {"max_num_seqs": 256, "max_num_batched_tokens": 128},
            "budget_below_max_num_seqs",
            "at least one token",
        ),
        (
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048},
            "unchunked_budget_below_max_model_len",
            ">= max_model_len (4096)",
        ),
        (
            {
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": 8192,
                "long_prefill_token_threshold": 512,
            },
            "threshold_without_chunking",
            "set it to 0 or enable chunked prefill",
        ),
        ({"block_size": 24}, "block_size", "not one vLLM accepts"),
    ],
)
def test_invalid_combinations_are_rejected_with_a_reason(
    kw: dict[str, object], rule: str, words: str
) -> None:
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _dep(**kw)
    problems = deployment_problems(Deployment.model_construct(**{**_dep().model_dump(), **kw}))
    assert [r for r, _ in problems] == [rule]


def test_hardware_refusals_carry_the_reason() -> None:
    d = _dep(tensor_parallel_size=1)
    with pytest.raises(ValueError, match="does not fit"):
        resolve_deployment(d, PerfHardware(model="llama-3.1-70b", gpu="l4"))
    with pytest.raises(ValueError, match="cannot be split"):
        resolve_deployment(_dep(tensor_parallel_size=3), PerfHardware())
    with pytest.raises(ValueError, match="fixed TP"):
        resolve_deployment(_dep(tensor_parallel_size=2), FixedHardware(LinearStepTime(), 1000))
    with pytest.raises(ValueError, match="KV blocks"):  # the cache cannot hold one max_model_len sequence
        resolve_deployment(_dep(), FixedHardware(LinearStepTime(), 100))


def test_fixed_hardware_keeps_token_capacity_across_block_sizes() -> None:
    hw = FixedHardware(LinearStepTime(), 1001, block_size=16)
    cfg16, _ = resolve_deployment(_dep(block_size=16, max_model_len=1000), hw)
    cfg32, _ = resolve_deployment(_dep(block_size=32, max_model_len=1000), hw)
    assert (cfg16.num_gpu_blocks, cfg32.num_gpu_blocks) == (1001, 501)


def test_perf_hardware_derives_blocks_from_memory() -> None:
    hw = PerfHardware()
    lo, _ = resolve_deployment(_dep(gpu_memory_utilization=0.8), hw)
    hi, _ = resolve_deployment(_dep(gpu_memory_utilization=0.95), hw)
    tp2, _ = resolve_deployment(_dep(tensor_parallel_size=2), hw)
    base, _ = resolve_deployment(_dep(), hw)
    assert lo.num_gpu_blocks < hi.num_gpu_blocks and tp2.num_gpu_blocks > 2 * base.num_gpu_blocks
    assert hw.serve_model == "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_command_and_yaml_use_vllms_flags() -> None:
    d = _dep(
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        enable_chunked_prefill=False,
        enable_prefix_caching=True,
        block_size=32,
        gpu_memory_utilization=0.85,
        tensor_parallel_size=2,
        replicas=3,
        queue_timeout_s=30.0,
    )
    cmd = shlex.split(d.vllm_serve_command("meta-llama/Llama-3.1-8B-Instruct"))
    assert cmd[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    flags = cmd[3:]
    for name, value in [
        ("--tensor-parallel-size", "2"),
        ("--max-model-len", "4096"),
        ("--max-num-seqs", "64"),
        ("--max-num-batched-tokens", "8192"),
        ("--block-size", "32"),
        ("--gpu-memory-utilization", "0.85"),
    ]:
        assert flags[flags.index(name) + 1] == value
    assert "--no-enable-chunked-prefill" in flags and "--enable-prefix-caching" in flags
    assert not any("timeout" in f or "replica" in f for f in flags)  # not vLLM flags
    data = yaml.safe_load(d.vllm_config_yaml("m", header=["hello"]))
    assert data["no-enable-chunked-prefill"] is True and data["enable-prefix-caching"] is True
    assert data["max-num-seqs"] == 64 and data["model"] == "m"
    # The YAML has exactly the command's flags.
    yaml_flags = {f"--{k}" for k in data if k != "model"}
    assert yaml_flags == {f for f in flags if f.startswith("--")}


def test_an_offload_deployment_carries_vllms_offload_flags_and_host_memory() -> None:
    """Issue 31.4: a deployment with a CPU KV tier runs `vllm serve ... --kv-offloading-size N
    --kv-offloading-backend native` (vLLM's CacheConfig flags, engine/arg_utils.py), the same in
    the YAML; the engine gets the size; the plan counts and prices its host memory; a size beyond
    the host memory assumed per GPU is refused with the reason; without a tier nothing changes."""
    from servesim.perf.offload import HOST_MEMORY_GIB_PER_GPU, HOST_MEMORY_USD_PER_GIB_HOUR
    from servesim.tuning.deploy import deploy_plan
    from servesim.views.deploy import cost_text

    d = _dep(kv_offloading_size=16.0, replicas=2)
    flags = shlex.split(d.vllm_serve_command("m"))[3:]
    assert flags[flags.index("--kv-offloading-size") + 1] == "16"
    assert flags[flags.index("--kv-offloading-backend") + 1] == "native"
    data = yaml.safe_load(d.vllm_config_yaml("m"))
    assert data["kv-offloading-size"] == 16.0 and data["kv-offloading-backend"] == "native"
    assert d.engine_config(1000).kv_offloading_size == 16.0
    assert Deployment.from_engine_config(d.engine_config(1000), max_model_len=4096).kv_offloading_size == 16.0
    assert "--kv-offloading-size" not in _dep().vllm_serve_command("m")

    def plan(dep: Deployment, price: float | None) -> Any:
        return deploy_plan(
            dep, "m", "least_outstanding", longest_request_tokens=100, rate=1.0, throughput_rps=1.0,
            output_tokens_per_s=100.0, mean_request_tokens=200.0, knee_rps=None, knee_headroom=None,
            unstable_rps=None, headroom=None, usd_per_gpu_hour=price,
        )  # fmt: skip

    priced, plain = plan(d, 2.0), plan(d.model_copy(update={"kv_offloading_size": None}), 2.0)
    assert priced.host_memory_gib == 32.0 and priced.usd_per_host_gib_hour == HOST_MEMORY_USD_PER_GIB_HOUR
    assert priced.usd_per_day == pytest.approx(plain.usd_per_day + 32.0 * HOST_MEMORY_USD_PER_GIB_HOUR * 24)
    assert plain.host_memory_gib == 0 and plain.usd_per_day == 2 * 2.0 * 24  # unchanged without a tier
    assert "32 GiB of host memory" in cost_text(priced) and "GiB" not in cost_text(plain)
    assert plan(d, None).usd_per_host_gib_hour is None  # no price: no $ figure, the GiB still said
    with pytest.raises(ConfigError, match="exceeds the host memory"):
        resolve_deployment(_dep(kv_offloading_size=HOST_MEMORY_GIB_PER_GPU + 1), PerfHardware())


def test_constant_workload_is_deterministic() -> None:
    wl = constant_workload(n=10, rate=2.0)
    assert wl.trace(4.0, 0).df["arrival_time_s"].tolist() == pytest.approx(
        [0.25 * (i + 1) for i in range(10)]
    )


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8},
        {"block_size": 32, "max_num_seqs": 64, "max_num_batched_tokens": 4096},
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
    ],
)
def test_a_trial_is_the_deployment_spec_resolved(kw: dict[str, Any]) -> None:
    """A trial's engine config, KV blocks and step times are ``servesim.spec.resolve``'s for the
    same ``DeploymentSpec`` (what ``simulate --model --gpu --tp`` runs), and its KV blocks are the
    memory model's (``kv_capacity``) for the trial's values: one path, one formula."""
    from servesim.perf import kv_capacity
    from servesim.spec import DeploymentSpec, resolve

    d = _dep(**kw)
    hw = PerfHardware()
    cfg, res = resolve_deployment(d, hw)
    spec = DeploymentSpec(
        model="llama-3.1-8b",
        gpu="h100",
        tp=d.tensor_parallel_size,
        gpu_memory_utilization=d.gpu_memory_utilization,
        replicas=d.replicas,
        engine=d.engine_keys(),
    )
    assert d.spec(hw) == spec
    direct = resolve(spec)
    assert cfg == direct.config == d.engine_config(cfg.num_gpu_blocks)
    assert res.step_time.model_dump() == direct.step_time.model_dump()
    cap = kv_capacity(
        "llama-3.1-8b",
        "h100",
        d.tensor_parallel_size,
        gpu_memory_utilization=d.gpu_memory_utilization,
        block_size=d.block_size,
        max_num_batched_tokens=d.max_num_batched_tokens,
        max_num_seqs=d.max_num_seqs,
        max_model_len=d.max_model_len,
    )
    assert cfg.num_gpu_blocks == cap.num_gpu_blocks
    # the blocks override and a fixed step-time model lay their blocks over the same spec
    fixed = PerfHardware(num_gpu_blocks=1001)
    assert resolve_deployment(d, fixed)[0].num_gpu_blocks == 1 + 1000 * 16 // d.block_size
    if d.tensor_parallel_size == 1:
        lin, lres = resolve_deployment(d, FixedHardware(LinearStepTime(), 2001))
        assert lin == d.engine_config(1 + 2000 * 16 // d.block_size) and lres.step_time == LinearStepTime()
