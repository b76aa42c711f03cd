"""The Optuna study: invalid combinations pruned with reasons, reproducible, resumable, shared."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from tuning_helpers import SMALL_SPACE, poisson_workload

from servesim.engine import LinearStepTime
from servesim.tuning import (
    FixedHardware,
    PercentileSLO,
    TuneResult,
    TuneSettings,
    Workload,
    space_from_mapping,
    tune,
)

SLO = PercentileSLO.parse("ttft_p99_ms=400,tpot_p99_ms=40")


def _tune(wl: Workload, n: int, seed: int = 0, **kw: object) -> TuneResult:
    kw.setdefault("executor", "local")
    return tune(
        wl,
        FixedHardware(LinearStepTime(), 3000),
        SLO,
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(n_trials=n, seed=seed, n_startup_trials=4, seeds=[0]),
        **kw,  # type: ignore[arg-type]
    )


def _signature(res: TuneResult) -> list[tuple[int, str, dict[str, object], list[float] | None]]:
    return [(t.number, t.state, t.params, t.values) for t in res.trials]


def test_invalid_combinations_are_pruned_with_the_reason() -> None:
    wl = poisson_workload(n=120)  # max_model_len 1801: chunking off needs a 1801-token budget
    res = _tune(wl, 10)
    pruned = [t for t in res.trials if t.state == "PRUNED"]
    assert pruned and res.n_pruned == len(pruned) and res.n_complete + res.n_pruned == 10
    for t in pruned:
        assert t.invalid_reason and t.outcome is not None and not t.outcome.valid
        p = t.params
        if p["max_num_batched_tokens"] < p["max_num_seqs"]:
            assert "at least one token per sequence" in t.invalid_reason
        elif not p["enable_chunked_prefill"]:
            assert "max_model_len (1801)" in t.invalid_reason
    assert sum(r.count for r in res.invalid_reasons.values()) == len(pruned)
    # ... and Optuna records the reason on the trial itself.
    assert all(t.outcome is not None for t in res.trials)
    # Valid trials satisfy vLLM's rules; feasible ones meet the SLO on every seed.
    for t in res.trials:
        if t.feasible:
            assert t.outcome is not None and not t.outcome.violations
            assert t.outcome.ttft_p99_ms is not None and t.outcome.ttft_p99_ms.max <= 400


def test_same_seed_same_study_and_best_trial() -> None:
    wl = poisson_workload(n=120)
    a, b = _tune(wl, 6, seed=3), _tune(wl, 6, seed=3)
    assert _signature(a) == _signature(b)
    assert a.best is not None and b.best is not None and a.best.number == b.best.number
    assert a.ranked == b.ranked
    c = _tune(wl, 6, seed=4)
    assert [t.params for t in c.trials] != [t.params for t in a.trials]


def test_study_resumes_from_sqlite(tmp_path: Path) -> None:
    wl = poisson_workload(n=120)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = _tune(wl, 2, storage=url)
    second = _tune(wl, 2, storage=url)
    assert first.study_name == second.study_name and second.n_trials == 4
    assert _signature(second)[:2] == _signature(first)
    study = optuna.load_study(study_name=second.study_name, storage=url)
    assert len(study.trials) == 4 and all(t.user_attrs.get("outcome") for t in study.trials)
    # Another SLO is another study: it does not mix with this one.
    other = tune(
        wl,
        FixedHardware(LinearStepTime(), 3000),
        PercentileSLO.parse("ttft_p99_ms=100"),
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(n_trials=1, seeds=[0]),
        executor="local",
        storage=url,
    )
    assert other.study_name != first.study_name and other.n_trials == 1
    with pytest.raises(ValueError, match="created for another"):
        tune(
            wl,
            FixedHardware(LinearStepTime(), 3000),
            PercentileSLO.parse("ttft_p99_ms=100"),
            settings=TuneSettings(n_trials=1, seeds=[0]),
            executor="local",
            storage=url,
            study_name=first.study_name,
        )


WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {helpers!r})
    from tuning_helpers import SMALL_SPACE, poisson_workload
    from servesim.engine import LinearStepTime
    from servesim.tuning import FixedHardware, PercentileSLO, TuneSettings, space_from_mapping, tune
    res = tune(
        poisson_workload(n=120),
        FixedHardware(LinearStepTime(), 3000),
        PercentileSLO.parse("ttft_p99_ms=400,tpot_p99_ms=40"),
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(n_trials=2, seed={seed}, seeds=[0]),
        executor="local",
        storage={url!r},
        study_name="shared",
    )
    print(res.n_trials)
    """
)


@pytest.mark.slow
def test_two_worker_processes_share_one_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    helpers = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER.format(helpers=helpers, seed=seed, url=url)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    study = optuna.load_study(study_name="shared", storage=url)
    assert len(study.trials) == 4
    assert sorted(t.number for t in study.trials) == list(range(4))
    assert all(t.state.is_finished() for t in study.trials)


def test_pareto_front_is_feasible_and_non_dominated() -> None:
    wl = poisson_workload(n=120)
    res = tune(
        wl,
        FixedHardware(LinearStepTime(), 3000),
        SLO,
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(objective="pareto", n_trials=8, seeds=[0], population_size=4),
        executor="local",
    )
    assert res.directions == ["maximize", "minimize", "minimize"]
    front = res.pareto_front
    assert front and all(t.feasible and t.values is not None and len(t.values) == 3 for t in front)
    feasible = [t for t in res.trials if t.feasible]
    for t in front:
        assert t.values is not None
        for u in feasible:
            assert u.values is not None
            dominates = (
                u.values[0] >= t.values[0]
                and u.values[1] <= t.values[1]
                and u.values[2] <= t.values[2]
                and u.values != t.values
            )
            assert not dominates
    assert res.best is not None and res.best.number in {t.number for t in front}


@pytest.mark.slow
def test_process_pool_gives_the_local_study() -> None:
    wl = poisson_workload(n=120)
    local = _tune(wl, 2, seed=5, n_jobs=2)  # local runs batches of n_jobs as well
    pool = _tune(wl, 2, seed=5, executor="process", n_jobs=2)
    assert _signature(pool) == _signature(local)
