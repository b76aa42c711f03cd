"""The sweep's throughput (``evaluate.steady_throughput``): below capacity it equals the offered
rate (closed form), above it the service rate, and it never reads above the offered rate (issue
30: a 200-request trace drained in one lockstep batch read 501 req/s at 134 req/s offered; the
10th-90th percentile window is now capped at the offered rate)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tuning_helpers import constant_workload, poisson_workload

from servesim.engine import LinearStepTime
from servesim.tuning import Deployment, FixedHardware, run_once
from servesim.tuning.evaluate import steady_throughput


def frame(arrival: list[float] | np.ndarray, finish: list[float] | np.ndarray, out: int = 10) -> pd.DataFrame:
    a = np.asarray(arrival, dtype=np.float64)
    return pd.DataFrame({"arrival_s": a, "finish_s": np.asarray(finish, dtype=np.float64), "num_output": out})


def offered(arrival: np.ndarray) -> float:
    return (len(arrival) - 1) / float(arrival.max() - arrival.min())


def test_a_constant_latency_gives_exactly_the_offered_rate() -> None:
    """Closed form: n arrivals 1/lambda apart, each finished L later: (n - 1) / span = lambda."""
    lam, latency = 8.0, 0.75
    a = np.arange(400) / lam
    rps, tok = steady_throughput(frame(a, a + latency))
    assert rps == pytest.approx(lam, rel=1e-12)
    assert tok == pytest.approx(10 * lam, rel=1e-12)


def test_a_lockstep_drain_does_not_read_above_the_offered_rate() -> None:
    """200 arrivals over 1.49 s (134 req/s), every one finished in the last 0.3 s of a 2.3 s run:
    the 10th-90th percentile window alone reads 0.8 x 199 / 0.24 s = 663 req/s."""
    a = np.arange(200) / 134.0
    f = np.linspace(2.0, 2.3, 200)
    rps, _ = steady_throughput(frame(a, f))
    assert rps <= offered(a)
    lo, hi = int(0.1 * 199), int(0.9 * 199)
    assert (hi - lo) / (f[hi] - f[lo]) > 4 * offered(a)  # what the central window made of it


@given(
    gaps=st.lists(st.floats(0.001, 5.0), min_size=2, max_size=60),
    latencies=st.lists(st.floats(0.0, 30.0), min_size=61, max_size=61),
)
@settings(max_examples=300, deadline=None)
def test_never_above_the_offered_rate(gaps: list[float], latencies: list[float]) -> None:
    """Whatever the arrivals and the latencies: finishes cannot outrun arrivals."""
    a = np.concatenate([[0.0], np.cumsum(gaps)])
    rps, _ = steady_throughput(frame(a, a + np.asarray(latencies[: len(a)])))
    assert rps <= offered(a) * (1 + 1e-9)


def test_a_simulated_run_under_capacity_reads_the_offered_rate_and_over_it_the_service_rate() -> None:
    wl = poisson_workload(n=400)
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment(max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=wl.default_max_model_len())
    low = run_once(wl.trace(8.0, 0), d, hw)  # capacity about 25-30 req/s
    assert low.throughput_rps == pytest.approx(low.offered_rps, rel=0.03)
    high = run_once(wl.trace(60.0, 0), d, hw)
    assert high.throughput_rps < 0.6 * high.offered_rps
    steady = constant_workload(n=300, rate=4.0)
    run = run_once(steady.trace(None, 0), d, hw)
    assert run.throughput_rps == pytest.approx(4.0, rel=0.01)
