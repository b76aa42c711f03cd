"""The saturation search: bisection agrees with a brute-force scan, KV blocks only help, statuses."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuning_helpers import constant_workload, poisson_workload

from servesim.engine import LinearStepTime
from servesim.traces import FixedLength, GeneratorSpec, PoissonArrivals
from servesim.tuning import (
    Deployment,
    FixedHardware,
    PercentileSLO,
    SaturationSettings,
    Workload,
    find_saturation,
    scan_rates,
)


def test_bisection_is_within_a_few_percent_of_a_brute_force_scan() -> None:
    wl = poisson_workload(n=250)
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment(max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=wl.default_max_model_len())
    slo = PercentileSLO.parse("ttft_p99_ms=300,tpot_p99_ms=40")
    seeds = [0, 1]
    rtol = 0.03
    rep = find_saturation(
        wl,
        d,
        hw,
        slo,
        target_rate=5.0,
        settings=SaturationSettings(seeds=seeds, rtol=rtol, curve_fractions=()),
    )
    assert rep.saturation_rps is not None and rep.goodput_knee_rps is not None
    assert rep.max_stable_rps == pytest.approx(rep.saturation_rps / (1 + rtol))
    # Brute force: every rate from well below to well above, 2 % apart (a finer grid than the search's).
    lo, hi = 0.5 * rep.goodput_knee_rps, 1.3 * rep.saturation_rps
    n = math.ceil(math.log(hi / lo) / math.log(1.02))
    grid = [lo * 1.02**i for i in range(n + 1)]
    points = scan_rates(wl, d, hw, grid, slo, seeds=seeds)
    first_unstable = next(p.rate_rps for p in points if p.queue_saturated)
    last_ok = next(a.rate_rps for a, b in itertools.pairwise(points) if not b.slo_ok)
    assert points[0].slo_ok and not points[0].queue_saturated
    assert rep.saturation_rps == pytest.approx(first_unstable, rel=0.05)
    assert rep.goodput_knee_rps == pytest.approx(last_ok, rel=0.05)
    # The report's own points agree with the scan where they overlap in verdict.
    assert all(p.slo_ok for p in rep.points if p.rate_rps <= rep.goodput_knee_rps)
    assert all(p.queue_saturated for p in rep.points if p.rate_rps >= rep.saturation_rps)


@given(blocks=st.lists(st.integers(20, 400), min_size=3, max_size=3, unique=True))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_more_kv_blocks_never_lower_the_saturation_rate(blocks: list[int]) -> None:
    """Deterministic traffic (even arrivals, 200 + 50 tokens: 16 blocks a request), KV-bound."""
    wl = constant_workload(n=150, rate=5.0, prompt=200, output=50)
    d = Deployment(max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=wl.default_max_model_len())
    st_ = SaturationSettings(seeds=[0], rtol=0.05, curve_fractions=(), min_rate=0.1, max_rate=500)
    rates = []
    for b in sorted(blocks):
        rep = find_saturation(wl, d, FixedHardware(LinearStepTime(), b), target_rate=5.0, settings=st_)
        assert rep.saturation_rps is not None
        rates.append(rep.saturation_rps)
    assert rates == sorted(rates), f"blocks {sorted(blocks)} -> saturation {rates}"


def test_status_per_rate() -> None:
    """Small KV without full-sequence reservation: idle, thrashing, then saturated."""
    wl = Workload.from_spec(
        GeneratorSpec(
            num_requests=100,
            arrival=PoissonArrivals(rate=1.0),
            prompt=FixedLength(value=200),
            output=FixedLength(value=200),
        )
    )
    d = Deployment(
        max_num_seqs=16,
        max_num_batched_tokens=512,
        max_model_len=wl.default_max_model_len(),
        scheduler_reserve_full_isl=False,
    )
    hw = FixedHardware(LinearStepTime(), 60)
    low, mid, high = scan_rates(wl, d, hw, [0.1, 1.0, 5.0], seeds=[0])
    assert low.status == "STABLE" and low.preemptions_per_request.mean == 0
    assert mid.status == "KV_THRASHING" and not mid.queue_saturated
    assert mid.preemptions_per_request.mean > 0.1 and mid.kv_exhaustion_events.mean > 0
    assert high.status == "QUEUE_SATURATED" and high.queue_saturated and high.kv_thrashing


def test_report_headroom_and_curve(linear_hw: FixedHardware) -> None:
    wl = poisson_workload(n=200)
    d = Deployment(max_num_seqs=32, max_num_batched_tokens=1024, max_model_len=wl.default_max_model_len())
    rep = find_saturation(
        wl, d, linear_hw, target_rate=4.0, settings=SaturationSettings(seeds=[0], rtol=0.05)
    )
    assert rep.goodput_knee_rps is None and rep.slo is None  # no SLO: only the saturation rate
    assert rep.status_at_target == "STABLE" and rep.saturation_rps is not None
    assert rep.headroom == pytest.approx(rep.saturation_rps / 4.0 - 1)
    rates = [p.rate_rps for p in rep.points]
    assert rates == sorted(rates) and rates[0] <= 4.0
    # The curve points at fixed fractions of the saturation rate are there.
    for f in (0.25, 0.5, 0.75):
        assert any(abs(r / (rep.saturation_rps * f) - 1) < 0.05 for r in rates)
    assert rep.num_simulations == len(rep.points)
