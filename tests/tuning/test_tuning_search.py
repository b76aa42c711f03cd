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
    Deployment,
    FixedHardware,
    PercentileSLO,
    TuneResult,
    TuneSettings,
    Workload,
    space_from_mapping,
    tune,
)
from servesim.tuning.storage import study_storage

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


def test_impossible_combinations_are_never_sampled() -> None:
    wl = poisson_workload(n=120)  # max_model_len 1801: chunking off needs a 1801-token budget
    res = _tune(wl, 12)
    assert res.n_pruned == 0 and res.n_complete == 12 and not res.invalid_reasons
    unchunked = [t.params for t in res.trials if not t.params["enable_chunked_prefill"]]
    assert unchunked, "chunked prefill off is still searched"
    for p in unchunked:
        assert p["max_num_batched_tokens"] >= 1801 and p["long_prefill_token_threshold"] == 0
    for t in res.trials:
        assert t.params["max_num_batched_tokens"] >= t.params["max_num_seqs"]
        if t.feasible:  # feasible ones meet the SLO on every seed
            assert t.outcome is not None and not t.outcome.violations
            assert t.outcome.ttft_p99_ms is not None and t.outcome.ttft_p99_ms.max <= 400


def test_the_grid_holds_exactly_the_valid_combinations() -> None:
    sp = space_from_mapping(
        {
            **SMALL_SPACE,
            "enable_prefix_caching": [True],
            "gpu_memory_utilization": [0.9],
            "tensor_parallel_size": [1],
        }
    )
    grid = sp.grid(1801, max_gpus=1)
    assert len(grid) == sp.size(1801, max_gpus=1) == len({str(sorted(g.items())) for g in grid})
    # chunked: 3 budgets x 3 seqs (all <= the budget) x 2 thresholds; unchunked: only 4096 (3 seqs)
    flags = 3 * 3 * 2 + 3
    assert len(grid) == flags * 2 * 2  # x block sizes x timeouts; replicas 2 exceed the 1-GPU budget
    for g in grid:
        d = Deployment.model_validate({**g, "max_model_len": 1801})  # vLLM would start every one
        assert d.gpus == 1
    assert sp.size(1801, max_gpus=1) == len(sp.grid(1801, max_gpus=1))


def test_a_small_space_is_searched_exhaustively() -> None:
    wl = poisson_workload(n=120)
    small = {
        **SMALL_SPACE,
        "max_num_seqs": [16, 64],
        "block_size": [16],
        "queue_timeout_s": [None],
        "long_prefill_token_threshold": [0],
        "replicas": [1, 2],
    }
    res = tune(
        wl,
        FixedHardware(LinearStepTime(), 3000),
        SLO,
        space=space_from_mapping(small),
        settings=TuneSettings(n_trials=5, seeds=[0]),
        executor="local",
        baseline=Deployment(
            max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=wl.default_max_model_len()
        ),
    )
    # 2 seqs x (3 chunked budgets + the one unchunked budget >= max_model_len) x prefix on/off x 2 replicas
    assert res.space_size == 2 * 4 * 2 * 2
    assert res.exhaustive and res.space_size == res.n_trials  # every combination, whatever --trials says
    assert res.trials[0].params == res.baseline.params if res.baseline else False
    assert "every one is evaluated" in res.budget_notes[0]


def test_the_baseline_and_the_cheapest_candidates_come_first() -> None:
    wl = poisson_workload(n=120)
    current = Deployment(max_num_seqs=48, max_num_batched_tokens=3000, replicas=2, max_model_len=1801)
    res = _tune(wl, 6, baseline=current)
    first = res.trials[0].params
    assert first["max_num_seqs"] == 48 and first["max_num_batched_tokens"] == 3000 and first["replicas"] == 2
    assert res.baseline is not None and res.baseline.number == 0
    roles = [(s.role, s.number) for s in res.seeded]
    assert roles[0] == ("baseline", 0)
    cheapest = next(t for t in res.trials if t.number == dict(roles)["cheapest"])
    assert cheapest.params["replicas"] == 1 and cheapest.params["max_num_seqs"] == 48  # its flags, 1 GPU
    assert "48" in res.space["max_num_seqs"]  # the space was widened to hold the user's setting
    assert any("valid combinations" in n for n in res.budget_notes)


def test_no_feasible_trial_comes_with_what_each_trial_broke() -> None:
    wl = poisson_workload(n=120, rate=40.0)
    tight = PercentileSLO.parse("ttft_p99_ms=5,tpot_p99_ms=40")
    res = tune(
        wl,
        FixedHardware(LinearStepTime(), 3000),
        tight,
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(n_trials=4, seed=0, n_startup_trials=2, seeds=[0]),
        executor="local",
    )
    assert res.best is None and res.n_feasible == 0
    assert len(res.infeasible) == res.n_complete and res.nearest_miss == res.infeasible[0]
    for row in res.infeasible:
        trial = next(t for t in res.trials if t.number == row.number)
        assert trial.outcome is not None and trial.outcome.ttft_p99_ms is not None
        ttft = next(b for b in row.breaches if b.constraint == "ttft_p99")
        assert ttft.measured == trial.outcome.ttft_p99_ms.max and ttft.limit == 5
        assert abs(ttft.excess - (ttft.measured / 5 - 1)) < 1e-9
        assert row.distance == max(b.excess for b in row.breaches)
    assert [r.distance for r in res.infeasible] == sorted(r.distance for r in res.infeasible)


def test_same_seed_same_study_and_best_trial() -> None:
    wl = poisson_workload(n=120)
    a, b = _tune(wl, 6, seed=3), _tune(wl, 6, seed=3)
    assert _signature(a) == _signature(b)
    assert a.best is not None and b.best is not None and a.best.number == b.best.number
    assert a.ranked == b.ranked
    c = _tune(wl, 6, seed=4)
    assert [t.params for t in c.trials] != [t.params for t in a.trials]


def _location(kind: str, folder: Path, stem: str) -> str:
    """A study's --storage: a journal file (servesim tune's default) or a SQLite URL."""
    return str(folder / f"{stem}.journal") if kind == "journal" else f"sqlite:///{folder / stem}.db"


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_study_resumes_from_its_storage(tmp_path: Path, kind: str) -> None:
    wl = poisson_workload(n=120)
    url = _location(kind, tmp_path, "study")
    first = _tune(wl, 2, storage=url)
    second = _tune(wl, 2, storage=url)
    assert first.study_name == second.study_name and second.n_trials == 4
    assert _signature(second)[:2] == _signature(first)
    study = optuna.load_study(study_name=second.study_name, storage=study_storage(url))
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
@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_two_worker_processes_share_one_study(tmp_path: Path, kind: str) -> None:
    url = _location(kind, tmp_path, "shared")
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
    study = optuna.load_study(study_name="shared", storage=study_storage(url))
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
