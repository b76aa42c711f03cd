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
