"""Where jobs run: in this process, in a local process pool, or on a Ray cluster.

Every executor returns results in the order of the jobs it was given, whatever order they
finish in; with deterministic jobs (``jobs.execute``) the three give identical results, which is
what makes a study reproducible across executors (see ``search.tune``).

* ``local``: one after the other in this process (no start-up cost; what the tests use).
* ``process``: ``concurrent.futures.ProcessPoolExecutor``; its workers are forked from
  multiprocessing's fork server, a fresh process that imported servesim's jobs once (``spawn``
  where there is no fork server), so they never inherit the driver's open database connections
  or threads, and none pays servesim's start-up again: with ``spawn`` every worker of every pool
  imported it (2 CPU-s each), which made ``tune --gpu-types`` of a small trace 9 CPU-s dearer than
  ``--executor local``. The context is sent to each worker once, by its initializer.
* ``ray``: ``ray.init(address)`` (``None``: start a local instance with ``n_jobs`` CPUs; a cluster
  address such as ``ray://host:10001`` or ``auto``: join it, which needs servesim installed on its
  workers); the context is put in the object store once and each job is one task. Ray is an
  optional extra: ``pip install 'servesim[ray]'``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType
from typing import Any, Literal, Protocol, Self

from pydantic import BaseModel

from servesim.errors import InputError, InternalError, shown
from servesim.tuning.jobs import EvalContext, Job, ProbeJob, RunJob, execute

ExecutorKind = Literal["local", "process", "ray"]


class Executor(Protocol):
    """Runs jobs, returning their results in job order."""

    def map(self, jobs: Sequence[Job]) -> list[Any]: ...

    def close(self) -> None: ...


def job_key(job: Job) -> str | None:
    """What a run or probe result depends on besides the context (None: not cached). The probe
    runs without a queue timeout (``evaluate.probe_capacity``), so deployments differing only
    there share it."""
    if isinstance(job, RunJob):
        return f"run|{job.rate!r}|{job.seed}|{job.deployment.model_dump_json()}"
    if isinstance(job, ProbeJob):
        d = job.deployment.model_copy(update={"queue_timeout_s": None})
        return f"probe|{job.rate!r}|{job.seed}|{d.model_dump_json()}"
    return None


class _Base:
    """Results of runs and probes are kept (``job_key``): a job asked again in the same context
    (the same sweep point of two searches, a candidate verified twice) is not simulated again.
    Jobs are deterministic, so a kept result is the one a fresh run gives."""

    _memo: dict[str, Any]
    hits: int = 0

    def map(self, jobs: Sequence[Job]) -> list[Any]:
        memo = self.__dict__.setdefault("_memo", {})
        keys = [job_key(j) for j in jobs]
        todo: dict[str | int, Job] = {}
        for i, (k, j) in enumerate(zip(keys, jobs, strict=True)):
            if k is None:
                todo[i] = j
            elif k not in memo and k not in todo:
                todo[k] = j
        fresh = dict(zip(todo, self._run(list(todo.values())), strict=True)) if todo else {}
        out: list[Any] = []
        for i, k in enumerate(keys):
            if k is None:
                out.append(fresh[i])
                continue
            if k in fresh:
                memo[k] = fresh.pop(k)
                out.append(memo[k])
            else:
                self.hits += 1
                out.append(memo[k])
        # A caller may change what it got (a RunMetrics' violations): each gets its own copy.
        return [r.model_copy(deep=True) if isinstance(r, BaseModel) else r for r in out]

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        return None


class LocalExecutor(_Base):
    """Runs every job in this process, in order."""

    kind = "local"

    def __init__(self, ctx: EvalContext) -> None:
        self.ctx = ctx

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        return [execute(self.ctx, j) for j in jobs]


_WORKER_CTX: EvalContext | None = None


def _init_worker(ctx: EvalContext) -> None:
    global _WORKER_CTX
    _WORKER_CTX = ctx


def _run_in_worker(job: Job) -> Any:
    if _WORKER_CTX is None:
        raise InternalError("worker started without a context")
    return execute(_WORKER_CTX, job)


def _pool_context() -> Any:
    """The fork server where the platform has one (Linux, macOS), else ``spawn``. The server
    imports the jobs' modules once: the first pool starts it, later pools of the same command
    fork from it too. (A preload asked for after the server started changes nothing.)"""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["servesim.tuning.jobs"])
    return ctx


class ProcessExecutor(_Base):
    """A local process pool of ``n_jobs`` workers."""

    kind = "process"

    def __init__(self, ctx: EvalContext, n_jobs: int = 2) -> None:
        if n_jobs < 1:
            raise InputError(f"n_jobs must be >= 1, got {n_jobs}")
        self.ctx = ctx
        self._pool = ProcessPoolExecutor(
            max_workers=n_jobs,
            mp_context=_pool_context(),
            initializer=_init_worker,
            initargs=(ctx,),
        )

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        return list(self._pool.map(_run_in_worker, jobs))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _ray_execute(ctx: EvalContext, job: Job) -> Any:
    return execute(ctx, job)


class RayExecutor(_Base):
    """Jobs as Ray tasks; the context goes to the object store once."""

    kind = "ray"

    def __init__(self, ctx: EvalContext, n_jobs: int = 2, address: str | None = None) -> None:
        if address is None and "ray" not in sys.modules:
            # A local instance's workers run this very interpreter (servesim is importable there):
            # Ray's `uv run` hook, which would rebuild the environment from the current directory
            # and refuses to when that is not the project, is not needed.
            os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        try:
            # Before Ray reads it (at import): see the note at ray.init below.
            os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
            import ray
        except ImportError:
            raise InputError(
                "the ray executor needs Ray: pip install 'servesim[ray]' (or use --executor process)"
            ) from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": False,
            }
            if address is None:
                kwargs["num_cpus"] = n_jobs
                # Under `uv run`, Ray would start its workers with the same uv command inside a
                # copy of the working directory (a relative `.tools/bin/uv` is then missing and
                # the workers never start). A local instance shares this interpreter instead.
                os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
            try:
                ray.init(address=address, **kwargs)
            except Exception as exc:  # Ray raises RuntimeError, ConnectionError, ValueError...
                where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
                raise InputError(f"cannot start {where}: {' '.join(str(exc).split())}") from exc
            self._started = True
        self.ctx = ctx
        self._ctx_ref = ray.put(ctx)
        self._task = ray.remote(num_cpus=1)(_ray_execute)

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        refs = [self._task.remote(self._ctx_ref, j) for j in jobs]
        return list(self._ray.get(refs))

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False


def make_executor(
    kind: ExecutorKind, ctx: EvalContext, *, n_jobs: int = 2, address: str | None = None
) -> LocalExecutor | ProcessExecutor | RayExecutor:
    """The executor of that kind (``address`` only for Ray)."""
    if address is not None and kind != "ray":
        raise InputError("--address only applies to --executor ray")
    if kind == "local":
        return LocalExecutor(ctx)
    if kind == "process":
        return ProcessExecutor(ctx, n_jobs)
    if kind == "ray":
        return RayExecutor(ctx, n_jobs, address)
    raise InputError(f"unknown executor {shown(kind)}; use local, process or ray")
