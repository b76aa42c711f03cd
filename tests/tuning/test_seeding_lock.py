"""Workers that open and seed one SQLite study at the same moment must not enqueue a seed twice
(optuna's skip_if_exists reads then writes; without the lock about half of such races left a
duplicate trial waiting for ever)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import optuna
import pytest

from servesim.tuning.search import rdb_storage, seeding_lock


def _seed(url: str, barrier: mp.synchronize.Barrier) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    barrier.wait()
    with seeding_lock(url):
        study = optuna.create_study(storage=rdb_storage(url), study_name="s", load_if_exists=True)
        for x in range(3):
            study.enqueue_trial({"x": x}, skip_if_exists=True)


@pytest.mark.slow
def test_simultaneous_seeding_enqueues_each_seed_once(tmp_path: Path) -> None:
    for attempt in range(6):
        url = f"sqlite:///{tmp_path / f'race{attempt}.db'}"
        rdb_storage(url)  # the schema exists before the race, as after the first worker
        barrier = mp.Barrier(2)
        workers = [mp.Process(target=_seed, args=(url, barrier)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
            assert w.exitcode == 0
        trials = optuna.load_study(study_name="s", storage=url).trials
        assert sorted(t.params["x"] if t.params else t.system_attrs["fixed_params"]["x"] for t in trials) == [
            0,
            1,
            2,
        ]


def test_only_sqlite_files_are_locked(tmp_path: Path) -> None:
    with seeding_lock(None), seeding_lock("sqlite:///:memory:"), seeding_lock("postgresql://h/db"):
        pass
    with seeding_lock(f"sqlite:///{tmp_path / 'a.db'}"):
        assert (tmp_path / "a.db.servesim-lock").exists()
