"""Where a study lives: Optuna's RDB storage (SQLite made fast and safe for several workers), the
lock workers take to seed a shared SQLite study, and ``open_study`` with its seeded sampler."""

from __future__ import annotations

import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial

from servesim.errors import InputError, shown
from servesim.io import file_lock
from servesim.tuning.jobs import Objective
from servesim.tuning.study import Direction, TuneSettings, directions

_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


def _constraints(trial: FrozenTrial) -> list[float]:
    return list(trial.user_attrs.get("constraints", [1.0]))


def _sampler_kwargs() -> dict[str, Any]:
    return {} if _SET_CONSTRAINT else {"constraints_func": _constraints}


def rdb_storage(url: str, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for ``url``. Workers that start together on a new SQLite file race to
    create its tables and schema version (one gets "table ... already exists" or a UNIQUE
    constraint failure): such a failure is retried, and the retry finds the schema made. SQLite
    waits up to 60 s for a lock before giving up."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    for attempt in range(attempts):
        try:
            storage = optuna.storages.RDBStorage(url, **kwargs)
            if url.startswith("sqlite") and _sqlite_file(url):
                fast_sqlite(storage.engine)
            return storage
        except Exception as exc:  # sqlalchemy's errors, wrapped or not
            text = str(exc)
            racing = ("already exists", "locked", "UNIQUE constraint failed", "IntegrityError")
            if attempt == attempts - 1 or not any(r in text for r in racing):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def fast_sqlite(engine: Any) -> None:
    """Write-ahead logging with ``synchronous=NORMAL`` on every connection to a SQLite study: a
    commit appends to the log without waiting for the disk to flush (an Optuna trial is some 20
    commits: its parameters, attributes, constraints and state, one each), readers and the
    writer no longer block each other, and the file stays consistent through a crash (the last
    commits may be lost, never half-written). Not for a database in memory (``_sqlite_file``)."""
    from sqlalchemy import event

    def pragmas(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    event.listen(engine, "connect", pragmas)
    engine.dispose()  # the connections made while creating the schema reconnect with them


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (None: in memory)."""
    from sqlalchemy.engine import make_url

    db = make_url(url).database
    return db if db and db != ":memory:" else None


def seeding_lock(storage: str | None) -> AbstractContextManager[None]:
    """Workers sharing a SQLite study take turns to open and seed it. Optuna's
    ``enqueue_trial(skip_if_exists=True)`` reads then writes, and SQLite has no row locks: two
    workers seeding together each enqueued the baseline, and the duplicate was left waiting for
    ever. A server database (PostgreSQL, MySQL) is not locked here."""
    if storage is None or not storage.startswith("sqlite"):
        return nullcontext()
    db = _sqlite_file(storage)
    return nullcontext() if db is None else file_lock(f"{db}.servesim-lock")


def open_study(
    storage: str | None,
    study_name: str,
    objective: Objective,
    seed: int,
    settings: TuneSettings,
    fingerprint: str,
) -> optuna.Study:
    """Create or load the study, with a sampler seeded by (seed, trials already stored)."""
    rdb: optuna.storages.BaseStorage | None = None
    existing = 0
    if storage is not None:
        rdb = rdb_storage(storage)
        probe = optuna.create_study(
            storage=rdb, study_name=study_name, directions=directions(objective), load_if_exists=True
        )
        if list(probe.directions) != [_direction(d) for d in directions(objective)]:
            raise InputError(
                f"study {shown(study_name)} in {storage} has other objectives; use another --study-name"
            )
        stored = probe.user_attrs.get("servesim_fingerprint")
        if stored is None:
            probe.set_user_attr("servesim_fingerprint", fingerprint)
        elif stored != fingerprint:
            raise InputError(
                f"study {shown(study_name)} in {storage} was created for another workload, SLO, space or "
                "objective; use another --study-name (or the same settings) to resume it"
            )
        existing = len(probe.get_trials(deepcopy=False))
    sampler_seed = int(np.random.SeedSequence([seed, existing]).generate_state(1)[0])
    sampler: optuna.samplers.BaseSampler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if objective == "goodput_per_gpu":
            sampler = optuna.samplers.TPESampler(
                seed=sampler_seed, n_startup_trials=settings.n_startup_trials, **_sampler_kwargs()
            )
        else:
            sampler = optuna.samplers.NSGAIISampler(
                seed=sampler_seed, population_size=settings.population_size, **_sampler_kwargs()
            )
    if rdb is None:
        study = optuna.create_study(study_name=study_name, directions=directions(objective), sampler=sampler)
        study.set_user_attr("servesim_fingerprint", fingerprint)
        return study
    return optuna.load_study(study_name=study_name, storage=rdb, sampler=sampler)


def _direction(name: Direction) -> optuna.study.StudyDirection:
    return (
        optuna.study.StudyDirection.MAXIMIZE if name == "maximize" else optuna.study.StudyDirection.MINIMIZE
    )


__all__ = ["fast_sqlite", "open_study", "rdb_storage", "seeding_lock"]
