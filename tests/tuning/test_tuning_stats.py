"""The queue-instability test, the t distribution behind it, and spreads over seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tuning_helpers import poisson_workload

from servesim.engine import LinearStepTime
from servesim.tuning import Deployment, FixedHardware, QueueTestSettings, Spread, queue_trend, run_once

#: Student's t survival function in closed form for 1 and 2 degrees of freedom.
CLOSED_T_SF = {
    1: lambda t: 0.5 - math.atan(t) / math.pi,
    2: lambda t: 0.5 - t / (2.0 * math.sqrt(t * t + 2.0)),
}


@given(depth=st.lists(st.floats(0, 50), min_size=12, max_size=12), df=st.sampled_from([1, 2]))
@settings(max_examples=200, deadline=None)
def test_slope_t_test_p_value_is_the_closed_form(depth: list[float], df: int) -> None:
    """With 3 (4) batch means the slope's t statistic has 1 (2) degrees of freedom, whose tail
    has a closed form; the statistic itself is the ordinary least-squares one (linregress)."""
    from scipy import stats as sps  # here, not at collection: each xdist worker would import it

    batches = df + 2
    n = 3 * batches
    arrival = np.arange(n, dtype=np.float64)
    y = np.asarray(depth[:n])
    groups = np.array_split(np.arange(n), batches)
    reg = sps.linregress([arrival[g].mean() for g in groups], [y[g].mean() for g in groups])
    assume(reg.slope != 0 and reg.stderr > 1e-6 * max(1.0, float(np.abs(y).max())))
    trend = queue_trend(arrival, y, QueueTestSettings(warmup_fraction=0, batches=batches, min_requests=3))
    assert trend.batches == batches
    assert trend.t_stat == pytest.approx(reg.slope / reg.stderr, rel=1e-9)
    assert trend.p_value == pytest.approx(CLOSED_T_SF[df](trend.t_stat), rel=1e-9, abs=1e-15)


def test_linear_growth_is_unstable_and_noise_is_not() -> None:
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 100, 1000))  # 10 arrivals per second
    growing = 0.5 * t + rng.normal(0, 3, t.size)  # queue grows 0.5/s: 5 % overload
    flat = np.abs(rng.normal(0, 3, t.size))
    up = queue_trend(t, growing)
    assert up.unstable and up.slope == pytest.approx(0.05, rel=0.1) and up.p_value < 1e-6
    assert not queue_trend(t, flat).unstable
    # A significant but tiny growth (0.1 % overload) is a transient, not an instability.
    tiny = 0.01 * t + rng.normal(0, 0.01, t.size)
    trend = queue_trend(t, tiny)
    assert trend.p_value < 1e-6 and not trend.unstable


def test_too_few_requests_give_no_verdict() -> None:
    t = np.arange(10.0)
    assert not queue_trend(t, t * 5).unstable
    assert queue_trend(t, t * 5, QueueTestSettings(min_requests=5, batches=3)).unstable


def test_detector_flags_an_overloaded_run_and_not_a_stable_one() -> None:
    """One replica: Poisson at half its capacity is STABLE, at twice it QUEUE_SATURATED."""
    wl = poisson_workload(n=400)
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment(max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=wl.default_max_model_len())
    # Capacity: about 16 decodes per ~8 ms step, 60 tokens each -> roughly 25-30 req/s.
    low = run_once(wl.trace(8.0, 0), d, hw)
    high = run_once(wl.trace(60.0, 0), d, hw)
    assert not low.queue.unstable and low.status == "STABLE"
    assert high.queue.unstable and high.status == "QUEUE_SATURATED"
    assert high.queue.slope > 0.3  # the server completes well under half of what arrives
    assert high.throughput_rps < 40


def test_spread() -> None:
    s = Spread.of([1.0, 2.0, 3.0])
    assert (s.mean, s.min, s.max, s.n) == (2.0, 1.0, 3.0, 3) and s.std == pytest.approx(1.0)
    assert Spread.of([]).n == 0 and Spread.of([5.0]).std == 0.0
