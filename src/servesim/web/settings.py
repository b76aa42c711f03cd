"""What one workbench server is allowed to do: where it keeps data and the bounds on every request."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class WebSettings(BaseModel):
    """Server settings (``servesim serve`` flags); every limit bounds what one client can make it do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(description="Folder of the database, stored traces and run records.")
    db_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite in the data folder.")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    token: SecretStr | None = Field(None, description="Every request must carry it (Bearer or cookie).")
    allowed_hosts: frozenset[str] = Field(
        frozenset(), description="Host names the server answers to besides loopback (--allowed-host)."
    )
    max_upload_bytes: int = Field(200 * 1024 * 1024, ge=1, description="Largest trace upload.")
    max_requests_per_trace: int = Field(2_000_000, ge=1, description="Most requests in one trace.")
    max_trials: int = Field(200, ge=1, description="Most trials one tuning job may add.")
    max_concurrent_jobs: int = Field(2, ge=1, description="Jobs running at once (worker processes).")
    max_queued_jobs: int = Field(16, ge=0, description="Jobs waiting for a worker before 429.")
    job_timeout_s: float = Field(1800.0, gt=0, description="A job running longer is stopped.")
    tune_executor: str = Field("local", description="Where a tuning job's trials run: local | process | ray.")
    tune_ray_address: str | None = Field(
        None, description="Ray cluster a ray tuning job joins (None: a local Ray in the job's worker)."
    )

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir / 'workbench.db'}"

    def startup_problem(self) -> str | None:
        """Why this server must not start (None when it may)."""
        if self.host not in LOOPBACK_HOSTS and self.token is None:
            return (
                f"refusing to listen on {self.host}: anything but loopback (127.0.0.1, ::1, localhost) "
                "needs --token or --token-file, and every request must then carry that token"
            )
        if self.token is not None and len(self.token.get_secret_value()) < 16:
            return "the token is too short: use at least 16 characters (e.g. `openssl rand -hex 16`)"
        if self.tune_ray_address is not None and self.tune_executor != "ray":
            return "--tune-ray-address is the Ray cluster of --tune-executor ray (give both, or neither)"
        return None
