"""Settings from the environment (prefix ``FARM_``); no URL set means embedded SQLite."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

from farm.errors import ConfigError


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    broker_url: str | None
    # Job lease on the database clock; heartbeats renew it every third of its length.
    lease_seconds: int
    # A queued or lost job whose message has not been claimed this long after it was
    # posted is checked against what the broker holds, and posted again if its message is
    # gone (default: twice the lease).
    repost_after: int
    # Redis redelivers an unacknowledged message after this long: it must exceed the
    # longest job (the time limit below), or a running job is handed to a second worker.
    visibility_timeout: int
    max_attempts: int
    # Soft time limit of one job on a worker (the hard limit is 5 minutes later).
    job_time_limit: int
    flower_auth: str | None

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def embedded(self) -> bool:
        return self.database_url.startswith("sqlite")


def _int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def load_settings() -> Settings:
    """Read the ``FARM_*`` environment; no database URL means SQLite in the data dir."""
    data_dir = Path(os.environ.get("FARM_DATA_DIR") or click.get_app_dir("specfarm"))
    data_dir = data_dir.expanduser()
    url = os.environ.get("FARM_DATABASE_URL") or f"sqlite:///{data_dir / 'farm.db'}"
    lease = _int("FARM_LEASE_SECONDS", 300, minimum=5)
    settings = Settings(
        data_dir=data_dir, database_url=url,
        broker_url=os.environ.get("FARM_BROKER_URL") or None,
        lease_seconds=lease,
        repost_after=_int("FARM_REPOST_AFTER", 2 * lease, minimum=5),
        visibility_timeout=_int("FARM_VISIBILITY_TIMEOUT", 12 * 3600, minimum=60),
        max_attempts=_int("FARM_MAX_ATTEMPTS", 3),
        job_time_limit=_int("FARM_JOB_TIME_LIMIT", 6 * 3600, minimum=60),
        flower_auth=os.environ.get("FARM_FLOWER_AUTH") or None)
    if settings.visibility_timeout <= settings.job_time_limit + 300:
        raise ConfigError(
            f"FARM_VISIBILITY_TIMEOUT ({settings.visibility_timeout} s) must exceed the job "
            f"time limit FARM_JOB_TIME_LIMIT ({settings.job_time_limit} s) + 300 s, or Redis "
            "hands a running job to a second worker")
    return settings


def redact_url(url: str) -> str:
    """A database URL fit for logs: the password replaced by ``***``."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
