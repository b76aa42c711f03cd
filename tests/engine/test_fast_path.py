"""The fast path (lazy decode group + multi-step decode stretches) changes nothing: on random
traces and configs it gives exactly the naive loop's per-request records, per-step time series
and summary, while the naive loop checks every conservation invariant after every step."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, step_models, traces

from servesim.engine import simulate


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_equals_naive_loop(data: st.DataObject) -> None:
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    model = data.draw(step_models)
    naive = simulate(trace, config, model, fast=False, check_invariants=True)
    fast = simulate(trace, config, model, fast=True, check_invariants=data.draw(st.booleans()))
    pd.testing.assert_frame_equal(fast.requests, naive.requests)
    pd.testing.assert_frame_equal(fast.steps, naive.steps)
    pd.testing.assert_frame_equal(fast.preemptions, naive.preemptions)
    assert fast.summary == naive.summary
