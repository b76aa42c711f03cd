"""Background jobs: one worker process per running job, a bounded number at once, each with a
time limit, progress and cancellation; their state lives in the database so it survives a reload.

Why processes (not threads): simulations are CPU-bound Python, and a process can be stopped
(cancel, time limit) without cooperation. The ``forkserver`` start method forks workers from a
clean process that has already imported servesim, so a job starts in milliseconds and never
inherits the server's threads or sockets.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from servesim.actionlog import AdvisorUsage, record_action
from servesim.web.db import FINAL_STATES, Database, JobRow, now_iso
from servesim.web.problems import Problem
from servesim.web.settings import WebSettings
from servesim.web.storage import new_id

_POLL_S = 0.2
#: Imported once by the fork server, so that every job's process starts with them loaded.
PRELOAD = [
    "servesim.web.work",
    "servesim.web.work.runs",
    "servesim.web.work.capacity",
    "servesim.web.work.plans",
    "servesim.web.work.bench",
    "servesim.views.simulation",
    "servesim.views.saturation",
    "servesim.views.tuning",
    "servesim.perf",
    "servesim.cluster",
    "pyarrow.parquet",
    "servesim.engine.records",
    "servesim.report.documents",
    "servesim.views.sparklines",
    "servesim.views.workload",
]
_DB_PROGRESS_EVERY_S = 1.0
#: A worker is replaced after this many jobs (memory a long trace left behind is given back).
_JOBS_PER_WORKER = 25


@dataclass
class LiveJob:
    """What the server knows of a job in flight (SSE reads this; the row is the durable copy)."""

    id: str
    kind: str
    status: str = "queued"
    done: int = 0
    total: int = 0
    version: int = 0
    extra: dict[str, Any] | None = None
    started: float | None = None  # time.monotonic() when it began running
    first: tuple[float, int] | None = None  # (time.monotonic(), done) at the first count above 0
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class JobManager:
    def __init__(self, db: Database, settings: WebSettings, requests_dir: Path) -> None:
        self.db = db
        self.settings = settings
        self.requests_dir = requests_dir
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self._slots = threading.BoundedSemaphore(settings.max_concurrent_jobs)
        self._live: dict[str, LiveJob] = {}
        self._lock = threading.Lock()
        self._warming: threading.Thread | None = None
        self._closing = threading.Event()
        self._idle: queue_mod.Queue[_Worker] = queue_mod.Queue()

    # ------------------------------------------------------------------ API for the routers
    def submit(self, kind: str, title: str, params: dict[str, Any], trace_id: str | None) -> JobRow:
        """Queue a job (429 when too many are waiting); it starts as soon as a worker is free."""
        with self._lock:
            waiting = sum(1 for j in self._live.values() if j.status == "queued")
            if waiting >= self.settings.max_queued_jobs:
                raise Problem(
                    429,
                    f"{waiting} jobs are already waiting for one of {self.settings.max_concurrent_jobs} "
                    "workers: wait for one to finish or cancel one",
                )
            row = JobRow(
                id=new_id(),
                kind=kind,
                title=title[:300],
                created_at=now_iso(),
                status="queued",
                trace_id=trace_id,
                params=params,
                progress_done=0,
                progress_total=0,
            )
            with self.db.session() as s:
                s.add(row)
            live = LiveJob(row.id, kind)
            live.thread = threading.Thread(target=self._supervise, args=(live, params), daemon=True)
            self._live[row.id] = live
            live.thread.start()
        return row

    def warm(self) -> bool:
        """A started worker is waiting (the server's warm-up is over, or a job has run)."""
        return self._idle.qsize() > 0

    def warm_up(self) -> None:
        """Start one worker now (in the background), so the first job does not wait for imports."""

        def start() -> None:
            try:
                worker = _Worker(self._ctx)
            except Exception:  # an optimisation only: a job starts its own worker
                return
            self._idle.put(worker)

        self._warming = threading.Thread(target=start, daemon=True)
        self._warming.start()

    def state(self, job_id: str) -> dict[str, Any] | None:
        """Status and progress now (in flight: memory; else the database)."""
        live = self._live.get(job_id)
        if live is not None and live.status not in FINAL_STATES:
            return {
                "status": live.status,
                "done": live.done,
                "total": live.total,
                "version": live.version,
                "extra": live.extra,
                "eta_s": eta_s(live.done, live.total, live.first, time.monotonic()),
            }
        row = self.db.job(job_id)
        if row is None:
            return None
        return {
            "status": row.status,
            "done": row.progress_done,
            "total": row.progress_total,
            "version": -1,
            "error": row.error,
        }

    def cancel(self, job_id: str) -> bool:
        """Stop a queued or running job; False when it had already ended. A queued job is
        cancelled at once (it reads ``cancelled`` from now on); a running one stops its worker."""
        with self._lock:
            live = self._live.get(job_id)
            if live is None or live.status in FINAL_STATES:
                return False
            live.cancel.set()
            self._cancel_if_queued(live)
        return True

    def _cancel_if_queued(self, live: LiveJob) -> bool:
        """Finish a job that never started as cancelled (caller holds ``_lock``); True if it is
        cancelled (now or before)."""
        if live.cancel.is_set() and live.status == "queued":
            self._finish(live, "cancelled", None, "cancelled before it started", 0.0)
        return live.status == "cancelled"

    def num_running(self) -> int:
        with self.db.session() as s:
            return int(s.scalar(select(func.count()).where(JobRow.status == "running")) or 0)

    def shutdown(self, wait_s: float = 5.0) -> None:
        self._closing.set()
        for live in list(self._live.values()):
            live.cancel.set()
        deadline = time.monotonic() + wait_s
        if self._warming is not None:  # a worker still starting is stopped too, not orphaned
            self._warming.join(wait_s)
        for live in list(self._live.values()):
            if live.thread is not None:
                live.thread.join(max(0.0, deadline - time.monotonic()))
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue_mod.Empty:
                break

    # ------------------------------------------------------------------ the supervisor thread
    def _set(self, live: LiveJob, **values: Any) -> None:
        for k, v in values.items():
            setattr(live, k, v)
        live.version += 1

    def _update_row(self, job_id: str, **values: Any) -> None:
        with self.db.session() as s:
            row = s.get(JobRow, job_id)
            if row is not None:
                for k, v in values.items():
                    setattr(row, k, v)

    def _supervise(self, live: LiveJob, params: dict[str, Any]) -> None:
        try:
            while not self._slots.acquire(timeout=_POLL_S):
                if live.cancel.is_set():
                    with self._lock:  # cancelled, or the server is closing
                        self._cancel_if_queued(live)
                    return
            try:
                self._run(live, params)
            finally:
                self._slots.release()
        except Exception as exc:  # the supervisor itself must never die silently
            self._finish(
                live, "failed", None, f"the job supervisor failed: {type(exc).__name__}: {exc}"[:500], 0.0
            )
        finally:
            with self._lock:
                self._live.pop(live.id, None)

    def _run(self, live: LiveJob, params: dict[str, Any]) -> None:
        with self._lock:  # one transition at a time: ``cancel`` finishes a job still queued
            if live.cancel.is_set():
                self._cancel_if_queued(live)
                return
            self._set(live, status="running", started=time.monotonic())
        started = now_iso()
        self._update_row(live.id, status="running", started_at=started)
        t0 = time.monotonic()
        outcome: tuple[str, dict[str, Any] | None, str | None] = ("failed", None, "no result")
        action_params = {"job": live.id, **params}
        try:
            with record_action(
                live.kind, action_params, interface="web", folder=self.settings.data_dir
            ) as act:
                outcome = self._in_process(live, params)
                status, result, error = outcome
                if status == "done":
                    out = self.requests_dir / f"{live.id}.parquet"
                    if out.exists():
                        act.output(out)
                    usage = (result or {}).get("advisor_usage")
                    if usage:
                        act.advisor = AdvisorUsage.model_validate(usage)
                if status != "done":
                    raise _JobEnded(error or status)
        except _JobEnded:
            pass
        self._finish(live, *outcome, time.monotonic() - t0)

    def _worker(self) -> _Worker:
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue_mod.Empty:
                return _Worker(self._ctx)
            if worker.proc.is_alive():
                return worker
            worker.stop()

    def _in_process(
        self, live: LiveJob, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any] | None, str | None]:
        worker = self._worker()
        worker.inbox.put((live.kind, params, self._job_env(live.id)))
        deadline = time.monotonic() + self.settings.job_timeout_s
        last_db = 0.0
        final: tuple[str, dict[str, Any] | None, str | None] | None = None
        healthy = False
        try:
            while final is None:
                msg = _next(worker.outbox, _POLL_S)
                if msg is None:
                    if live.cancel.is_set():
                        final = (
                            "cancelled",
                            None,
                            "the server stopped before this job finished"
                            if self._closing.is_set()
                            else "cancelled by the user",
                        )
                    elif time.monotonic() > deadline:
                        limit = self.settings.job_timeout_s
                        final = ("failed", None, f"stopped after the per-job time limit of {limit:g} s")
                    elif not worker.proc.is_alive():
                        msg = _next(worker.outbox, 1.0)
                        if msg is None:
                            code = worker.proc.exitcode
                            final = ("failed", None, f"the worker process died (exit code {code})")
                if msg is not None:
                    final = self._handle(live, msg)
                    healthy = final is not None
                    if msg[0] == "progress" and time.monotonic() - last_db > _DB_PROGRESS_EVERY_S:
                        last_db = time.monotonic()
                        self._update_row(live.id, progress_done=live.done, progress_total=live.total)
        finally:
            worker.jobs += 1
            if healthy and worker.jobs < _JOBS_PER_WORKER and not self._closing.is_set():
                self._idle.put(worker)
            else:  # stopped mid-job (cancel, time limit) or due for a fresh process
                worker.stop()
        return final

    def _job_env(self, job_id: str) -> dict[str, str]:
        row = self.db.job(job_id)
        trace = self.db.trace(row.trace_id) if row is not None and row.trace_id else None
        return {
            "job_id": job_id,
            "trace_name": trace.name if trace is not None else "",  # what the results call the trace
            "data_dir": str(self.settings.data_dir),
            "db_url": self.settings.database_url,
            "tune_executor": self.settings.tune_executor,
            "tune_ray_address": self.settings.tune_ray_address or "",
            "requests_file": str(self.requests_dir / f"{job_id}.parquet"),
        }

    def _handle(
        self, live: LiveJob, msg: tuple[Any, ...]
    ) -> tuple[str, dict[str, Any] | None, str | None] | None:
        if msg[0] == "progress":
            extra = msg[3] if len(msg) > 3 and msg[3] is not None else live.extra
            self._set(live, done=int(msg[1]), total=int(msg[2]), extra=extra)
            if live.first is None and live.done > 0:
                live.first = (time.monotonic(), live.done)
            return None
        if msg[0] == "done":
            return ("done", msg[1], None)
        return ("failed", None, str(msg[1]))

    def _finish(
        self, live: LiveJob, status: str, result: dict[str, Any] | None, error: str | None, duration: float
    ) -> None:
        values: dict[str, Any] = {
            "status": status,
            "result": result,
            "error": error,
            "finished_at": now_iso(),
            "duration_s": round(duration, 3),
        }
        if status == "done":
            values["progress_done"] = max(live.done, live.total)
            values["progress_total"] = live.total
        self._update_row(live.id, **values)
        self._set(live, status=status)


class _Worker:
    """A long-lived worker process: runs one job at a time from ``inbox``, reports on ``outbox``."""

    def __init__(self, ctx: Any) -> None:
        from servesim.web import work

        self.inbox = ctx.Queue()
        self.outbox = ctx.Queue()
        self.jobs = 0
        self.proc = ctx.Process(target=work.serve_forever, args=(self.inbox, self.outbox), daemon=True)
        self.proc.start()

    def stop(self) -> None:
        if self.proc.is_alive():
            self.inbox.put(None)
            self.proc.join(0.5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1)
        self.inbox.close()
        self.outbox.close()


def eta_s(done: int, total: int, first: tuple[float, int] | None, now: float) -> float | None:
    """Seconds left at the rate since ``first`` (the ``time.monotonic()`` and count of the first
    report above 0; None before there is a rate to go by), at ``now`` (the same clock: passed in,
    so that the arithmetic is checked without a clock). Not the rate since the start: a run's
    first requests finish only after their whole latency, so the first slice's count says
    nothing of the rate."""
    if first is None or total <= 0 or done >= total:
        return None
    elapsed, gained = now - first[0], done - first[1]
    if elapsed < 0.5 or gained <= 0:
        return None
    return round(elapsed * (total - done) / gained, 1)


def _next(q: Any, timeout: float) -> tuple[Any, ...] | None:
    try:
        msg = q.get(timeout=timeout)
    except queue_mod.Empty:
        return None
    return tuple(msg)


class _JobEnded(Exception):
    """A job that did not succeed (its outcome is already known; the action log records it)."""
