"""The search's faster paths give what the plain path gives, byte for byte.

* a trial whose runs are spread over the workers (``search.evaluate_batch``) has the outcome
  ``jobs.evaluate_trial`` computes in one job;
* a run or probe found in an executor's cache equals a fresh simulation of it;
* a SQLite study is opened in write-ahead-log mode (its commits do not wait for the disk).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tuning_helpers import poisson_workload

from servesim.tuning import EvalSettings, PercentileSLO, PerfHardware, TuneSettings
from servesim.tuning.deployment import vllm_default_deployment
from servesim.tuning.executors import LocalExecutor
from servesim.tuning.jobs import EvalContext, ProbeJob, RunJob, TrialJob, evaluate_trial
from servesim.tuning.search import evaluate_batch, knob_values, rdb_storage, trial_spec


def _ctx() -> EvalContext:
    wl = poisson_workload(200, 5.0)
    return EvalContext(
        wl, PerfHardware(), PercentileSLO.parse("ttft_p99_ms=2000,tpot_p99_ms=80"), EvalSettings()
    )


def _trials(ctx: EvalContext) -> list[TrialJob]:
    spec = trial_spec(ctx.workload, TuneSettings(seeds=[0, 1]))
    mml = int(spec.fixed["max_model_len"])
    base = knob_values(vllm_default_deployment(ctx.hardware, mml), ctx.hardware)
    other = {**base, "max_num_seqs": 64, "max_num_batched_tokens": 2048}
    bad = {**base, "max_num_seqs": 4096, "max_num_batched_tokens": 256}  # budget below the seqs
    return [TrialJob(0, base, spec), TrialJob(1, other, spec), TrialJob(2, bad, spec)]


def test_a_trial_spread_over_jobs_has_the_outcome_of_one_job() -> None:
    ctx = _ctx()
    trials = _trials(ctx)
    spread = evaluate_batch(LocalExecutor(ctx), ctx, trials)
    whole = [evaluate_trial(ctx, t) for t in trials]
    assert [o.model_dump_json() for o in spread] == [o.model_dump_json() for o in whole]
    assert [o.valid for o in spread] == [True, True, False]


def test_a_cached_run_equals_a_fresh_one_byte_for_byte() -> None:
    ctx = _ctx()
    d = vllm_default_deployment(ctx.hardware, ctx.workload.default_max_model_len())
    rate = ctx.workload.base_rate
    assert rate is not None
    jobs = [RunJob(d, rate, 0), ProbeJob(d, rate * 50, 0)]
    ex = LocalExecutor(ctx)
    first = ex.map(jobs)
    again = ex.map([*jobs, RunJob(d, rate, 0)])
    assert ex.hits == 3  # nothing simulated the second time
    fresh = LocalExecutor(ctx).map(jobs)
    assert again[0].model_dump_json() == fresh[0].model_dump_json() == first[0].model_dump_json()
    assert again[2].model_dump_json() == fresh[0].model_dump_json()
    assert again[1] == fresh[1] == first[1]
    # Each caller gets its own copy: changing one does not change what the cache gives next.
    again[0].slo_violations.append("changed")
    assert ex.map(jobs[:1])[0].model_dump_json() == fresh[0].model_dump_json()
    # The probe runs without a queue timeout, so a deployment differing only there shares it.
    timed = d.model_copy(update={"queue_timeout_s": 5.0})
    assert ex.map([ProbeJob(timed, rate * 50, 0)]) == [fresh[1]]
    assert ex.hits == 5


def test_a_sqlite_study_is_in_write_ahead_log_mode(tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    storage = rdb_storage(f"sqlite:///{db}")
    storage.get_all_studies()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with storage.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    storage.remove_session()
    storage.engine.dispose()
    assert rdb_storage("sqlite:///:memory:").get_all_studies() == []


def test_the_lean_results_a_trial_builds_measure_what_the_full_ones_do() -> None:
    """A trial leaves out the pooled ITL and, on a fleet, the per-replica summaries (a third of
    its CPU); what it measures from the rest is the full result's, byte for byte, and the
    per-replica grouping of a fleet's steps is pandas' groupby."""
    import numpy as np

    from servesim.cluster import Replica, simulate_cluster
    from servesim.engine import simulate
    from servesim.tuning.deployment import resolve_deployment
    from servesim.tuning.evaluate import kv_blocked_steps, kv_exhaustion, measure, replica_rows, waiting_at

    ctx = _ctx()
    trace = ctx.workload.trace(ctx.workload.base_rate, 0)
    d = vllm_default_deployment(ctx.hardware, ctx.workload.default_max_model_len())
    config, res = resolve_deployment(d, ctx.hardware)
    slo = ctx.slo.request_slo()

    def measured(summary, requests, steps) -> str:  # type: ignore[no-untyped-def]
        return measure(
            summary, requests, steps, config, ctx.slo, ctx.settings, seed=0, rate=None
        ).model_dump_json()

    full = simulate(trace, config, res.step_time, slo=slo)
    lean = simulate(trace, config, res.step_time, slo=slo, pooled_itl=False)
    assert full.summary.itl_ms.count > 0 and lean.summary.itl_ms.count == 0
    assert lean.summary.model_copy(update={"itl_ms": full.summary.itl_ms}) == full.summary
    assert measured(lean.summary, lean.requests, lean.steps) == measured(
        full.summary, full.requests, full.steps
    )

    fleet = [Replica(f"r{i}", config, res.step_time) for i in (2, 0, 1)]  # names out of order
    cfull = simulate_cluster(trace, fleet, slo=slo)
    clean = simulate_cluster(trace, fleet, slo=slo, pooled_itl=False, replica_summaries=False)
    assert set(cfull.summary.replicas) == {"r0", "r1", "r2"} and not clean.summary.replicas
    assert (
        clean.summary.cluster.model_copy(update={"itl_ms": cfull.summary.cluster.itl_ms})
        == cfull.summary.cluster
    )
    assert measured(clean.summary.cluster, clean.requests, clean.steps) == measured(
        cfull.summary.cluster, cfull.requests, cfull.steps
    )
    steps = cfull.steps
    by_groupby = [g.index.to_numpy() for _, g in steps.groupby("replica", sort=True)]
    assert [np.asarray(r).tolist() for r in replica_rows(steps)] == [g.tolist() for g in by_groupby]
    arrival = cfull.requests["arrival_s"].to_numpy()
    expect = np.zeros(len(arrival))
    for _, g in steps.groupby("replica", sort=True):
        idx = np.searchsorted(g["start_s"].to_numpy(), arrival, side="right") - 1
        expect += np.where(idx >= 0, g["num_waiting"].to_numpy(dtype=float)[np.clip(idx, 0, None)], 0.0)
    assert waiting_at(arrival, steps).tolist() == expect.tolist()
    events, blocked_s = 0, 0.0
    for _, g in steps.groupby("replica", sort=True):
        b = kv_blocked_steps(g, config)
        events += int(b[0]) + int(np.count_nonzero(b[1:] & ~b[:-1]))
        blocked_s += float(g["duration_s"].to_numpy()[b].sum())
    assert kv_exhaustion(steps, config) == (events, blocked_s / float(steps["duration_s"].sum()))
