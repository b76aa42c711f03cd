"""The fast path (lazy decode group + multi-step decode stretches) changes nothing: on random
traces and configs it gives exactly the naive loop's per-request records, per-step time series
and summary, while the naive loop checks every conservation invariant after every step."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, connector_factories, examples, step_models, traces

from servesim.engine import ConstantStepTime, SimulationResult, simulate


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_equals_naive_loop(data: st.DataObject) -> None:
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    model = data.draw(step_models)
    naive_log: list[dict[str, object]] = []
    fast_log: list[dict[str, object]] = []
    naive = simulate(trace, config, model, fast=False, check_invariants=True, step_log=naive_log.append)
    log = data.draw(st.booleans())  # results must not depend on whether steps are logged
    fast = simulate(
        trace,
        config,
        model,
        fast=True,
        check_invariants=data.draw(st.booleans()),
        step_log=fast_log.append if log else None,
    )
    if log:
        assert fast_log == naive_log  # the --step-log a user compares with vLLM, line for line
    pd.testing.assert_frame_equal(fast.requests, naive.requests)
    pd.testing.assert_frame_equal(fast.steps, naive.steps)
    pd.testing.assert_frame_equal(fast.preemptions, naive.preemptions)
    assert fast.summary == naive.summary
    shared = trace.df["prefix_group"].notna().any() or trace.df["hash_ids"].notna().any()
    check_accounting(naive, config.max_num_batched_tokens, config.max_num_seqs, exact=not shared)


def check_accounting(result: SimulationResult, budget: int, max_seqs: int, exact: bool) -> None:
    """Limits hold in every step, and every token is accounted for exactly once."""
    steps, req = result.steps, result.requests
    assert (steps["num_tokens"] <= budget).all()
    assert ((steps["num_tokens"] > 0) | (steps["num_preempted"] > 0)).all()  # empty only if it preempted
    assert (steps["num_running"] <= max_seqs).all()
    done = req["outcome"].isin(["finished", "finished_max_model_len"])
    assert (req.loc[done, "num_output"] <= req.loc[done, "output_len"]).all()
    assert (
        req.loc[req["outcome"] == "finished", "num_output"]
        == req.loc[req["outcome"] == "finished", "output_len"]
    ).all()
    # Computed tokens: every prompt token and every fed-back output once, plus recomputation.
    fed = (req["prompt_len"] + (req["num_output"] - 1).clip(lower=0)).where(done, 0).sum()
    lost = result.preemptions["lost_tokens"].sum()
    computed = steps["num_tokens"].sum()
    if exact:  # no shared content: cache hits are the request's own blocks, so this is exact
        assert computed == fed - req["prefix_hit_tokens"].sum() + req["recomputed_tokens"].sum()
    else:
        assert computed + req["prefix_hit_tokens"].sum() + req["reused_tokens"].sum() >= fed
    # What a preemption discarded is either recovered from the cache or computed again.
    assert req["reused_tokens"].sum() + req["recomputed_tokens"].sum() == lost
    assert (req[["num_output", "num_preemptions", "recomputed_tokens", "reused_tokens"]] >= 0).all().all()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_equals_naive_loop_with_a_kv_connector(data: st.DataObject) -> None:
    """With CPU offload or P/D the fast path gives the plain loop's records, step log and
    transfer figures exactly (the plain loop checking every invariant after every step)."""
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    step_s = data.draw(st.sampled_from([0.015625, 0.01]))
    make = data.draw(connector_factories(trace, config, step_s))
    model = ConstantStepTime(step_time_s=step_s) if data.draw(st.booleans()) else data.draw(step_models)
    naive_log: list[dict[str, object]] = []
    fast_log: list[dict[str, object]] = []
    conn_naive, conn_fast = make(), make()
    naive = simulate(
        trace,
        config,
        model,
        fast=False,
        check_invariants=True,
        step_log=naive_log.append,
        kv_connector=conn_naive,
    )
    log = data.draw(st.booleans())
    fast = simulate(
        trace,
        config,
        model,
        fast=True,
        check_invariants=data.draw(st.booleans()),
        step_log=fast_log.append if log else None,
        kv_connector=conn_fast,
    )
    if log:
        assert fast_log == naive_log
    pd.testing.assert_frame_equal(fast.requests, naive.requests)
    pd.testing.assert_frame_equal(fast.steps, naive.steps)
    pd.testing.assert_frame_equal(fast.preemptions, naive.preemptions)
    assert fast.summary == naive.summary
    assert conn_fast.stats.as_dict() == conn_naive.stats.as_dict()
