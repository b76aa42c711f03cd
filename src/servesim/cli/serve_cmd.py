"""``servesim serve``: the web workbench (FastAPI under uvicorn), on 127.0.0.1:8000 by default.

FastAPI, uvicorn and SQLAlchemy are imported only when the command runs (``servesim --help``
stays fast). Anything but loopback needs a token; the token is never printed or logged.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from servesim.cli.common import read_token
from servesim.errors import ConfigError


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        host: str = typer.Option(
            "127.0.0.1", help="Address to listen on (anything but loopback needs a token)."
        ),
        port: int = typer.Option(8000, min=0, max=65535, help="Port."),
        data_dir: Path | None = typer.Option(
            None, help="Data folder (database, traces, runs); default $SERVESIM_DATA_DIR or the user's."
        ),
        db: str | None = typer.Option(
            None, "--db", help="SQLAlchemy URL (default: SQLite in the data folder)."
        ),
        token: str | None = typer.Option(
            None, help="Require this token on every request (prefer --token-file: argv is visible to others)."
        ),
        token_file: Path | None = typer.Option(None, help="Read the token from this file (first line)."),
        allowed_host: list[str] = typer.Option(
            [], "--allowed-host", help="Also answer to this Host name (repeatable; loopback names always)."
        ),
        max_upload_mb: float = typer.Option(200.0, min=0.001, help="Largest trace upload, MB."),
        max_jobs: int = typer.Option(2, min=1, help="Jobs running at once (one worker process each)."),
        job_timeout_s: float = typer.Option(1800.0, min=1, help="A job running longer is stopped."),
        max_trials: int = typer.Option(200, min=1, help="Most trials one tuning job may add."),
        tune_executor: str = typer.Option(
            "local", help="Where a tuning job's trials run: local | process | ray."
        ),
        tune_ray_address: str | None = typer.Option(
            None,
            "--tune-ray-address",
            help="With --tune-executor ray: the Ray cluster tuning jobs join (e.g. 10.0.0.5:6379); "
            "default: a local Ray started in the job's worker.",
        ),
    ) -> None:
        """Start the web workbench: upload traces, simulate, sweep, tune, plan recovery, compare runs."""
        import logging

        from pydantic import SecretStr

        from servesim.paths import data_dir as resolve_data_dir

        secret = read_token(token, token_file)
        from servesim.web.settings import WebSettings

        settings = WebSettings(
            data_dir=resolve_data_dir(data_dir),
            db_url=db,
            host=host,
            port=port,
            token=SecretStr(secret) if secret else None,
            allowed_hosts=frozenset(allowed_host),
            max_upload_bytes=int(max_upload_mb * 1024 * 1024),
            max_concurrent_jobs=max_jobs,
            job_timeout_s=job_timeout_s,
            max_trials=max_trials,
            tune_executor=tune_executor,
            tune_ray_address=tune_ray_address,
        )
        problem = settings.startup_problem()
        if problem is not None:
            raise ConfigError(problem)
        import uvicorn

        from servesim.web.app import create_app

        web_app = create_app(settings)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        shown = f"[{host}]" if ":" in host else host
        typer.echo(f"servesim workbench on http://{shown}:{port}/ (data: {settings.data_dir})", err=True)
        if settings.token is not None:
            typer.echo("every request needs the token: open the page once as /?token=<your token>", err=True)
        from servesim.cli.stop_signals import Stop, stop_on_signals

        # uvicorn drains on SIGTERM/SIGINT, then raises the signal again for the handler it found:
        # ours turns it into a clean exit 0 (the default would end the process with -15)
        with contextlib.suppress(Stop), stop_on_signals():
            uvicorn.run(web_app, host=host, port=port, access_log=False, log_level="info")
        typer.echo("servesim workbench stopped", err=True)
