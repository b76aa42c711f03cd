"""The app factory: ``create_app(settings)`` wires the database, storage, jobs, errors and routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.staticfiles import StaticFiles

from servesim import __version__
from servesim.errors import ConfigError
from servesim.web import openapi, problems
from servesim.web.db import Database
from servesim.web.jobs import JobManager
from servesim.web.security import BodyLimitMiddleware, SecurityMiddleware
from servesim.web.settings import WebSettings
from servesim.web.storage import Storage

STATIC = Path(__file__).parent / "static"


@dataclass
class Workbench:
    """What every route needs (``request.app.state.workbench``)."""

    settings: WebSettings
    db: Database
    storage: Storage
    jobs: JobManager


def workbench(request: Request) -> Workbench:
    wb: Workbench = request.app.state.workbench
    return wb


def create_app(settings: WebSettings) -> FastAPI:
    problem = settings.startup_problem()
    if problem is not None:
        raise ConfigError(problem)
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # the default SQLite file lives there
    db = Database(settings.database_url)
    db.interrupt_unfinished()
    storage = Storage(settings.data_dir)
    jobs = JobManager(db, settings, storage.root / "runs")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        jobs.warm_up()
        try:
            yield
        finally:
            jobs.shutdown()
            db.dispose()

    app = FastAPI(
        title="servesim workbench",
        version=__version__,
        description="Upload a trace, simulate vLLM's scheduler, sweep load, tune, plan recovery. "
        "Errors are RFC 9457 problem details.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI needs a CDN and inline script: the schema is at /api/openapi.json
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.workbench = Workbench(settings, db, storage, jobs)
    problems.install(app)
    app.openapi = lambda: openapi.build(app, settings)  # type: ignore[method-assign]
    from servesim.web.routers import bench, catalog, pages, plans, runs, traces
    from servesim.web.routers import jobs as jobs_router

    for module in (traces, runs, bench, jobs_router, plans, catalog, pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(GZipMiddleware, minimum_size=1024)  # the 4.8 MB Plotly bundle, JSON; not SSE
    app.add_middleware(BodyLimitMiddleware, upload_limit=settings.max_upload_bytes)
    token = settings.token.get_secret_value() if settings.token is not None else None
    app.add_middleware(SecurityMiddleware, token=token, allowed_hosts=settings.allowed_hosts)
    return app
