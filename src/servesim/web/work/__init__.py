"""What a job does, inside its worker process: read the stored trace, call the library, and
return the result as JSON-able views (binned and down-sampled here, so the page stays light).

``serve_forever`` is a worker process's loop; ``run_job`` runs one job and reports
``("progress", done, total)`` at most a few times a second, then ``("done", result)`` or
``("error", one-line reason)`` on the queue.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servesim.errors import describe, user_errors

Env = dict[str, str]
#: ``report(done, total)``, or ``report(done, total, extra)`` with a small JSON-able snapshot
#: (a tuning job's trials so far) that the page draws while the job runs.
Report = Callable[..., None]


def serve_forever(inbox: Any, outbox: Any) -> None:
    """A worker process's loop: one job at a time until it reads ``None``."""
    from servesim.services.perf import load_catalog

    load_catalog()  # parsed once per worker, not once per job
    server = multiprocessing.parent_process()
    while True:
        try:
            msg = inbox.get(timeout=1.0)
        except queue.Empty:
            if server is not None and not server.is_alive():
                return  # the server is gone (killed, crashed): never linger
            continue
        if msg is None:
            return
        kind, params, env = msg
        run_job(kind, params, env, outbox)


def run_job(kind: str, params: dict[str, Any], env: Env, queue: Any) -> None:
    """Run one job and put its outcome on ``queue`` (never raises: the supervisor reads the queue)."""
    last = [0.0]

    def report(done: int, total: int, extra: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        if extra is not None or now - last[0] >= 0.2 or done >= total:
            last[0] = now
            queue.put(("progress", int(done), int(total), extra))

    try:
        handler = JOBS[kind]
        result = handler(params, env, report)
    except user_errors() as exc:
        queue.put(("error", describe(exc)[:2000]))
        return
    except Exception as exc:  # a bug, not the user's input: the traceback to the server's log only
        logging.getLogger("servesim.web").error("internal error in a %s job", kind, exc_info=exc)
        queue.put(("error", f"internal error ({type(exc).__name__}): {describe(exc)[:500]}"))
        return
    queue.put(("done", result))


def _simulate(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.web.work.runs import simulate_job

    return simulate_job(params, env, report)


def _saturate(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.web.work.capacity import saturate_job

    return saturate_job(params, env, report)


def _tune(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.web.work.capacity import tune_job

    return tune_job(params, env, report)


def _advise(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.web.work.plans import advise_job

    return advise_job(params, env, report)


def _overlay(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.web.work.bench import overlay_job

    return overlay_job(params, env, report)


JOBS: dict[str, Callable[[dict[str, Any], Env, Report], dict[str, Any]]] = {
    "simulate": _simulate,
    "saturate": _saturate,
    "tune": _tune,
    "advise": _advise,
    "overlay": _overlay,
}


def trace_path(env: Env, trace_id: str) -> Path:
    from servesim.web.storage import check_id

    return Path(env["data_dir"]) / "web" / "traces" / f"{check_id(trace_id)}.parquet"
