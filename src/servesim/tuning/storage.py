"""Where a study lives: a journal file (Optuna's ``JournalStorage``, ``servesim tune``'s default) or
an RDB URL (SQLite made fast and safe for several workers; PostgreSQL, MySQL), the lock workers take
to seed a shared study, and ``open_study`` with its seeded sampler.

Why a journal by default: a study is an append-only log of small operations (a trial's parameters,
attributes, constraints and state), which a journal appends as JSON lines under a file lock, while
SQLite runs each as an ORM session and a commit, re-reading the running trials on every ask: a
200-trial study's driver took 26.6 CPU-s with SQLite, 9.1 with the journal and 5.3 with nothing
stored (``benchmarks/tuning_speed.py --requests 2000 --storage ...``), time the workers wait
through between batches. Several
processes share a journal file as they share a SQLite file (the lock serialises appends; each
process replays what the others appended), and running the same command again resumes it."""

from __future__ import annotations

import json
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
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


def is_rdb_url(location: str) -> bool:
    """An RDB URL (``sqlite:///study.db``, ``postgresql://...``) rather than a journal file's path."""
    return "://" in location


def study_storage(location: str) -> optuna.storages.BaseStorage:
    """The storage ``location`` names: an RDB URL, else the path of a journal file."""
    return rdb_storage(location) if is_rdb_url(location) else journal_storage(location)


def check_journal(path: str) -> Path:
    """The journal file ``path`` names, refused in one line naming it if it cannot be one: a
    folder, a SQLite database given as a path, a file whose first line is not one of Optuna's
    journal operations. Checked before anything (a lock, an append) is written beside or to it."""
    target = Path(path).expanduser()
    try:
        if target.is_dir():
            raise InputError(f"--storage: {target} is a folder; give a journal file or an RDB URL")
        if not target.is_file():
            return target
        with target.open("rb") as f:
            first = f.readline(65536)
    except OSError as e:
        raise InputError(f"--storage: cannot read the study journal {target}: {e.strerror or e}") from e
    if first.startswith(b"SQLite format 3"):
        raise InputError(
            f"--storage: {target} is a SQLite database; give it as an RDB URL: sqlite:///{target}"
        )
    if first:
        try:
            op = json.loads(first)
        except ValueError:
            op = None
        if not isinstance(op, dict) or "op_code" not in op:
            raise InputError(
                f"--storage: {target} is not an Optuna study journal (its first line is not one)"
            )
    return target


def journal_storage(path: str) -> optuna.storages.BaseStorage:
    """Optuna's journal storage on the file ``path`` (created, with its folder, if missing)."""
    from optuna.storages.journal import JournalStorage

    target = check_journal(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(_journal_file(str(target)))
    except OSError as e:
        raise InputError(f"--storage: cannot open the study journal {target}: {e.strerror or e}") from e
    except (ValueError, KeyError, TypeError) as e:  # a later line that is not one of its operations
        raise InputError(f"--storage: {target} is not an Optuna study journal ({e})") from e


def _journal_file(path: str) -> Any:
    """Optuna's journal file backend, appending without an ``fsync`` per operation.

    Why: Optuna's backend flushes every operation to the disk; a trial is some 20 operations, and
    on this project's machine those waits were two thirds of a 200-trial study's storage time
    (19.3 s of wall time against 7.7 CPU-s). Without them the journal is as durable as the SQLite
    study was (write-ahead log, ``synchronous=NORMAL``): the operating system holds the last
    appends, so a process that dies loses nothing and a power cut may lose the last operations.
    Appends still take Optuna's lock, so processes sharing the file never interleave a line."""
    from optuna.storages.journal import JournalFileBackend
    from optuna.storages.journal._file import get_lock_file

    class JournalFile(JournalFileBackend):
        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
            with get_lock_file(self._lock), open(self._file_path, "ab") as f:
                f.write(data)

    return JournalFile(path)


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
    """Workers sharing a SQLite or journal study take turns to open and seed it. Optuna's
    ``enqueue_trial(skip_if_exists=True)`` reads then writes, and neither has row locks: two
    workers seeding together each enqueued the baseline, and the duplicate was left waiting for
    ever. A server database (PostgreSQL, MySQL) is not locked here."""
    if storage is None:
        return nullcontext()
    if not is_rdb_url(storage):
        return file_lock(f"{check_journal(storage)}.servesim-lock")
    if not storage.startswith("sqlite"):
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
    store: optuna.storages.BaseStorage | None = None
    existing = 0
    if storage is not None:
        store = study_storage(storage)
        probe = optuna.create_study(
            storage=store, study_name=study_name, directions=directions(objective), load_if_exists=True
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
    if store is None:
        study = optuna.create_study(study_name=study_name, directions=directions(objective), sampler=sampler)
        study.set_user_attr("servesim_fingerprint", fingerprint)
        return study
    return optuna.load_study(study_name=study_name, storage=store, sampler=sampler)


def _direction(name: Direction) -> optuna.study.StudyDirection:
    return (
        optuna.study.StudyDirection.MAXIMIZE if name == "maximize" else optuna.study.StudyDirection.MINIMIZE
    )


__all__ = [
    "fast_sqlite",
    "is_rdb_url",
    "journal_storage",
    "open_study",
    "rdb_storage",
    "seeding_lock",
    "study_storage",
]
