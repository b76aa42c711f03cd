"""The workbench's database (SQLAlchemy 2): traces and jobs, so history survives a restart.

SQLite in the data folder by default (WAL, so Optuna's studies, stored in the same file by the
tuning jobs, and the server write side by side); any SQLAlchemy URL works via ``--db``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Float, Integer, String, Text, create_engine, event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL_STATES = frozenset({"done", "failed", "cancelled"})


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Base(DeclarativeBase):
    pass


class TraceRow(Base):
    """An uploaded or generated trace (its requests live in a Parquet file named by ``id``)."""

    __tablename__ = "traces"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[str] = mapped_column(String(32))
    origin: Mapped[str] = mapped_column(String(20))  # upload | generated
    num_requests: Mapped[int] = mapped_column(Integer)
    num_dropped: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(80))
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
    dropped: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class BenchRow(Base):
    """An uploaded ``vllm bench serve`` result (the file lives in ``web/bench/<id>.json``)."""

    __tablename__ = "bench_results"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[str] = mapped_column(String(32))
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)


class JobRow(Base):
    """One piece of work (simulate, cluster, saturate, tune, recover, reschedule, advise)."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), index=True)
    title: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[str] = mapped_column(String(32), index=True)
    started_at: Mapped[str | None] = mapped_column(String(32), nullable=True)
    finished_at: Mapped[str | None] = mapped_column(String(32), nullable=True)
    status: Mapped[str] = mapped_column(String(12), index=True)
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class Database:
    """An engine and a session factory; ``session()`` commits on success, rolls back on error."""

    def __init__(self, url: str) -> None:
        is_sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30} if is_sqlite else {}
        )
        if is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        Base.metadata.create_all(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s, s.begin():
            yield s

    def interrupt_unfinished(self) -> int:
        """Jobs a previous server left queued or running: marked failed (their process is gone)."""
        with self.session() as s:
            res = s.execute(
                update(JobRow)
                .where(JobRow.status.in_(("queued", "running")))
                .values(
                    status="failed",
                    error="the server stopped before this job finished",
                    finished_at=now_iso(),
                )
            )
            return int(getattr(res, "rowcount", 0) or 0)

    def job(self, job_id: str) -> JobRow | None:
        with self.session() as s:
            return s.get(JobRow, job_id)

    def trace(self, trace_id: str) -> TraceRow | None:
        with self.session() as s:
            return s.get(TraceRow, trace_id)

    def jobs(self, kind: str | None = None, limit: int = 200) -> list[JobRow]:
        with self.session() as s:
            q = select(JobRow).order_by(JobRow.created_at.desc()).limit(limit)
            if kind is not None:
                q = q.where(JobRow.kind == kind)
            return list(s.scalars(q))

    def traces(self) -> list[TraceRow]:
        with self.session() as s:
            return list(s.scalars(select(TraceRow).order_by(TraceRow.created_at.desc())))

    def bench(self, bench_id: str) -> BenchRow | None:
        with self.session() as s:
            return s.get(BenchRow, bench_id)

    def benches(self) -> list[BenchRow]:
        with self.session() as s:
            return list(s.scalars(select(BenchRow).order_by(BenchRow.created_at.desc())))

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
