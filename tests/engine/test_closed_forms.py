"""The engine against closed forms: a lone request's latency is the sum of its step times;
below capacity nothing queues; with one sequence slot and Poisson arrivals the mean queue time
is Pollaczek-Khinchine's; in overload the queue grows linearly at arrival minus service rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import trace_of

from servesim.engine import BatchComposition, ConstantStepTime, EngineConfig, LinearStepTime, simulate
from servesim.traces import (
    ConstantArrivals,
    FixedLength,
    GeneratorSpec,
    PoissonArrivals,
    UniformLength,
    generate_trace,
)

MODEL = LinearStepTime(base_s=5e-3, per_token_s=2e-5, per_decode_ctx_s=1e-7, per_prefill_attn_s=1e-9)


def test_lone_request_latency_is_the_sum_of_its_step_times() -> None:
    prompt, output, budget = 5000, 40, 2048
    trace = trace_of({"req_id": "x", "arrival_time_s": 3.0, "prompt_len": prompt, "output_len": output})
    result = simulate(trace, EngineConfig(max_num_batched_tokens=budget), MODEL)
    prefill = [MODEL.step_time(BatchComposition(0, 0, [(c, done)])) for c, done in ((2048, 0), (2048, 2048))]
    prefill.append(MODEL.step_time(BatchComposition(0, 0, [(904, 4096)])))
    decodes = [MODEL.step_time(BatchComposition(1, prompt + i + 1, [])) for i in range(output - 1)]
    row = result.requests.iloc[0]
    assert row["ttft_ms"] == pytest.approx(sum(prefill) * 1e3, rel=1e-12)
    assert row["e2e_ms"] == pytest.approx((sum(prefill) + sum(decodes)) * 1e3, rel=1e-12)
    assert row["tpot_ms"] == pytest.approx(sum(decodes) / (output - 1) * 1e3, rel=1e-12)
    assert row["queue_ms"] == 0.0
    assert result.summary.num_steps == 3 + output - 1


def test_below_capacity_with_deterministic_arrivals_nothing_queues() -> None:
    spec = GeneratorSpec(
        num_requests=300,
        arrival=ConstantArrivals(rate=2.0),
        prompt=FixedLength(value=700),
        output=FixedLength(value=20),
    )
    result = simulate(generate_trace(spec), EngineConfig(), MODEL)
    r = result.requests
    assert (r["queue_ms"] == 0.0).all()
    # Each request is alone: identical requests get identical latencies.
    assert r["ttft_ms"].max() - r["ttft_ms"].min() < 1e-9
    assert result.summary.max_waiting == 0


def test_one_slot_poisson_queue_matches_pollaczek_khinchine() -> None:
    """max_num_seqs=1 turns the replica into an M/G/1 queue: a request's service time is
    (prefill steps + outputs - 1) x step time, and the mean wait is λE[S²] / (2(1-ρ))."""
    step = 0.01
    budget = 512
    n = 40_000
    spec = GeneratorSpec(
        num_requests=n,
        seed=7,
        arrival=PoissonArrivals(rate=6.0, rescale=False),
        prompt=UniformLength(min=1, max=1500),
        output=UniformLength(min=1, max=20),
    )
    trace = generate_trace(spec)
    config = EngineConfig(max_num_seqs=1, max_num_batched_tokens=budget, enable_prefix_caching=False)
    result = simulate(trace, config, ConstantStepTime(step_time_s=step))
    p = trace.df["prompt_len"].to_numpy()
    o = trace.df["output_len"].to_numpy()
    service = (np.ceil(p / budget) + o - 1) * step
    lam = 6.0
    rho = lam * service.mean()
    assert 0.5 < rho < 0.8
    pk_wait = lam * np.mean(service**2) / (2 * (1 - rho))
    wait = result.requests["queue_ms"].to_numpy() / 1e3
    # Batch means (waits are autocorrelated): 40 batches, 99% confidence interval.
    batches = wait[: n - n % 40].reshape(40, -1).mean(axis=1)
    half_width = 2.708 * batches.std(ddof=1) / math.sqrt(40)
    assert abs(wait.mean() - pk_wait) < half_width + 1e-9, (wait.mean(), pk_wait, half_width)
    assert half_width < 0.15 * pk_wait  # and the bound is tight enough to mean something


def test_overload_grows_the_queue_linearly() -> None:
    spec = GeneratorSpec(
        num_requests=3000,
        seed=3,
        arrival=ConstantArrivals(rate=40.0),
        prompt=FixedLength(value=400),
        output=FixedLength(value=30),
    )
    config = EngineConfig(max_num_seqs=8, max_num_batched_tokens=1024, enable_prefix_caching=False)
    result = simulate(generate_trace(spec), config, ConstantStepTime(step_time_s=0.01))
    steps = result.steps
    t = steps["start_s"].to_numpy()
    q = steps["num_waiting"].to_numpy()
    busy = t < 3000 / 40.0  # while requests still arrive
    slope, intercept = np.polyfit(t[busy], q[busy], 1)
    fit = slope * t[busy] + intercept
    r2 = 1 - np.sum((q[busy] - fit) ** 2) / np.sum((q[busy] - q[busy].mean()) ** 2)
    service_rate = 8 / (30 * 0.01)  # 8 slots, each request holds one for ~30 steps
    assert r2 > 0.99
    assert slope == pytest.approx(40.0 - service_rate, rel=0.1)
    queue = result.requests["queue_ms"].to_numpy()
    assert np.all(np.diff(queue[::100]) > 0)  # every later request waits longer
